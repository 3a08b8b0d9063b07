"""JSON Schema payloads in the wire format (runtime/formats/json_schema.py)."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson
import pytest

from service.runtime.formats import json_schema
from service.runtime.formats.base import FAILED, Failure, SchemaNotResolved
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
