"""The sink writes a window result with the fields of ``service/contract/result_record.py``,
in its order and of its JSON types: the layout the compaction job reads back."""

from __future__ import annotations

from typing import Any, cast

import orjson
import pytest
from aiokafka import TopicPartition

from service.contract.result_record import (
    UPSERT_OP,
    UPSERT_RESULT_FIELDS,
    WINDOW_FIELDS,
    WINDOW_RESULT_FIELDS,
)
from service.operators.base import FireKind, Upsert, WindowResult
from service.runtime.definition import PipelineDefinition, SinkSettings
from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.partition.sinks import OutputSink

JSON_TYPES: dict[str, type] = {"string": str, "integer": int, "object": dict, "window": dict}


class Values:
    def __init__(self) -> None:
        self.values: list[bytes] = []

        self.records: list[tuple[Any, Any, Any]] = []

    def append(self, topic: str, partition: int, key: Any, value: bytes, *rest: Any) -> None:
        self.values.append(value)
        self.records.append((key, value, rest[0] if rest else None))


def sink_of(out: Values) -> OutputSink:
    definition = PipelineDefinition(
        name="p",
        topics=("in",),
        sink=SinkSettings("p.out", "p.dlq", None),
        operator_factory=cast(Any, None),
    )
    return OutputSink(definition, cast(BatchProducer, out), {"p.out": 1, "p.dlq": 1})


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


def test_an_upsert_has_the_contract_s_fields_and_a_delete_is_a_tombstone() -> None:
    out = Values()
    sink_of(out).results(
        TopicPartition("in", 0),
        [Upsert("p|k", "k", {"n": 3}, 2, 1234), Upsert("p|k", "k", None, 3, 1300)],
        {},
    )
    (key, value, timestamp), tombstone = out.records
    record = orjson.loads(value)
    assert list(record) == list(UPSERT_RESULT_FIELDS)
    for name, kind in UPSERT_RESULT_FIELDS.items():
        assert isinstance(record[name], JSON_TYPES[kind]), name
    assert record == {
        "pipeline": "p",
        "key": "k",
        "result": {"n": 3},
        "op": UPSERT_OP,
        "seq": 2,
        "id": "p|k",
    }
    assert (key, timestamp) == (b"k", 1234)
    assert tombstone == (b"k", None, 1300)
