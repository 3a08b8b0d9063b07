"""The results' schemas (Avro, Protobuf, JSON Schema) derived from a window's
aggregations, and results written with them and read back (runtime/formats/) as the
JSON sink would have written them."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson
import pytest
from fastavro import parse_schema

from service.operators.base import FireKind
from service.pipeline_spec.sink_schemas import (
    protobuf_json_name,
    result_field_numbers,
    window_result_avro_schema,
    window_result_schema,
)
from service.runtime.formats import avro, json_schema, protobuf
from service.runtime.formats.base import Failure
from service.runtime.formats.results import result_encoder

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


def read_back(fmt: str, encoded: bytes, text: str) -> Any:
    """``encoded`` read by the source format ``fmt`` with ``text`` as schema id 7."""
    module = {"protobuf": protobuf, "json_schema": json_schema}[fmt]
    cache = module.registry_schemas()
    cache.add(7, module.SCHEMA_TYPE, text)
    reader = (
        protobuf.FramedProtobufReader(cache)
        if fmt == "protobuf"
        else json_schema.FramedJsonReader(cache)
    )
    values: list[Any] = []
    failures: list[Failure] = []
    reader.read([Record(encoded)], values, failures)
    assert failures == []
    return values[0]


def encoded_and_read_back(fmt: str, value: dict[str, Any]) -> Any:
    """``value`` written by the sink format ``fmt`` (schema id 7) and read back by its
    source format."""
    if fmt == "avro":
        return round_trip(value)
    text = window_result_schema(fmt, "orders-per-user", AGGREGATIONS)
    encoded = result_encoder(fmt, text, 7, orjson.dumps)(value)
    assert encoded[:5] == b"\x00\x00\x00\x00\x07"
    return read_back(fmt, encoded, text)


@pytest.mark.parametrize("fmt", ["protobuf", "json_schema"])
def test_results_in_protobuf_and_json_schema_read_back_as_the_json_sink_writes_them(
    fmt: str,
) -> None:
    value = result(
        n=3, distinct=2, revenue=7.5, mean=2.5, low=1, high="z",
        first_seen=True, last_seen=None, all=[1, "a", 2.5, None, False],
    )  # fmt: skip
    assert encoded_and_read_back(fmt, value) == orjson.loads(orjson.dumps(value))


def test_json_schema_results_keep_objects_where_a_scalar_is_typed() -> None:
    value = result(
        n=1, distinct=1, revenue=1, mean=None, low=None, high=None,
        first_seen={"a": [1, "b"]}, last_seen=[1], all=[{"b": 2}],
    )  # fmt: skip
    assert encoded_and_read_back("json_schema", value) == value


@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_objects_where_a_scalar_is_typed_are_written_as_json_text(fmt: str) -> None:
    value = result(
        n=1, distinct=1, revenue=1, mean=None, low=None, high=None,
        first_seen={"a": 1}, last_seen=[1], all=[{"b": 2}],
    )  # fmt: skip
    back = encoded_and_read_back(fmt, value)
    assert back["result"]["first_seen"] == '{"a":1}'
    assert back["result"]["last_seen"] == "[1]"
    assert back["result"]["all"] == ['{"b":2}']


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json_schema"])
def test_an_integer_sum_beyond_2_53_reads_back_exact(fmt: str) -> None:
    """A sum of integers is an integer (Avro's long, Protobuf's Number.long_value), not
    a double, which would round 2**53 + 1."""
    big = 2**53 + 1
    value = result(
        n=1, distinct=1, revenue=big, mean=None, low=big, high=None,
        first_seen=-big, last_seen=None, all=[big],
    )  # fmt: skip
    back = encoded_and_read_back(fmt, value)["result"]
    got = (back["revenue"], back["low"], back["first_seen"], back["all"])
    assert got == (big, big, -big, [big])
    assert type(back["revenue"]) is int


def test_a_sum_beyond_int64_is_written_as_a_double_in_protobuf() -> None:
    value = result(
        n=1, distinct=1, revenue=2**64, mean=None, low=None, high=None,
        first_seen=None, last_seen=None, all=[],
    )  # fmt: skip
    assert encoded_and_read_back("protobuf", value)["result"]["revenue"] == float(2**64)


def test_an_average_of_nothing_reads_back_as_null_in_protobuf() -> None:
    value = result(
        n=0, distinct=0, revenue=0, mean=None, low=None, high=None,
        first_seen=None, last_seen=None, all=[],
    )  # fmt: skip
    text = window_result_schema("protobuf", "p", AGGREGATIONS)
    back = read_back("protobuf", result_encoder("protobuf", text, 7, orjson.dumps)(value), text)
    assert back["result"] == value["result"]


def test_protobuf_field_numbers_of_an_aggregation_stay_when_others_come_and_go() -> None:
    before = result_field_numbers(["n", "revenue", "mean"])
    after = result_field_numbers(["revenue", "mean", "low", "high"])
    assert before["revenue"] == after["revenue"] and before["mean"] == after["mean"]
    numbers = result_field_numbers([f"agg{i}" for i in range(2000)])
    assert len(set(numbers.values())) == 2000
    assert all(1 <= n <= 18_000 for n in numbers.values())


@pytest.mark.parametrize(
    ("names", "clash"),
    [
        (["a_b", "aB"], True),
        (["_x", "X"], True),
        (["a_", "a"], True),
        (["x_1", "x1"], True),
        (["ab", "aB"], False),
        (["a_b", "A_b"], False),
    ],
)
def test_the_protobuf_json_name_rule_refuses_what_protoc_refuses(
    names: list[str], clash: bool
) -> None:
    """The rule protobuf_json_name_clash says at create time what protoc would say when
    the pipeline starts: it refuses exactly the names whose derived schema protoc does."""
    assert (protobuf_json_name(names[0]) == protobuf_json_name(names[1])) is clash
    text = window_result_schema("protobuf", "p", {name: {"fn": "count"} for name in names})
    if clash:
        with pytest.raises(protobuf.ProtoCompileError):
            protobuf.compile_proto(text)
    else:
        protobuf.compile_proto(text)


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json_schema"])
def test_each_format_s_result_schema_has_the_contract_s_fields_in_its_order(fmt: str) -> None:
    """The sink writes the contract's fields (service/contract/result_record.py) and the
    compaction job reads them: a schema for a registry format names the same, in order."""
    from service.contract.result_record import WINDOW_FIELDS, WINDOW_RESULT_FIELDS

    text = window_result_schema(fmt, "p", AGGREGATIONS)
    if fmt == "avro":
        schema = orjson.loads(text)
        fields = [f["name"] for f in schema["fields"]]
        window = next(f["type"] for f in schema["fields"] if f["name"] == "window")
        window_fields = [f["name"] for f in window["fields"]]
    elif fmt == "json_schema":
        schema = orjson.loads(text)
        fields = list(schema["properties"])
        window_fields = list(schema["properties"]["window"]["properties"])
        assert schema["required"] == list(WINDOW_RESULT_FIELDS)
    else:
        message = text[text.index("message WindowResult") :]
        fields = [
            line.split("=")[0].split()[-1]
            for line in message.split("}")[-2].splitlines()
            if "=" in line
        ]
        window = text[text.index("message Window {") :]
        window_fields = [
            line.split("=")[0].split()[-1]
            for line in window[: window.index("}")].splitlines()
            if "=" in line
        ]
    assert fields == list(WINDOW_RESULT_FIELDS)
    assert window_fields == list(WINDOW_FIELDS)
