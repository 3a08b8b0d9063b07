"""Avro payloads decode into what JSON would have given (runtime/formats/avro.py); no
broker, no registry: the writer schemas are put into the cache by hand."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from io import BytesIO
from typing import Any, NamedTuple

import orjson
import pytest
from fastavro import parse_schema, schemaless_writer

from service.runtime.formats import avro
from service.runtime.formats.base import FAILED, Failure, SchemaNotResolved
from service.runtime.formats.schemas import Reference
from service.runtime.formats.wire import frame, schema_id_of


class Record(NamedTuple):
    value: bytes | None


ORDER: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "amount", "type": "double"},
    ],
}
ORDER_V2: dict[str, Any] = {
    **ORDER,
    "fields": [*ORDER["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}],
}


def encode(schema: dict[str, Any], value: dict[str, Any]) -> bytes:
    """``value`` as fastavro itself writes it (logical types from Python values)."""
    out = BytesIO()
    schemaless_writer(out, parse_schema(schema), value)
    return out.getvalue()


def read(reader: Any, *values: bytes | None) -> tuple[list[Any], list[Failure]]:
    out: list[Any] = []
    failures: list[Failure] = []
    reader.read([Record(v) for v in values], out, failures)
    return out, failures


def framed_reader(**schemas: dict[str, Any]) -> avro.FramedAvroReader:
    cache = avro.registry_schemas()
    for name, schema in schemas.items():
        cache.add(int(name.removeprefix("id")), "AVRO", orjson.dumps(schema).decode())
    return avro.FramedAvroReader(cache)


def test_a_batch_of_framed_records_decodes_each_with_its_own_writer_schema() -> None:
    reader = framed_reader(id1=ORDER, id2=ORDER_V2)
    old = frame(1, encode(ORDER, {"user": "u1", "ts": 1000, "amount": 2.5}))
    new = frame(2, encode(ORDER_V2, {"user": "u2", "ts": 2000, "amount": 1.0, "coupon": "c"}))
    values, failures = read(reader, old, new, old)
    assert failures == []
    assert values == [
        {"user": "u1", "ts": 1000, "amount": 2.5},
        {"user": "u2", "ts": 2000, "amount": 1.0, "coupon": "c"},
        {"user": "u1", "ts": 1000, "amount": 2.5},
    ]


def test_bad_magic_unknown_schema_and_undecodable_are_told_apart() -> None:
    reader = framed_reader(id1=ORDER)
    reader.schemas.absent(9)
    good = frame(1, encode(ORDER, {"user": "u", "ts": 1, "amount": 0.0}))
    truncated = good[:-3]
    trailing = good + b"\x00"
    values, failures = read(
        reader, b'{"user": "u"}', good, frame(9, b"\x02u"), truncated, None, b"\x00\x00", trailing
    )
    assert [v is FAILED for v in values] == [True, False, True, True, True, True, True]
    assert [reason for _, reason, _ in failures] == [
        "bad_magic",
        "unknown_schema",
        "undecodable",
        "bad_magic",
        "bad_magic",
        "undecodable",
    ]
    assert "no schema with id 9" in failures[1][2]


def test_a_truncated_record_does_not_read_into_the_next_one() -> None:
    reader = framed_reader(id1=ORDER)
    first = frame(1, encode(ORDER, {"user": "a", "ts": 1, "amount": 1.0}))
    second = frame(1, encode(ORDER, {"user": "b", "ts": 2, "amount": 2.0}))
    values, failures = read(reader, first[:-8], second)
    assert values[0] is FAILED and failures[0][1] == "undecodable"
    assert values[1] == {"user": "b", "ts": 2, "amount": 2.0}


def test_an_id_nobody_resolved_is_never_a_dead_letter() -> None:
    reader = framed_reader(id1=ORDER)
    with pytest.raises(SchemaNotResolved):
        read(reader, frame(2, b""))
    assert reader.schemas.missing([Record(frame(2, b"")), Record(b"{}")]) == {2}


def test_a_schema_of_another_format_or_that_does_not_parse_is_unknown() -> None:
    cache = avro.registry_schemas()
    cache.add(1, "PROTOBUF", "syntax = 'proto3';")
    cache.add(2, "AVRO", '{"type": "nonsense"}')
    values, failures = read(avro.FramedAvroReader(cache), frame(1, b""), frame(2, b""))
    assert values == [FAILED, FAILED]
    assert [(r, "PROTOBUF" in d or "parse" in d) for _, r, d in failures] == [
        ("unknown_schema", True),
        ("unknown_schema", True),
    ]


LOGICAL: dict[str, Any] = {
    "type": "record",
    "name": "Everything",
    "namespace": "t",
    "fields": [
        {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local_ms", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tod", "type": {"type": "int", "logicalType": "time-millis"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "raw", "type": "bytes"},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}},
        {
            "name": "nested",
            "type": {
                "type": "record",
                "name": "Inner",
                "fields": [
                    {"name": "tags", "type": {"type": "array", "items": "string"}},
                    {"name": "counts", "type": {"type": "map", "values": "long"}},
                    {
                        "name": "when",
                        "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
                    },
                ],
            },
        },
        {"name": "maybe", "type": ["null", "Inner"], "default": None},
    ],
}


def test_logical_types_and_nesting_read_as_json_has_them() -> None:
    at = dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    at_ms = 1704164645678
    the_id = uuid.UUID("12345678-1234-5678-1234-567812345678")
    datum = {
        "ms": at,
        "us": at,
        "local_ms": at.replace(tzinfo=None),
        "day": dt.date(2024, 1, 2),
        "tod": dt.time(3, 4, 5),
        "price": decimal.Decimal("12.34"),
        "id": the_id,
        "raw": b"\x00\xff",
        "color": "BLUE",
        "nested": {"tags": ["a"], "counts": {"x": 1}, "when": at},
        "maybe": None,
    }
    values, failures = read(avro.RawAvroReader(avro.parse(LOGICAL)), encode(LOGICAL, datum))
    assert failures == []
    assert values == [
        {
            "ms": at_ms,
            "us": at_ms,
            "local_ms": at_ms,
            "day": "2024-01-02",
            "tod": (3 * 3600 + 4 * 60 + 5) * 1000,
            "price": 12.34,
            "id": str(the_id),
            "raw": "AP8=",
            "color": "BLUE",
            "nested": {"tags": ["a"], "counts": {"x": 1}, "when": at_ms},
            "maybe": None,
        }
    ]


def test_a_schema_without_such_types_needs_no_conversion_pass() -> None:
    assert avro.parse(ORDER).convert is None
    assert avro.parse(LOGICAL).convert is not None


def test_raw_avro_reads_values_without_framing_and_refuses_empty_ones() -> None:
    reader = avro.RawAvroReader(avro.parse(ORDER))
    values, failures = read(reader, encode(ORDER, {"user": "u", "ts": 5, "amount": 1.5}), None)
    assert values == [{"user": "u", "ts": 5, "amount": 1.5}, FAILED]
    assert [r for _, r, _ in failures] == ["undecodable"]


def test_the_wire_header_names_the_schema_id() -> None:
    assert schema_id_of(frame(70000, b"x")) == 70000
    assert schema_id_of(b"\x01\x00\x00\x00\x01") is None
    assert schema_id_of(None) is None


def test_the_compiled_reader_is_used_only_while_it_reads_as_schemaless_reader_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert avro._compiled_reader()[0] is avro.fastavro_read._read_data

    def changed(stream: Any, writer: Any, named: Any, reader: Any, extra: Any) -> Any:
        raise AssertionError("not reached: the signature no longer fits")

    monkeypatch.setattr(avro.fastavro_read, "_read_data", changed)
    assert avro._compiled_reader() == (avro._schemaless, avro._no_named_schemas)


def test_the_fallback_reader_reads_what_the_compiled_one_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    value = {"user": "u1", "ts": dt.datetime(2024, 1, 1, tzinfo=dt.UTC), "amount": 2.5}
    framed = frame(7, encode(ORDER, value))
    compiled, _ = read(framed_reader(id7=ORDER), framed)
    monkeypatch.setattr(avro, "_read_datum", avro._schemaless)
    monkeypatch.setattr(avro, "_named_schemas", avro._no_named_schemas)
    fallback, _ = read(framed_reader(id7=ORDER), framed)
    assert fallback == compiled == [{"user": "u1", "ts": 1704067200000, "amount": 2.5}]


MONEY: dict[str, Any] = {
    "type": "record",
    "name": "Money",
    "namespace": "shop",
    "fields": [
        {"name": "currency", "type": "shop.Currency"},
        {
            "name": "units",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
    ],
}
CURRENCY: dict[str, Any] = {
    "type": "enum",
    "name": "Currency",
    "namespace": "shop",
    "symbols": ["EUR", "USD"],
}
PRICED: dict[str, Any] = {
    "type": "record",
    "name": "Priced",
    "namespace": "shop",
    "fields": [{"name": "user", "type": "string"}, {"name": "price", "type": "shop.Money"}],
}


def reference(name: str, schema: Any, subject: str | None = None) -> Reference:
    return Reference(name, subject or name, 1, "AVRO", orjson.dumps(schema).decode())


def test_named_types_from_references_read_as_if_defined_in_the_schema() -> None:
    """A reference's own reference comes first (the client's order); the decimal in a
    referenced type still gets its conversion."""
    cache = avro.registry_schemas()
    references = [reference("shop.Currency", CURRENCY), reference("shop.Money", MONEY)]
    cache.add(1, "AVRO", orjson.dumps(PRICED).decode(), references)
    named: dict[str, Any] = {}  # as a producer parses them
    parse_schema(CURRENCY, named)
    parse_schema(MONEY, named)
    out = BytesIO()
    datum = {"user": "u", "price": {"currency": "USD", "units": decimal.Decimal("12.34")}}
    schemaless_writer(out, parse_schema(PRICED, named), datum)
    values, failures = read(avro.FramedAvroReader(cache), frame(1, out.getvalue()))
    assert failures == []
    assert values == [{"user": "u", "price": {"currency": "USD", "units": 12.34}}]


def test_a_reference_named_twice_is_parsed_once() -> None:
    currency = reference("shop.Currency", CURRENCY)
    parsed = avro.parse(PRICED, [currency, reference("shop.Money", MONEY), currency])
    assert "shop.Money" in parsed.named["writer"]


def test_a_named_type_no_reference_defines_is_an_unknown_schema() -> None:
    cache = avro.registry_schemas()
    cache.add(1, "AVRO", orjson.dumps(PRICED).decode(), [reference("shop.Currency", CURRENCY)])
    values, failures = read(avro.FramedAvroReader(cache), frame(1, b"\x02u"))
    assert values == [FAILED]
    assert failures[0][1] == "unknown_schema"
    assert "shop.Money" in failures[0][2]


def test_a_reference_of_another_format_is_an_unknown_schema() -> None:
    cache = avro.registry_schemas()
    money = Reference("shop.Money", "money", 3, "JSON", "{}")
    cache.add(1, "AVRO", orjson.dumps(PRICED).decode(), [money])
    values, failures = read(avro.FramedAvroReader(cache), frame(1, b"\x02u"))
    assert values == [FAILED]
    assert failures[0][1:] == (
        "unknown_schema",
        "schema 1 references 'shop.Money' (subject 'money', version 3), which is JSON, not AVRO",
    )


def test_an_unresolved_schema_is_an_unknown_schema_with_the_reason() -> None:
    cache = avro.registry_schemas()
    cache.unresolved(1, "references 'shop.Money' (...), which the registry does not have")
    values, failures = read(avro.FramedAvroReader(cache), frame(1, b"\x02u"))
    assert values == [FAILED]
    assert failures[0][1:] == (
        "unknown_schema",
        "schema 1 references 'shop.Money' (...), which the registry does not have",
    )
