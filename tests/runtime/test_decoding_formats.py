"""The decoder over Avro sources: decoded records key, timestamp and step as JSON ones
do, and a record that does not decode is a dead letter with the format's reason (no
broker, no registry)."""

from __future__ import annotations

from io import BytesIO
from typing import Any, NamedTuple

import orjson
from fastavro import parse_schema, schemaless_writer

from service.operators.steps import StepProgram
from service.runtime.definition import (
    FormatSettings,
    PipelineDefinition,
    SinkSettings,
    TimestampSettings,
)
from service.runtime.formats.wire import frame
from service.runtime.partition.decoding import DeadLetter, RecordDecoder

SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "user", "type": ["null", "string"]},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "order",
            "type": {
                "type": "record",
                "name": "O",
                "fields": [{"name": "amount", "type": "double"}],
            },
        },
    ],
}


class Record(NamedTuple):
    key: bytes | None
    value: bytes | None
    offset: int
    timestamp: int = 0
    headers: tuple[Any, ...] = ()


def avro(value: dict[str, Any]) -> bytes:
    out = BytesIO()
    schemaless_writer(out, parse_schema(SCHEMA), value)
    return out.getvalue()


def decoder(
    key: str = "user", ts: str = "ts", raw: bool = False, steps: list[Any] | None = None
) -> RecordDecoder:
    definition = PipelineDefinition(
        name="p",
        topics=("in",),
        sink=SinkSettings(topic="out", dead_letter_topic="out.dlq"),
        operator_factory=lambda clock: None,  # type: ignore[arg-type,return-value]
        key_field=key,
        timestamp=TimestampSettings(source="field", field=ts),
        steps=StepProgram(steps) if steps else None,
        format=FormatSettings(
            kind="avro", avro_schema=orjson.dumps(SCHEMA).decode() if raw else None
        ),
    )
    found = RecordDecoder(definition)
    if not raw:
        assert found.schemas is not None
        found.schemas.add(7, "AVRO", orjson.dumps(SCHEMA).decode())
    return found


def decode(found: RecordDecoder, *values: bytes | None) -> tuple[list[Any], list[DeadLetter]]:
    records = [Record(None, v, 10 + i) for i, v in enumerate(values)]
    inputs: list[Any] = []
    failed: list[DeadLetter] = []
    found.decode(records, inputs, failed)
    return inputs, failed


ONE = {"user": "u1", "ts": 1000, "order": {"amount": 2.5}}


def test_avro_records_are_keyed_and_timestamped_as_json_ones() -> None:
    no_user = {**ONE, "user": None}
    inputs, failed = decode(decoder(), frame(7, avro(ONE)), frame(7, avro(no_user)))
    assert [(k, ts, v, pos) for k, ts, v, pos, _ in inputs] == [("u1", 1000, ONE, 10)]
    assert [(f.reason, f.error) for f in failed] == [("missing_key", "missing key field 'user'")]


def test_nested_fields_are_read_by_path_and_steps_run_on_avro_records() -> None:
    inputs, _ = decode(decoder(key="order.amount"), frame(7, avro(ONE)))
    assert [k for k, *_ in inputs] == ["2.5"]
    inputs, failed = decode(
        decoder(steps=[{"set": {"big": "order.amount > 2"}}, {"filter": "big"}]),
        frame(7, avro(ONE)),
        frame(7, avro({**ONE, "order": {"amount": 1.0}})),
    )
    assert failed == []
    assert [v["big"] for _, _, v, _, _ in inputs] == [True]


def test_records_that_do_not_decode_are_dead_letters_with_the_reason() -> None:
    found = decoder()
    assert found.schemas is not None
    found.schemas.absent(8)
    inputs, failed = decode(
        found, orjson.dumps(ONE), frame(8, avro(ONE)), frame(7, b"\x02"), frame(7, avro(ONE))
    )
    assert [pos for *_, pos, _ in inputs] == [13]
    assert [(f.reason, f.source.offset) for f in failed] == [
        ("bad_magic", 10),
        ("unknown_schema", 11),
        ("undecodable", 12),
    ]


def test_raw_avro_needs_no_registry() -> None:
    found = decoder(raw=True)
    assert found.schemas is None
    inputs, failed = decode(found, avro(ONE), b"")
    assert [k for k, *_ in inputs] == ["u1"]
    assert [f.reason for f in failed] == ["undecodable"]
