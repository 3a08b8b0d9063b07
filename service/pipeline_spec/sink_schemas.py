"""The value schema of a window pipeline's results, derived from its spec, for a sink
in a format with a schema (``sink.format``: ``avro``, ``protobuf``, ``json_schema``;
docs/formats.md, "Results").

A result is ``{pipeline, key, window: {start, end}, result: {<aggregation>: ...},
fire, seq, watermark, id}``; each aggregation's type follows from what its function
gives (its :class:`~service.operators.window.aggregate_kinds.Result` in the operators'
list of aggregates, so a new function is typed here by its entry there): the
counts are longs, a sum a long or a double (as its inputs were), an average a double,
min and max a number or a string, first, last, max_by, min_by and collect's elements
any scalar (a JSON object or array among them is written as its JSON text); null where
the function can give none (nothing to average).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from typing import Any

from service.operators.window.aggregate_kinds import AGGREGATES, AggKind, Result

AVRO_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""What Avro allows as a field name (an aggregation's output name in the result); a
Protobuf field name is the same."""

_SCALAR: list[Any] = ["null", "boolean", "long", "double", "string"]
_DEFAULTS: dict[Result, Any] = {Result.COUNT: 0, Result.SUM: 0, Result.LIST: []}
"""Each field has a default (the others: null), so adding or removing an aggregation
keeps the schema backward and forward compatible; changing one's type may not."""
_TYPES: dict[Result, Any] = {
    Result.COUNT: "long",
    Result.SUM: ["long", "double"],
    Result.AVERAGE: ["null", "double"],
    Result.EXTREME: ["null", "long", "double", "string"],
    Result.VALUE: _SCALAR,
    Result.LIST: {"type": "array", "items": _SCALAR},
}
"""Each kind of result's Avro type."""


def _result(agg: Any) -> Result:
    """What the function of ``agg`` (an aggregation of the spec) gives."""
    return AGGREGATES[AggKind(str(agg["fn"]))].result


def _name(pipeline: str) -> str:
    """The pipeline's name as an Avro name part (``orders-per-user`` -> ``orders_per_user``)."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", pipeline)
    return cleaned if re.match(r"[A-Za-z_]", cleaned) else f"p_{cleaned}"


def window_result_avro_schema(pipeline: str, aggregations: Mapping[str, Any]) -> dict[str, Any]:
    """The Avro schema of the results of a window pipeline with ``aggregations`` (the
    spec's ``operator.aggregations``: output name -> ``{"fn": ..., "field": ...}``)."""
    namespace = f"clockwork.{_name(pipeline)}"
    fields = [
        {"name": out, "type": _TYPES[_result(agg)], "default": _DEFAULTS.get(_result(agg))}
        for out, agg in aggregations.items()
    ]
    return {
        "type": "record",
        "name": "WindowResult",
        "namespace": namespace,
        "fields": [
            {"name": "pipeline", "type": "string"},
            {"name": "key", "type": "string"},
            {
                "name": "window",
                "type": {
                    "type": "record",
                    "name": "Window",
                    "fields": [
                        {"name": "start", "type": "long"},
                        {"name": "end", "type": "long"},
                    ],
                },
            },
            {"name": "result", "type": {"type": "record", "name": "Result", "fields": fields}},
            {"name": "fire", "type": "string"},
            {"name": "seq", "type": "long"},
            {"name": "watermark", "type": "long"},
            {"name": "id", "type": "string"},
        ],
    }


def window_result_schema(fmt: str, pipeline: str, aggregations: Mapping[str, Any]) -> str:
    """The results' schema in sink format ``fmt`` as the registry takes it (text)."""
    if fmt == "avro":
        return json.dumps(window_result_avro_schema(pipeline, aggregations))
    if fmt == "protobuf":
        return window_result_proto(pipeline, aggregations)
    if fmt == "json_schema":
        return json.dumps(window_result_json_schema(pipeline, aggregations))
    raise ValueError(f"no result schema for sink format {fmt!r}")


_NUMBER = "Number"
_SCALAR_MESSAGE = "Scalar"
_PROTO_TYPES: dict[Result, str] = {
    Result.COUNT: "int64",
    Result.SUM: _NUMBER,
    Result.AVERAGE: ".google.protobuf.DoubleValue",
    Result.EXTREME: _SCALAR_MESSAGE,
    Result.VALUE: _SCALAR_MESSAGE,
    Result.LIST: f"repeated {_SCALAR_MESSAGE}",
}
"""Each kind of result's Protobuf type, as its Avro type: a sum's ``long`` or ``double`` a
``Number`` (a oneof of the two, so an integer sum stays exact), the others' scalar a
``Scalar`` (a oneof of bool, int64, double and string; none set: null), an average a
``DoubleValue`` (unset: null). Types are named from the root (a leading dot), so an
aggregation named ``google`` or ``Number`` cannot shadow them."""

PROTO_UNIONS = (
    "  message Number {\n"
    "    oneof value {\n      int64 long_value = 1;\n      double double_value = 2;\n    }\n"
    "  }\n"
    "  message Scalar {\n"
    "    oneof value {\n      bool bool_value = 1;\n      int64 long_value = 2;\n"
    "      double double_value = 3;\n      string string_value = 4;\n    }\n"
    "  }\n"
)
"""``WindowResult``'s union types (Avro's ``["long", "double"]`` and its scalars); a
``protobuf`` source reads them back as the value they hold
(:mod:`service.runtime.formats.protobuf`)."""

_FIELD_NUMBERS = 18_000
"""Result fields are numbered in 1..18000 (below protobuf's reserved 19000-19999)."""


def protobuf_json_name(name: str) -> str:
    """A field's JSON name as protoc derives it (its ``ToJsonName``): each ``_`` dropped and
    the character after it upper-cased; protoc refuses two fields of one message with
    the same."""
    out: list[str] = []
    upper = False
    for char in name:
        if char == "_":
            upper = True
        else:
            out.append(char.upper() if upper else char)
            upper = False
    return "".join(out)


def result_field_numbers(names: list[str]) -> dict[str, int]:
    """A stable field number per aggregation name: from a hash of the name (so adding or
    removing another aggregation leaves it alone, as compatibility asks), the next free
    one for the rare collision, in the names' sorted order (deterministic)."""
    taken: dict[str, int] = {}
    used: set[int] = set()
    for name in sorted(names):
        number = zlib.crc32(name.encode()) % _FIELD_NUMBERS + 1
        while number in used:
            number = number % _FIELD_NUMBERS + 1
        used.add(number)
        taken[name] = number
    return taken


def window_result_proto(pipeline: str, aggregations: Mapping[str, Any]) -> str:
    """The ``.proto`` text of the results: message ``WindowResult`` (the first of the
    file: Confluent's message index ``0``) with ``Window``, ``Result`` and the union
    types ``Number`` and ``Scalar`` nested."""
    numbers = result_field_numbers(list(aggregations))
    scope = f".clockwork.{_name(pipeline)}.WindowResult."
    fields = ""
    for out, agg in aggregations.items():
        kind = _PROTO_TYPES[_result(agg)]
        label, _, name = kind.rpartition(" ")
        if name in (_NUMBER, _SCALAR_MESSAGE):
            kind = f"{label} {scope}{name}".lstrip()
        fields += f"    {kind} {out} = {numbers[out]};\n"
    wrappers = any(_result(agg) is Result.AVERAGE for agg in aggregations.values())
    return (
        'syntax = "proto3";\n'
        f"package clockwork.{_name(pipeline)};\n"
        # protoc warns of an unused import
        + ('import "google/protobuf/wrappers.proto";\n' if wrappers else "")
        + "message WindowResult {\n"
        "  message Window {\n    int64 start = 1;\n    int64 end = 2;\n  }\n"
        f"  message Result {{\n{fields}  }}\n"
        f"{PROTO_UNIONS}"
        "  string pipeline = 1;\n  string key = 2;\n  Window window = 3;\n"
        "  Result result = 4;\n  string fire = 5;\n  int64 seq = 6;\n"
        "  int64 watermark = 7;\n  string id = 8;\n"
        "}\n"
    )


_JSON_TYPES: dict[Result, Any] = {
    Result.COUNT: {"type": "integer"},
    Result.SUM: {"type": "number"},
    Result.AVERAGE: {"type": ["number", "null"]},
    Result.EXTREME: {"type": ["number", "string", "null"]},
    Result.VALUE: {},
    Result.LIST: {"type": "array"},
}
"""Each kind of result's JSON Schema; a row's value (first, last, max_by, min_by): any
value (``{}``)."""


def window_result_json_schema(pipeline: str, aggregations: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON Schema (draft 7) of the results; no aggregation is required, so adding
    or removing one stays compatible."""
    integer = {"type": "integer"}
    string = {"type": "string"}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": f"{_name(pipeline)}.WindowResult",
        "type": "object",
        "properties": {
            "pipeline": string,
            "key": string,
            "window": {
                "type": "object",
                "properties": {"start": integer, "end": integer},
                "required": ["start", "end"],
            },
            "result": {
                "type": "object",
                "properties": {out: _JSON_TYPES[_result(agg)] for out, agg in aggregations.items()},
            },
            "fire": string,
            "seq": integer,
            "watermark": integer,
            "id": string,
        },
        "required": ["pipeline", "key", "window", "result", "fire", "seq", "watermark", "id"],
    }
