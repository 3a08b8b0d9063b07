"""The pipeline spec's JSON Schema: the models' field checks plus every cross-field rule
that JSON Schema can state.

Why more than ``PipelineSpec.model_json_schema()``: the models check one field at a time,
and :mod:`service.spec.rules` checks how fields fit together. A schema with only the first
half calls specs valid that the service refuses (a window with neither aggregations nor a
function), so an editor that checks against it says nothing until the 422, and a fuzzer
reading the OpenAPI document sends "valid" specs that are not. Here each rule of
``rules.py`` that a schema can state is added to the definition of the model it is about
(``if``/``then``/``else``, ``oneOf``, ``not``, ``const``, ``uniqueItems``), and the allowed
user-function modules (configuration) narrow the function references.

What stays outside, because no JSON Schema can compare two values of one document or
know what a module contains (docs/pipeline-spec.md, "What the schema says, and what it
cannot"):
``slide_ms <= size_ms``; ``|offset_ms|`` below the size or slide; sink topics distinct from
the source topics and from each other, and the default ``<topic>.dlq`` not taken; a user
function that imports and is of the right kind, with the params it accepts; for
``PUT``, the body's name equal to the path's; and what the broker can do (exactly-once
needs transactions: the service asks the broker).

The models stay the truth: ``tests/api/test_spec_schema.py`` checks that the schema and
the service agree on generated specs, and schemathesis checks it against the running
service.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from typing import Any

from service.core.time import MAX_DURATION_MS
from service.operators.process.builtins.daily_counter import MAX_OFFSET_MINUTES
from service.spec.models import PipelineSpec
from service.spec.rules import (
    BUILTIN_PROCESS_FUNCTIONS,
    FIELD_FREE_FNS,
    KAFKA_REFUSED_TOPICS,
    MAX_TOPIC_LENGTH,
)

__all__ = [
    "BUILTIN_PARAMS_SCHEMAS",
    "DRAFT",
    "pipeline_schema",
    "replacement_schema",
    "user_function_pattern",
]

DRAFT = "https://json-schema.org/draft/2020-12/schema"

JsonSchema = dict[str, Any]

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"
_DLQ_SUFFIX = ".dlq"
_TIME_DOMAINS = ["event", "processing"]
_PATH_PARAM = {"type": "string", "pattern": r"^[^.]+(\.[^.]+)*$"}
"""A dotted path as the built-ins split it (no empty part)."""

BUILTIN_PARAMS_SCHEMAS: Mapping[str, JsonSchema] = {
    "inactivity_timeout": {
        "type": "object",
        "additionalProperties": False,
        "required": ["timeout_ms"],
        "properties": {
            "timeout_ms": {"type": "integer", "minimum": 1, "maximum": MAX_DURATION_MS},
            "time": {"enum": _TIME_DOMAINS},
        },
    },
    "dedupe": {
        "type": "object",
        "additionalProperties": False,
        "required": ["ttl_ms"],
        "properties": {
            "ttl_ms": {"type": "integer", "minimum": 1, "maximum": MAX_DURATION_MS},
            "time": {"enum": _TIME_DOMAINS},
            "fields": {"type": "array", "minItems": 1, "items": _PATH_PARAM},
        },
    },
    "daily_reset_counter": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "utc_offset_minutes": {
                "type": "integer",
                "minimum": -MAX_OFFSET_MINUTES,
                "maximum": MAX_OFFSET_MINUTES,
            }
        },
    },
}
"""The params each built-in keyed process function accepts: what its ``validate_params``
checks, as a schema (a test keeps the two in step)."""


def user_function_pattern(allowed_modules: Sequence[str]) -> str | None:
    """``package.module:Name`` inside an allowed module (None: no module is allowed).

    Identifiers are ASCII here; Python also takes other letters, which no module under an
    allowed package is likely to use.
    """
    if not allowed_modules:
        return None
    modules = "|".join(re.escape(m) for m in allowed_modules)
    return rf"^(?:{modules})(?:\.{_IDENT})*:{_IDENT}(?:\.{_IDENT})*$"


@cache
def _pipeline_schema(allowed: tuple[str, ...], ref_template: str) -> JsonSchema:
    schema = PipelineSpec.model_json_schema(ref_template=ref_template)
    defs: dict[str, JsonSchema] = schema["$defs"]
    _topics(schema)
    _source(defs["SourceSpec"])
    _key(defs["KeySpec"])
    _set_step(defs["SetStep"])
    _timestamp(defs["TimestampSpec"])
    _watermark(defs["WatermarkSpec"])
    _aggregation(defs["Aggregation"])
    _window(defs["WindowOperator"], allowed)
    _keyed_process(defs["KeyedProcessOperator"], allowed)
    _sink(defs["SinkSpec"])
    _pipeline(schema)
    schema["$schema"] = DRAFT
    return schema


def pipeline_schema(
    allowed_modules: Sequence[str], ref_template: str = "#/$defs/{model}"
) -> JsonSchema:
    """The spec's schema for a service that allows ``allowed_modules`` (a fresh copy:
    callers may move its ``$defs``)."""
    return copy.deepcopy(_pipeline_schema(tuple(allowed_modules), ref_template))


def replacement_schema(spec: JsonSchema) -> JsonSchema:
    """The body of ``PUT /pipelines/{name}``: ``spec`` (the top level of
    :func:`pipeline_schema`, sharing its definitions) with ``name`` optional, since the
    path names the pipeline (given, it must be the same: the service checks that)."""
    body = {k: copy.deepcopy(v) for k, v in spec.items() if k not in ("$defs", "$schema")}
    body["title"] = "PipelineReplacement"
    body["description"] = "A pipeline spec; `name` may be left out (the path gives it)."
    body["required"] = [name for name in spec["required"] if name != "name"]
    return body


# -- the rules, one function per model ------------------------------------------------


def _strings_with_pattern(node: Any, pattern: str) -> Iterator[JsonSchema]:
    if isinstance(node, dict):
        if node.get("pattern") == pattern:
            yield node
        for value in node.values():
            yield from _strings_with_pattern(value, pattern)
    elif isinstance(node, list):
        for value in node:
            yield from _strings_with_pattern(value, pattern)


def _topics(schema: JsonSchema) -> None:
    """rules._topics: Kafka refuses '.' and '..', which the name pattern allows."""
    for topic in _strings_with_pattern(schema, _TOPIC_PATTERN):
        topic["not"] = {"enum": sorted(KAFKA_REFUSED_TOPICS)}


def _source(source: JsonSchema) -> None:
    """rules._topics: a source topic listed twice."""
    source["properties"]["topics"]["uniqueItems"] = True


def _key(key: JsonSchema) -> None:
    """rules._key: a source declared partitioned by the key is not shuffled."""
    key["if"] = {"required": ["partitioned"], "properties": {"partitioned": {"const": True}}}
    key["then"] = {"properties": {"shuffle_partitions": {"type": "null"}}}


def _set_step(step: JsonSchema) -> None:
    """The model's field-path keys: pydantic states their pattern as ``patternProperties``,
    which lets any other key through; ``propertyNames`` refuses them as the service does."""
    fields = step["properties"]["set"]
    ((pattern, value),) = fields.pop("patternProperties").items()
    fields["propertyNames"] = {**fields.get("propertyNames", {}), "pattern": pattern}
    fields["additionalProperties"] = value


def _present(name: str, kind: str) -> JsonSchema:
    """The property is there and not null (what the rules call given)."""
    return {"required": [name], "properties": {name: {"type": kind}}}


def _equals(name: str, value: Any) -> JsonSchema:
    return {"required": [name], "properties": {name: {"const": value}}}


def _timestamp(ts: JsonSchema) -> None:
    """rules._timestamp: ``source: kafka`` takes no field nor format; otherwise a field."""
    ts["if"] = _equals("source", "kafka")
    ts["then"] = {"properties": {"field": False, "format": False}}
    ts["else"] = _present("field", "string")


def _watermark(wm: JsonSchema) -> None:
    """rules._watermark: punctuated needs its field and only it takes one; ascending and
    punctuated have no bound; idle_advance needs idle_timeout_ms."""
    wm["allOf"] = [
        {
            "if": _equals("strategy", "punctuated"),
            "then": _present("field", "string"),
            "else": {"properties": {"field": False}},
        },
        {
            "if": {
                "required": ["strategy"],
                "properties": {"strategy": {"enum": ["ascending", "punctuated"]}},
            },
            "then": {"properties": {"max_out_of_orderness_ms": {"const": 0}}},
        },
        {"if": _equals("idle_advance", True), "then": _present("idle_timeout_ms", "integer")},
    ]


def _aggregation(agg: JsonSchema) -> None:
    """rules._window_function: count takes no field, every other function needs one."""
    agg["if"] = {"properties": {"fn": {"enum": sorted(FIELD_FREE_FNS)}}}
    agg["then"] = {"properties": {"field": False}}
    agg["else"] = _present("field", "string")


def _trigger_of(kind: str) -> JsonSchema:
    return {"type": "object", **_equals("type", kind)}


def _window(op: JsonSchema, allowed: tuple[str, ...]) -> None:
    """rules._window_function and rules._trigger."""
    props = op["properties"]
    # Output names: pydantic says them with patternProperties, which lets any other name
    # through with any value; the service refuses those.
    aggs = props["aggregations"]["anyOf"][0]
    (pattern,) = aggs.pop("patternProperties").items()
    aggs["propertyNames"] = {"pattern": pattern[0]}
    aggs["additionalProperties"] = pattern[1]
    user_ref = user_function_pattern(allowed)
    function = props["function"]["anyOf"][0]
    if user_ref is None:
        props["function"] = {"type": "null", "description": "No module is allowed here."}
    else:
        function["pattern"] = user_ref
    has_fn = _present("function", "string")
    op["allOf"] = [
        {"oneOf": [_present("aggregations", "object"), has_fn]},
        {"if": _present("evictor", "object"), "then": has_fn},
        {
            "if": _equals("time", "processing"),
            "then": {
                "properties": {
                    "trigger": {"not": _trigger_of("event_time")},
                    "allowed_lateness_ms": {"const": 0},
                }
            },
            "else": {"properties": {"trigger": {"not": _trigger_of("processing_time")}}},
        },
        {
            "if": {"required": ["assigner"], "properties": {"assigner": _equals("type", "global")}},
            "then": {
                "required": ["trigger"],
                "properties": {
                    "trigger": {
                        "type": "object",
                        "required": ["type"],
                        "properties": {"type": {"enum": ["continuous", "count"]}},
                    }
                },
            },
        },
    ]


def _keyed_process(op: JsonSchema, allowed: tuple[str, ...]) -> None:
    """rules._keyed_process: a built-in (with the params it takes) or an allowed module's
    function."""
    builtins: JsonSchema = {"enum": sorted(BUILTIN_PROCESS_FUNCTIONS)}
    user_ref = user_function_pattern(allowed)
    function = op["properties"]["function"]
    function.pop("minLength", None)
    function.pop("maxLength", None)
    function.pop("type", None)
    if user_ref is None:
        function.update(builtins)
    else:
        function["anyOf"] = [
            builtins,
            {"type": "string", "pattern": user_ref, "maxLength": 256},
        ]
    rules: list[JsonSchema] = []
    for name in sorted(BUILTIN_PROCESS_FUNCTIONS):
        params = BUILTIN_PARAMS_SCHEMAS[name]
        then: JsonSchema = {"properties": {"params": params}}
        if params.get("required"):
            then["required"] = ["params"]
        rules.append({"if": _equals("function", name), "then": then})
    op["allOf"] = rules


def _sink(sink: JsonSchema) -> None:
    """rules._topics: the service's own namespace, and room for the default dead-letter
    topic's suffix."""
    reserved = {"not": {"type": "string", "pattern": r"^clockwork\."}}
    sink["allOf"] = [
        {"properties": {name: reserved for name in ("topic", "late_topic", "dead_letter_topic")}},
        {
            "if": _present("dead_letter_topic", "string"),
            "else": {"properties": {"topic": {"maxLength": MAX_TOPIC_LENGTH - len(_DLQ_SUFFIX)}}},
        },
    ]


def _pipeline(spec: JsonSchema) -> None:
    """rules._topics: only event-time windows have late records. rules._delivery:
    exactly-once reads one source topic."""
    event_window = {
        "required": ["operator"],
        "properties": {
            "operator": {
                "type": "object",
                "required": ["type"],
                "properties": {"type": {"const": "window"}, "time": {"const": "event"}},
            }
        },
    }
    spec["allOf"] = [
        {
            "if": event_window,
            "else": {"properties": {"sink": {"properties": {"late_topic": {"type": "null"}}}}},
        },
        {
            "if": _equals("delivery", "exactly_once"),
            "then": {"properties": {"source": {"properties": {"topics": {"maxItems": 1}}}}},
        },
    ]
