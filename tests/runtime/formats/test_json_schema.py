"""JSON Schema payloads in the wire format (runtime/formats/json_schema.py)."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson
import pytest

from service.runtime.formats import json_schema
from service.runtime.formats.base import FAILED, Failure, SchemaNotResolved
from service.runtime.formats.schemas import Reference
from service.runtime.formats.wire import frame

SCHEMA = '{"type": "object", "properties": {"user": {"type": "string"}}}'


class Record(NamedTuple):
    value: bytes | None


def read(*values: bytes | None) -> tuple[list[Any], list[Failure]]:
    cache = json_schema.registry_schemas()
    cache.add(1, "JSON", SCHEMA)
    cache.add(2, "AVRO", '"long"')
    cache.absent(3)
    out: list[Any] = []
    failures: list[Failure] = []
    json_schema.FramedJsonReader(cache).read([Record(v) for v in values], out, failures)
    return out, failures


def test_framed_json_decodes_as_json_and_bad_records_say_why() -> None:
    one = {"user": "u", "nested": {"xs": [1, 2.5]}}
    values, failures = read(
        frame(1, orjson.dumps(one)),
        orjson.dumps(one),
        frame(2, b"{}"),
        frame(3, b"{}"),
        frame(1, b"{not json"),
        None,
        frame(1, orjson.dumps(one)),
    )
    assert values == [one, FAILED, FAILED, FAILED, FAILED, FAILED, one]
    assert [reason for _, reason, _ in failures] == [
        "bad_magic",
        "unknown_schema",
        "unknown_schema",
        "undecodable",
        "bad_magic",
    ]


def test_an_id_not_resolved_stops_the_batch() -> None:
    with pytest.raises(SchemaNotResolved):
        read(frame(4, b"{}"))


def test_a_schema_that_is_not_json_is_a_problem() -> None:
    cache = json_schema.registry_schemas()
    cache.add(1, "JSON", "[1, 2]")
    assert "object or a boolean" in str(cache.by_id[1])


MONEY = '{"$id": "https://example.com/money.json", "type": "object"}'
PRICED = '{"type": "object", "properties": {"price": {"$ref": "money.json"}}}'


def test_referenced_documents_are_kept_by_their_ref_names_and_records_read() -> None:
    cache = json_schema.registry_schemas()
    cache.add(1, "JSON", PRICED, [Reference("money.json", "money", 1, "JSON", MONEY)])
    schema = cache.by_id[1]
    assert isinstance(schema, json_schema.JsonSchema)
    assert schema.documents == {"money.json": orjson.loads(MONEY)}
    out: list[Any] = []
    failures: list[Failure] = []
    value = {"price": {"cents": 5}}
    json_schema.FramedJsonReader(cache).read([Record(frame(1, orjson.dumps(value)))], out, failures)
    assert (out, failures) == ([value], [])


def test_a_reference_that_is_not_a_json_schema_is_a_problem() -> None:
    cache = json_schema.registry_schemas()
    cache.add(1, "JSON", PRICED, [Reference("money.json", "money", 1, "JSON", "7")])
    assert "reference 'money.json': a JSON Schema is an object" in str(cache.by_id[1])
