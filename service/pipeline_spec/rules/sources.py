"""The rules of one stream's settings: source, topics, steps, key and timestamp (at the top
level, or in each input of a join). The watermark's are in :mod:`.watermarks`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import fastavro

from service.operators.steps import check_expression
from service.pipeline_spec.rules.base import (
    NO_SCHEMA_REGISTRY,
    OF_THE_SERVICE,
    Fragment,
    Loc,
    Problem,
    Service,
    equals,
    present,
    rule,
    uses_registry,
)
from service.pipeline_spec.rules.raw import (
    as_map,
    as_str,
    source_sections,
    stream_sections,
    topics_of,
)
from service.pipeline_spec.rules.topics import KAFKA_REFUSED_TOPICS, NOT_REFUSED, refused_topic

__all__ = [
    "avro_schema_is_avro",
    "avro_schema_parses",
    "partitioned_key_is_not_shuffled",
    "source_format_has_a_registry",
    "source_or_inputs",
    "source_topics_distinct",
    "step_expressions",
    "stream_settings_in_inputs",
    "timestamp_source",
]

_STREAM_SETTINGS = ("steps", "key", "timestamp", "watermark")
"""The top level's stream settings: with ``inputs`` they belong to each input."""


@rule(
    reports={"missing", "source_and_inputs"},
    schema=Fragment(
        "PipelineSpec", {"oneOf": [present("source", "object"), present("inputs", "object")]}
    ),
)
def source_or_inputs(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """One stream (``source``) or a join's two (``inputs``), never both."""
    has_source = spec.get("source") is not None
    has_inputs = spec.get("inputs") is not None
    if not has_source and not has_inputs:
        yield Problem(
            ("source",),
            "missing",
            "a pipeline reads a source, or a join's two inputs (inputs)",
        )
    if has_source and has_inputs:
        yield Problem(
            ("source",),
            "source_and_inputs",
            "give source (one stream) or inputs (a join's two), not both: each input "
            "has its own source",
            spec.get("source"),
        )


@rule(
    reports={"not_with_inputs"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": present("inputs", "object"),
            "then": {"properties": {name: False for name in _STREAM_SETTINGS}},
        },
    ),
)
def stream_settings_in_inputs(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """With ``inputs``, steps, key, timestamp and watermark are each input's."""
    if spec.get("inputs") is None:
        return
    for name in _STREAM_SETTINGS:
        if name in spec:
            yield Problem(
                (name,),
                "not_with_inputs",
                f"with inputs, {name} belongs to each input: move it into inputs.<name>",
                spec[name],
            )


@rule(
    reports={"avro_schema_without_avro"},
    schema=Fragment(
        "SourceSpec",
        {"if": present("avro_schema", "object"), "then": equals("format", "avro")},
    ),
)
def avro_schema_is_avro(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """An ``avro_schema`` says the values are raw Avro: the format is ``avro``."""
    for at, section in source_sections(spec):
        if as_map(section.get("avro_schema")) is not None and section.get("format") != "avro":
            yield Problem(
                (*at, "format"),
                "avro_schema_without_avro",
                'an avro_schema is for raw Avro values: set "format": "avro" (or drop it)',
                section.get("format", "json"),
            )


@rule(
    reports={"schema_registry_unconfigured"},
    beyond_schema={"schema_registry_unconfigured": OF_THE_SERVICE},
)
def source_format_has_a_registry(spec: Mapping[str, Any], service: Service) -> Iterator[Problem]:
    """A source in Confluent's wire format (its writer schemas fetched by id) needs the
    service's schema registry; raw Avro (``avro_schema``) does not. Asked only when the
    caller says whether the service has one (:class:`Service`)."""
    if service.schema_registry is not False:
        return
    for at, section in source_sections(spec):
        fmt = as_str(section.get("format"))
        if uses_registry(fmt) and as_map(section.get("avro_schema")) is None:
            yield Problem((*at, "format"), "schema_registry_unconfigured", NO_SCHEMA_REGISTRY, fmt)


@rule(
    reports={"invalid_avro_schema"},
    beyond_schema={"invalid_avro_schema": "parsing an Avro schema is no JSON Schema's"},
)
def avro_schema_parses(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """The raw Avro schema is one fastavro can read with."""
    for at, section in source_sections(spec):
        schema = as_map(section.get("avro_schema"))
        if schema is None:
            continue
        try:
            fastavro.parse_schema(dict(schema))
        except Exception as exc:  # fastavro's SchemaParseException, or its KeyErrors
            yield Problem(
                (*at, "avro_schema"),
                "invalid_avro_schema",
                f"not an Avro schema: {type(exc).__name__}: {exc}",
                schema,
            )


@rule(
    reports={"invalid_expression"},
    beyond_schema={
        "invalid_expression": "an expression's syntax, functions and arity need its parser"
    },
)
def step_expressions(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Every problem of every expression of the steps (syntax, unknown functions, arity,
    unsupported syntax), each at its JSON path with its column in the expression."""
    for at, section in stream_sections(spec):
        steps = section.get("steps")
        if not isinstance(steps, list):
            continue
        for index, step in enumerate(steps):
            if not isinstance(step, Mapping):
                continue
            expressions: list[tuple[Loc, Any]] = []
            if isinstance(step.get("filter"), str):
                expressions.append(((*at, "steps", index, "filter"), step["filter"]))
            assignments = as_map(step.get("set"))
            if assignments is not None:
                expressions.extend(
                    ((*at, "steps", index, "set", name), text)
                    for name, text in assignments.items()
                    if isinstance(text, str)
                )
            for loc, text in expressions:
                for problem in check_expression(text):
                    yield Problem(loc, "invalid_expression", str(problem), text)


@rule(
    reports={"shuffle_unused"},
    schema=Fragment(
        "KeySpec",
        {
            "if": equals("partitioned", True),
            "then": {"properties": {"shuffle_partitions": {"type": "null"}}},
        },
    ),
)
def partitioned_key_is_not_shuffled(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    for at, section in stream_sections(spec):
        key = as_map(section.get("key"))
        if key is None:
            continue
        if key.get("partitioned") is True and key.get("shuffle_partitions") is not None:
            yield Problem(
                (*at, "key", "shuffle_partitions"),
                "shuffle_unused",
                "a source declared partitioned by the key is not shuffled: drop "
                "shuffle_partitions, or partitioned",
                key.get("shuffle_partitions"),
            )


@rule(
    reports={"timestamp_field_with_kafka", "timestamp_format_with_kafka", "missing"},
    schema=Fragment(
        "TimestampSpec",
        {
            "if": equals("source", "kafka"),
            "then": {"properties": {"field": False, "format": False}},
            "else": present("field", "string"),
        },
    ),
)
def timestamp_source(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """``source: kafka`` takes no field nor format; otherwise a field."""
    for at, section in stream_sections(spec):
        ts = as_map(section.get("timestamp"))
        if ts is not None:
            yield from _timestamp_problems((*at, "timestamp"), ts)


def _timestamp_problems(at: Loc, ts: Mapping[str, Any]) -> Iterator[Problem]:
    source = ts.get("source")
    if source == "kafka":
        if "field" in ts:
            yield Problem(
                (*at, "field"),
                "timestamp_field_with_kafka",
                "no field with source 'kafka': the record timestamp is used",
                ts["field"],
            )
        if "format" in ts:
            yield Problem(
                (*at, "format"),
                "timestamp_format_with_kafka",
                "no format with source 'kafka': the record timestamp is epoch milliseconds",
                ts["format"],
            )
    elif source in (None, "field") and ts.get("field") is None:  # null is no field either
        yield Problem(
            (*at, "field"),
            "missing",
            'a payload field is required, or use {"source": "kafka"}',
        )


@rule(
    reports={"invalid_topic_name", "duplicate_topic"},
    schema=Fragment(
        "SourceSpec",
        {"properties": {"topics": {"uniqueItems": True, "items": NOT_REFUSED}}},
    ),
)
def source_topics_distinct(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Source topics Kafka accepts, each listed once (in each source)."""
    for at, section in stream_sections(spec):
        seen: set[str] = set()
        for i, topic in enumerate(topics_of(section)):
            loc: Loc = (*at, "source", "topics", i)
            if isinstance(topic, str):
                if topic in KAFKA_REFUSED_TOPICS:
                    yield refused_topic(loc, topic)
                elif topic in seen:
                    yield Problem(loc, "duplicate_topic", "listed twice", topic)
                seen.add(topic)
