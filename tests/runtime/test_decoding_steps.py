"""The decoder runs the steps before the key and the timestamp (no broker needed)."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from service.core.shuffle import position
from service.operators.steps import StepProgram
from service.runtime.definition import PipelineDefinition, SinkSettings, TimestampSettings
from service.runtime.partition.decoding import DeadLetter, RecordDecoder, TableDecoder


class Record(NamedTuple):
    key: bytes | None
    value: bytes
    offset: int
    timestamp: int = 0
    headers: tuple[Any, ...] = ()


def decoder(steps: list[dict[str, Any]]) -> RecordDecoder:
    definition = PipelineDefinition(
        name="p",
        topics=("in",),
        sink=SinkSettings(topic="out", dead_letter_topic="out.dlq"),
        operator_factory=lambda clock: None,  # type: ignore[arg-type,return-value]
        key_field="uid",
        timestamp=TimestampSettings(source="field", field="ts"),
        steps=StepProgram(steps),
    )
    return RecordDecoder(definition)


def decode(steps: list[dict[str, Any]], *values: Any) -> tuple[list[Any], list[DeadLetter]]:
    records = [Record(None, orjson.dumps(v), 10 + i) for i, v in enumerate(values)]
    inputs: list[Any] = []
    failed: list[DeadLetter] = []
    decoder(steps).decode(records, inputs, failed)
    return inputs, failed


def test_steps_compute_the_key_and_the_timestamp() -> None:
    inputs, failed = decode(
        [{"set": {"uid": "LOWER(user)", "ts": "at_s * 1000"}}], {"user": "AB", "at_s": 5}
    )
    assert failed == []
    assert [(k, ts, pos) for k, ts, _, pos, _ in inputs] == [("ab", 5000, 10)]


def test_a_filtered_record_gives_no_input_and_no_dead_letter() -> None:
    inputs, failed = decode([{"filter": "uid <> 'x'"}], {"uid": "x", "ts": 1})
    assert (inputs, failed) == ([], [])


def test_unnested_records_keep_the_offset_with_their_index() -> None:
    inputs, _ = decode(
        [{"unnest": "xs", "as": "uid"}], {"xs": ["a", "b"], "ts": 1}, {"xs": ["c"], "ts": 2}
    )
    assert [(k, pos) for k, _, _, pos, _ in inputs] == [
        ("a", position(10, 0)),
        ("b", position(10, 1)),
        ("c", position(11, 0)),
    ]
    assert [source.offset for *_, source in inputs] == [10, 10, 11]


def test_a_failing_step_is_a_dead_letter_with_its_index() -> None:
    inputs, failed = decode(
        [{"filter": "TRUE"}, {"set": {"uid": "name * 2"}}], {"name": "x", "ts": 1}
    )
    assert inputs == []
    (letter,) = failed
    assert letter.reason == "step_failed"
    assert letter.headers == (("clockwork.step", b"1"),)
    assert "STRING" in letter.error


def table_decoder(steps: list[dict[str, Any]]) -> TableDecoder:
    """A table source's decoder, its rows keyed by the Kafka key (the primary key)."""
    definition = PipelineDefinition(
        name="p",
        topics=("in",),
        sink=SinkSettings(topic="out", dead_letter_topic="out.dlq"),
        operator_factory=lambda clock: None,  # type: ignore[arg-type,return-value]
        timestamp=TimestampSettings(source="field", field="ts"),
        steps=StepProgram(steps),
        table=True,
    )
    return TableDecoder(RecordDecoder(definition), positioned=False)


def test_a_table_s_version_the_filter_drops_is_its_primary_key_s_delete() -> None:
    records = [
        Record(b"k1", orjson.dumps({"amount": 5, "ts": 7}), 10, timestamp=1),
        Record(b"k1", orjson.dumps({"amount": -1, "ts": 8}), 11, timestamp=2),
        Record(b"k2", orjson.dumps({"amount": -2}), 12, timestamp=3),  # no event time
        Record(b"k1", None, 13, timestamp=4),  # type: ignore[arg-type]  # a tombstone
    ]
    inputs: list[Any] = []
    failed: list[DeadLetter] = []
    table_decoder([{"filter": "amount > 0"}]).decode(records, inputs, failed)
    assert failed == []
    assert [(k, ts, v, pos) for k, ts, v, pos, _ in inputs] == [
        ("k1", 7, {"amount": 5, "ts": 7}, 10),
        ("k1", 8, None, 11),
        ("k2", 3, None, 12),
        ("k1", 4, None, 13),
    ]
