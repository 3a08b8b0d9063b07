"""The results' Avro schema derived from a window's aggregations, and results written
with it and read back (runtime/formats/avro.py) as the JSON sink would have written them."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson
from fastavro import parse_schema

from service.operators.base import FireKind
from service.pipeline_spec.sink_schemas import window_result_avro_schema
from service.runtime.formats import avro
from service.runtime.formats.base import Failure

AGGREGATIONS = {
    "n": {"fn": "count"},
    "distinct": {"fn": "count_distinct", "field": "user"},
    "revenue": {"fn": "sum", "field": "amount"},
    "mean": {"fn": "avg", "field": "amount"},
    "low": {"fn": "min", "field": "amount"},
    "high": {"fn": "max", "field": "sku"},
    "first_seen": {"fn": "first", "field": "x"},
    "last_seen": {"fn": "last", "field": "x"},
    "all": {"fn": "collect", "field": "x"},
}


class Record(NamedTuple):
    value: bytes


def result(**values: Any) -> dict[str, Any]:
    return {
        "pipeline": "orders-per-user",
        "key": "u1",
        "window": {"start": 0, "end": 60_000},
        "result": values,
        "fire": FireKind.ON_TIME,
        "seq": 0,
        "watermark": 59_999,
        "id": "orders-per-user|u1|0|60000",
    }


def round_trip(value: dict[str, Any]) -> Any:
    schema = window_result_avro_schema("orders-per-user", AGGREGATIONS)
    text = orjson.dumps(schema).decode()
    encoded = avro.framed_encoder(text, 7)(value)
    cache = avro.registry_schemas()
    cache.add(7, "AVRO", text)
    values: list[Any] = []
    failures: list[Failure] = []
    avro.FramedAvroReader(cache).read([Record(encoded)], values, failures)
    assert failures == []
    return values[0]


def test_the_schema_parses_and_every_field_has_a_default() -> None:
    schema = window_result_avro_schema("9 lives", AGGREGATIONS)
    assert schema["namespace"] == "clockwork.p_9_lives"
    fields = schema["fields"][3]["type"]["fields"]
    assert [f["name"] for f in fields] == list(AGGREGATIONS)
    assert all("default" in f for f in fields)
    parse_schema(orjson.loads(orjson.dumps(schema)))


def test_results_read_back_as_the_json_sink_writes_them() -> None:
    value = result(
        n=3,
        distinct=2,
        revenue=7.5,
        mean=2.5,
        low=1,
        high="z",
        first_seen=True,
        last_seen=None,
        all=[1, "a", 2.5, None],
    )
    assert round_trip(value) == orjson.loads(orjson.dumps(value))


def test_objects_where_a_scalar_is_typed_are_written_as_json_text() -> None:
    value = result(
        n=1, distinct=1, revenue=1, mean=None, low=None, high=None,
        first_seen={"a": 1}, last_seen=[1], all=[{"b": 2}],
    )  # fmt: skip
    back = round_trip(value)
    assert back["result"]["first_seen"] == '{"a":1}'
    assert back["result"]["last_seen"] == "[1]"
    assert back["result"]["all"] == ['{"b":2}']
