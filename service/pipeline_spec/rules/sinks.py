"""The rules of the sink: its topics, the default dead-letter topic, late records, and a
format with a schema derived from the aggregations."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from service.pipeline_spec.rules.base import (
    COMPARES,
    NO_SCHEMA_REGISTRY,
    OF_THE_SERVICE,
    Fragment,
    JsonSchema,
    Problem,
    Service,
    of_type,
    present,
    rule,
    uses_registry,
)
from service.pipeline_spec.rules.raw import as_map, as_str, source_topics
from service.pipeline_spec.rules.topics import (
    KAFKA_REFUSED_TOPICS,
    MAX_TOPIC_LENGTH,
    NOT_REFUSED,
    refused_topic,
)
from service.pipeline_spec.sink_schemas import AVRO_NAME, protobuf_json_name

__all__ = [
    "default_dead_letter_topic",
    "late_topic_of_event_time_operators",
    "protobuf_result_names_apart",
    "sink_format_has_a_registry",
    "sink_format_has_a_schema",
    "sink_topics_own",
]

_DLQ_SUFFIX = ".dlq"
_SINK_TOPICS = ("topic", "late_topic", "dead_letter_topic")


@rule(
    reports={"invalid_topic_name", "sink_is_source", "sink_topics_not_distinct", "reserved_topic"},
    schema=Fragment(
        "SinkSpec",
        {
            "properties": {
                name: {
                    "allOf": [NOT_REFUSED, {"not": {"type": "string", "pattern": r"^clockwork\."}}]
                }
                for name in _SINK_TOPICS
            }
        },
    ),
    beyond_schema={"sink_is_source": COMPARES, "sink_topics_not_distinct": COMPARES},
)
def sink_topics_own(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Each output its own topic, which Kafka accepts, outside the source topics and the
    service's namespace (one problem per topic, the first that applies)."""
    sink = as_map(spec.get("sink"))
    if sink is None:
        return
    sources = {topic for topic in source_topics(spec) if isinstance(topic, str)}
    taken: dict[str, str] = {}
    for name in _SINK_TOPICS:
        topic = as_str(sink.get(name))
        if topic is None:
            continue
        if topic in KAFKA_REFUSED_TOPICS:
            yield refused_topic(("sink", name), topic)
        elif topic in sources:
            yield Problem(
                ("sink", name),
                "sink_is_source",
                f"{topic!r} is also a source topic: the pipeline would consume its own output",
                topic,
            )
        elif topic in taken:
            yield Problem(
                ("sink", name),
                "sink_topics_not_distinct",
                f"{topic!r} is already the sink's {taken[topic]}: each output needs its own topic",
                topic,
            )
        elif topic.startswith("clockwork."):
            yield Problem(
                ("sink", name),
                "reserved_topic",
                "topics starting with 'clockwork.' are the service's own (pipeline store, "
                "changelogs)",
                topic,
            )
        taken.setdefault(topic, name)


@rule(
    reports={"missing", "default_dead_letter_topic_too_long"},
    schema=Fragment(
        "SinkSpec",
        {
            "if": present("dead_letter_topic", "string"),
            "else": {"properties": {"topic": {"maxLength": MAX_TOPIC_LENGTH - len(_DLQ_SUFFIX)}}},
        },
    ),
    beyond_schema={"missing": f"the default dead-letter topic is taken: {COMPARES}"},
)
def default_dead_letter_topic(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Without a dead-letter topic, ``<topic>.dlq`` is one: free, and a topic Kafka takes."""
    sink = as_map(spec.get("sink"))
    main = as_str(sink.get("topic")) if sink is not None else None
    if sink is None or main is None or sink.get("dead_letter_topic") is not None:
        return
    default = f"{main}{_DLQ_SUFFIX}"
    if default in source_topics(spec) or sink.get("late_topic") == default:
        yield Problem(
            ("sink", "dead_letter_topic"),
            "missing",
            f"the default dead-letter topic {default!r} is taken: name one",
        )
    elif len(default) > MAX_TOPIC_LENGTH:
        yield Problem(
            ("sink", "dead_letter_topic"),
            "default_dead_letter_topic_too_long",
            f"the default dead-letter topic ('<topic>.dlq') would be longer than Kafka's "
            f"{MAX_TOPIC_LENGTH} characters: name one",
        )


_LATE_RECORDS: JsonSchema = {
    "required": ["operator"],
    "properties": {
        "operator": {
            "anyOf": [
                {
                    "type": "object",
                    "required": ["type"],
                    "properties": {"type": {"const": "window"}, "time": {"const": "event"}},
                },
                of_type("join"),
            ]
        }
    },
}
"""An operator with late records: an event-time window, or a join."""


@rule(
    reports={"late_topic_unused"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": _LATE_RECORDS,
            "else": {"properties": {"sink": {"properties": {"late_topic": {"type": "null"}}}}},
        },
    ),
)
def late_topic_of_event_time_operators(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Only event-time windows and joins have late records."""
    sink = as_map(spec.get("sink"))
    op = as_map(spec.get("operator"))
    if sink is None or op is None or sink.get("late_topic") is None:
        return
    event_window = op.get("type") == "window" and op.get("time", "event") == "event"
    if not event_window and op.get("type") != "join":
        yield Problem(
            ("sink", "late_topic"),
            "late_topic_unused",
            "only event-time windows and joins have late records",
            sink.get("late_topic"),
        )


@rule(
    reports={"sink_format_needs_aggregations", "invalid_avro_name"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": {
                "required": ["sink"],
                "properties": {
                    "sink": {
                        "required": ["format"],
                        "properties": {"format": {"not": {"const": "json"}}},
                    }
                },
            },
            "then": {
                "required": ["operator"],
                "properties": {
                    "operator": {
                        "required": ["type", "aggregations"],
                        "properties": {
                            "type": {"const": "window"},
                            "aggregations": {
                                "type": "object",
                                "propertyNames": {"pattern": AVRO_NAME},
                            },
                        },
                    }
                },
            },
        },
    ),
)
def sink_format_has_a_schema(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A result schema is derived from a window's aggregations, each output an Avro name."""
    sink = as_map(spec.get("sink"))
    if sink is None or "format" not in sink or sink["format"] == "json":
        return
    op = as_map(spec.get("operator"))
    aggregations = as_map(op.get("aggregations")) if op is not None else None
    if op is None or op.get("type") != "window" or aggregations is None:
        yield Problem(
            ("sink", "format"),
            "sink_format_needs_aggregations",
            "results in a format with a schema need a window with aggregations (the schema "
            "is derived from them): use sink format json for other operators",
            sink["format"],
        )
        return
    for name in aggregations:
        if not re.match(AVRO_NAME, str(name)):
            yield Problem(
                ("operator", "aggregations", name),
                "invalid_avro_name",
                f"{name!r} is no Avro field name (letters, digits and _, not starting with "
                "a digit), which results in Avro need",
                name,
            )


@rule(
    reports={"schema_registry_unconfigured"},
    beyond_schema={"schema_registry_unconfigured": OF_THE_SERVICE},
)
def sink_format_has_a_registry(spec: Mapping[str, Any], service: Service) -> Iterator[Problem]:
    """Results in a format with a schema are registered under ``<topic>-value`` in the
    service's schema registry: a service without one cannot write them. Asked only when
    the caller says whether the service has one (:class:`Service`)."""
    sink = as_map(spec.get("sink"))
    fmt = as_str(sink.get("format")) if sink is not None else None
    if service.schema_registry is False and uses_registry(fmt):
        yield Problem(("sink", "format"), "schema_registry_unconfigured", NO_SCHEMA_REGISTRY, fmt)


@rule(
    reports={"protobuf_json_name_clash"},
    beyond_schema={"protobuf_json_name_clash": COMPARES},
)
def protobuf_result_names_apart(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """protoc refuses a message two of whose fields have one JSON name (``a_b`` and
    ``aB`` are both ``aB``), so a protobuf sink's derived schema would fail to compile at
    run time: the second aggregation of each such pair is reported, at itself."""
    sink = as_map(spec.get("sink"))
    op = as_map(spec.get("operator"))
    aggregations = as_map(op.get("aggregations")) if op is not None else None
    if sink is None or sink.get("format") != "protobuf" or aggregations is None:
        return
    seen: dict[str, str] = {}
    for name in aggregations:
        json_name = protobuf_json_name(str(name))
        first = seen.setdefault(json_name, str(name))
        if first != name:
            yield Problem(
                ("operator", "aggregations", name),
                "protobuf_json_name_clash",
                f"{name!r} and {first!r} have one Protobuf JSON name ({json_name!r}), which "
                "protoc refuses in one message: rename one of them",
                name,
            )
