"""Avro payloads with fastavro: Confluent-framed (the writer schema by registry id) or
raw (one writer schema for the whole topic, given in the spec).

A decoded record is what JSON would have given (docs/formats.md): records and maps as
dicts, arrays as lists, a union as its branch's value, enums as strings, and the
logical types as JSON has them: ``timestamp-millis``/``-micros`` (and the ``local-``
ones) as epoch milliseconds, ``date`` as ``"YYYY-MM-DD"``, ``decimal`` as a float,
``uuid`` as its string, ``time-millis``/``-micros`` as the integer of the day;
``bytes`` and ``fixed`` as base64 text. fastavro does not know ``timestamp-nanos``:
it reads as its long (nanoseconds).

How: the writer schema is rewritten once (per schema, not per record) so fastavro
returns the JSON form itself where it can: the logical types that are already a number
or a string in JSON lose their ``logicalType`` and read as the plain long or string. Only
a schema with a type JSON has no form for (microsecond timestamps, decimals,
dates, bytes) gets a conversion pass over each decoded value.

A batch is decoded from one stream over the joined values: one fastavro call per
record, no ``BytesIO`` per record; a record that reads past its own end (or stops short
of it) is undecodable, whatever the bytes after it are.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections.abc import Callable, Iterator, Sequence
from io import BytesIO
from itertools import accumulate
from typing import Any

import orjson
from fastavro import _read as fastavro_read
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from service.runtime.formats.base import FAILED, Failure
from service.runtime.formats.schemas import Reference, WriterSchemas
from service.runtime.formats.wire import HEADER_SIZE, REASON_UNDECODABLE, frame

SCHEMA_TYPE = "AVRO"

_PLAIN = {
    "timestamp-millis",
    "local-timestamp-millis",
    "time-millis",
    "time-micros",
    "uuid",
}
"""Logical types whose underlying long or string is already their JSON form."""
_CONVERTED = {
    "timestamp-micros",
    "local-timestamp-micros",
    "date",
    "decimal",
}
"""Logical types read by fastavro and converted afterwards (no JSON form as they come)."""


def _schemaless(stream: BytesIO, parsed: Any, named: Any, reader_schema: None) -> Any:
    return schemaless_reader(stream, parsed, reader_schema)


def _no_named_schemas() -> dict[str, dict[str, Any]]:
    return {"writer": {}, "reader": {}}


_PROBE_SCHEMA = {
    "type": "record",
    "name": "Probe",
    "fields": [
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "again", "type": ["null", "Kind"]},
        {"name": "n", "type": "long"},
    ],
}
_PROBE_DATUM = {"kind": "B", "again": "A", "n": -3}


def _compiled_reader() -> tuple[
    Callable[[BytesIO, Any, Any, None], Any], Callable[[], dict[str, dict[str, Any]]]
]:
    """fastavro's compiled reader ``_read_data`` and its named-types factory, without
    ``schemaless_reader``'s per-call set-up (named types gathered, the schema checked as
    parsed); ``schemaless_reader`` where fastavro lacks them or they no longer read a
    probe datum as ``schemaless_reader`` does. They are private: a fastavro release
    that changes them falls back to the slower path instead of failing every record."""
    read = getattr(fastavro_read, "_read_data", None)
    named_schemas = getattr(fastavro_read, "_default_named_schemas", None)
    if read is None or named_schemas is None:
        return _schemaless, _no_named_schemas
    try:
        named = named_schemas()
        parsed = parse_schema(_PROBE_SCHEMA, named["writer"])
        out = BytesIO()
        schemaless_writer(out, parsed, _PROBE_DATUM)
        if read(BytesIO(out.getvalue()), parsed, named, None) != _PROBE_DATUM:
            return _schemaless, _no_named_schemas
    except Exception:  # any change of signature or behaviour: the public path
        return _schemaless, _no_named_schemas
    return read, named_schemas


_read_datum, _named_schemas = _compiled_reader()


class AvroSchema:
    """A writer schema, parsed for fastavro once, with its conversion (None: none).

    ``named`` is the named types ``schemaless_reader`` would gather from the parsed
    schema on every call; gathered once here, a datum is read by fastavro's compiled
    ``_read_data`` directly: the benchmark's three-field record in 1707 ns instead of
    2223 (best of 15 alternated runs of 5,000 records, fastavro 1.13, a loaded
    2-core machine)."""

    __slots__ = ("convert", "named", "parsed")

    def __init__(self, parsed: Any, convert: Callable[[Any], Any] | None) -> None:
        self.parsed = parsed
        self.convert = convert
        self.named = _named_schemas()
        parse_schema(parsed, self.named["writer"])


def parse(
    schema: str | dict[str, Any] | list[Any], references: Sequence[Reference] = ()
) -> AvroSchema:
    """A writer schema (JSON text or its decoded form) ready to decode with; raises
    fastavro's ``SchemaParseException`` (or ``ValueError``) for an invalid one.

    ``references`` (registry schema references, each before those naming it) define
    the named types the schema uses without defining: each is parsed first into the
    named types the schema is then parsed with; one subject's version named twice is
    parsed once (fastavro refuses a type defined twice)."""
    raw = orjson.loads(schema) if isinstance(schema, str) else schema
    needs = [False]
    named: dict[str, Any] = {}
    parsed_versions: set[tuple[str, int]] = set()
    for reference in references:
        where = (reference.subject, reference.version)
        if where not in parsed_versions:
            parsed_versions.add(where)
            parse_schema(_rewrite(orjson.loads(reference.text), needs), named)
    parsed = parse_schema(_rewrite(raw, needs), named)
    return AvroSchema(parsed, _to_json if needs[0] else None)


def _rewrite(schema: Any, needs: list[bool]) -> Any:
    """A copy of ``schema`` whose plain logical types read as their underlying type;
    ``needs[0]`` set when a value of it needs the conversion pass."""
    if isinstance(schema, list):
        return [_rewrite(branch, needs) for branch in schema]
    if isinstance(schema, str):
        if schema in ("bytes", "fixed"):
            needs[0] = True
        return schema
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    kind = out.get("type")
    logical = out.get("logicalType")
    if logical in _PLAIN:
        del out["logicalType"]
    elif logical in _CONVERTED or kind in ("bytes", "fixed"):
        needs[0] = True
    if kind == "record" or kind == "error":
        out["fields"] = [
            {**f, "type": _rewrite(f.get("type"), needs)} for f in out.get("fields", [])
        ]
    elif kind == "array":
        out["items"] = _rewrite(out.get("items"), needs)
    elif kind == "map":
        out["values"] = _rewrite(out.get("values"), needs)
    elif isinstance(kind, dict | list):
        out["type"] = _rewrite(kind, needs)
    return out


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MS = dt.timedelta(milliseconds=1)


def _to_json(value: Any) -> Any:
    """A decoded value with every type JSON has no form for in its JSON form."""
    kind = type(value)
    if kind is dict:
        for name, item in value.items():
            if type(item) not in _SCALARS:
                value[name] = _to_json(item)
        return value
    if kind is list:
        return [item if type(item) in _SCALARS else _to_json(item) for item in value]
    if kind is dt.datetime:
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return (value - _EPOCH) // _MS
    if kind is dt.date:
        return value.isoformat()
    if kind is decimal.Decimal:
        return float(value)
    if kind is bytes:
        return base64.b64encode(value).decode()
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _read_run(
    records: Sequence[Any],
    values: list[Any],
    failures: list[Failure],
    items: Iterator[tuple[int, bytes, AvroSchema]],
    skip: int,
) -> None:
    """Decode ``items`` (``(index, value, writer schema)`` of the records to decode, the
    others already failed in ``values``: :meth:`WriterSchemas.heads`, :func:`_unframed`)
    from one stream over the batch's joined values, each datum ``skip`` bytes in."""
    raws = [record.value for record in records]
    if None in raws:
        raws = [b"" if raw is None else raw for raw in raws]
    ends = list(accumulate(map(len, raws)))
    stream = BytesIO(b"".join(raws))
    seek = stream.seek
    tell = stream.tell
    append = values.append
    read = _read_datum
    for index, raw, schema in items:
        end = ends[index]
        seek(end - len(raw) + skip)
        try:
            value = read(stream, schema.parsed, schema.named, None)
        except Exception as exc:  # fastavro raises whatever the bytes lead to
            append(FAILED)
            failures.append((records[index], REASON_UNDECODABLE, f"{type(exc).__name__}: {exc}"))
            continue
        if tell() != end:
            append(FAILED)
            ended = tell() - end + len(raw)
            failures.append(
                (
                    records[index],
                    REASON_UNDECODABLE,
                    f"the datum is {ended} bytes, the value {len(raw)}",
                )
            )
            continue
        convert = schema.convert
        append(value if convert is None else convert(value))


def _unframed(
    records: Sequence[Any], values: list[Any], failures: list[Failure], schema: AvroSchema
) -> Iterator[tuple[int, bytes, AvroSchema]]:
    """Raw Avro's items for :func:`_read_run`: every record with a value, one schema."""
    index = -1
    for record in records:
        index += 1
        raw = record.value
        if not raw:
            values.append(FAILED)
            failures.append((record, REASON_UNDECODABLE, "record has no value"))
            continue
        yield index, raw, schema


class RawAvroReader:
    """Values that are one Avro datum each, all written with one schema."""

    __slots__ = ("_schema",)

    def __init__(self, schema: AvroSchema) -> None:
        self._schema = schema

    def read(self, records: Sequence[Any], values: list[Any], failures: list[Failure]) -> None:
        items = _unframed(records, values, failures, self._schema)
        _read_run(records, values, failures, items, 0)


class FramedAvroReader:
    """Confluent-framed Avro values, each with the writer schema its id names."""

    __slots__ = ("schemas",)

    def __init__(self, schemas: WriterSchemas[AvroSchema]) -> None:
        self.schemas = schemas

    def read(self, records: Sequence[Any], values: list[Any], failures: list[Failure]) -> None:
        items = self.schemas.heads(records, values, failures)
        _read_run(records, values, failures, items, HEADER_SIZE)


def registry_schemas() -> WriterSchemas[AvroSchema]:
    return WriterSchemas(SCHEMA_TYPE, parse)


def encode(schema: AvroSchema, value: Any) -> bytes:
    """``value`` as one Avro datum of ``schema`` (no framing)."""
    out = BytesIO()
    schemaless_writer(out, schema.parsed, value)
    return out.getvalue()


def framed_encoder(schema_text: str, schema_id: int) -> Callable[[dict[str, Any]], bytes]:
    """Encode one result value per call in the wire format with schema ``schema_id`` (a
    sink's results: a record whose ``result`` field is a record of the aggregations).
    A value the schema does not take as it is (a JSON object where the schema says a
    scalar: what ``first`` or ``collect`` gave) is written once more with every object
    and array below ``result`` as its JSON text (a ``collect``'s list kept, its elements
    so), and raises ``ValueError`` if it still does not fit."""
    raw = orjson.loads(schema_text)
    result_fields = next(f for f in raw["fields"] if f["name"] == "result")["type"]["fields"]
    arrays = frozenset(
        f["name"]
        for f in result_fields
        if isinstance(f["type"], dict) and f["type"].get("type") == "array"
    )
    parsed = parse_schema(raw)
    prefix = frame(schema_id, b"")
    out = BytesIO()
    write = out.write
    seek = out.seek
    truncate = out.truncate
    getvalue = out.getvalue

    def encode(value: dict[str, Any]) -> bytes:
        seek(0)
        truncate()
        write(prefix)
        try:
            schemaless_writer(out, parsed, value)
        except (ValueError, TypeError):
            seek(0)
            truncate()
            write(prefix)
            schemaless_writer(out, parsed, _as_text(value, arrays))
        return getvalue()

    return encode


def _as_text(value: dict[str, Any], arrays: frozenset[str]) -> dict[str, Any]:
    """A result with the objects and arrays below its ``result`` fields as JSON text."""
    out = dict(value)
    out["result"] = {
        name: (
            [_scalar(x) for x in item] if name in arrays and type(item) is list else _scalar(item)
        )
        for name, item in value["result"].items()
    }
    return out


def _scalar(item: Any) -> Any:
    return orjson.dumps(item).decode() if isinstance(item, dict | list) else item
