"""The sink writes a window result with the fields of ``service/contract/result_record.py``,
in its order and of its JSON types: the layout the compaction job reads back."""

from __future__ import annotations

from typing import Any, cast

import orjson
import pytest
from aiokafka import TopicPartition

from service.contract.result_record import WINDOW_FIELDS, WINDOW_RESULT_FIELDS
from service.operators.base import FireKind, WindowResult
from service.runtime.definition import PipelineDefinition, SinkSettings
from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.partition.sinks import OutputSink

JSON_TYPES: dict[str, type] = {"string": str, "integer": int, "object": dict, "window": dict}


class Values:
    def __init__(self) -> None:
        self.values: list[bytes] = []

    def append(self, topic: str, partition: int, key: Any, value: bytes, *rest: Any) -> None:
        self.values.append(value)


def written(result: WindowResult) -> dict[str, Any]:
    definition = PipelineDefinition(
        name="p",
        topics=("in",),
        sink=SinkSettings("p.out", "p.dlq", None),
        operator_factory=cast(Any, None),
    )
    out = Values()
    sink = OutputSink(definition, cast(BatchProducer, out), {"p.out": 1, "p.dlq": 1})
    sink.results(TopicPartition("in", 0), [result], {})
    (value,) = out.values
    return cast(dict[str, Any], orjson.loads(value))


@pytest.mark.parametrize("fire", list(FireKind))
def test_a_window_result_has_the_contract_s_fields(fire: FireKind) -> None:
    record = written(WindowResult("id-1", "k", 0, 60_000, {"n": 3}, fire, 0, 59_999))
    assert list(record) == list(WINDOW_RESULT_FIELDS)
    for name, kind in WINDOW_RESULT_FIELDS.items():
        assert isinstance(record[name], JSON_TYPES[kind]), name
    assert list(record["window"]) == list(WINDOW_FIELDS)
    assert all(isinstance(record["window"][b], int) for b in WINDOW_FIELDS)
