"""The rules of a join's two inputs: that they are a join's, share what one pipeline
shares, are shuffled, read distinct topics, and (a lookup join's table) are read whole."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from service.pipeline_spec.rules.base import (
    COMPARES,
    Fragment,
    JsonSchema,
    Problem,
    Service,
    of_type,
    present,
    rule,
)
from service.pipeline_spec.rules.raw import as_map, as_str, input_sections, join_of, topics_of

__all__ = [
    "input_topics_disjoint",
    "inputs_agree",
    "inputs_are_shuffled",
    "inputs_need_a_join",
    "lookup_table_input",
]


_JOIN_OPERATOR: JsonSchema = {
    "required": ["operator"],
    "properties": {"operator": of_type("join")},
}


@rule(
    reports={"join_without_inputs", "inputs_without_join"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": _JOIN_OPERATOR,
            "then": present("inputs", "object"),
            "else": {"properties": {"inputs": {"type": "null"}}},
        },
    ),
)
def inputs_need_a_join(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A join reads two inputs; two inputs are only read by a join."""
    op = as_map(spec.get("operator"))
    if op is None:
        return
    has_inputs = spec.get("inputs") is not None
    if op.get("type") == "join" and not has_inputs:
        yield Problem(
            ("inputs",),
            "join_without_inputs",
            "a join reads two named inputs: give inputs ({name: {source, key, ...}}, "
            "two of them) instead of source",
        )
    elif op.get("type") != "join" and has_inputs:
        yield Problem(
            ("operator", "type"),
            "inputs_without_join",
            "a pipeline with two inputs needs a join operator",
            op.get("type"),
        )


_RUN_TOGETHER: tuple[tuple[str, str, Any], ...] = (
    ("source", "bounded", False),
    ("source", "start_from", "earliest"),
    ("watermark", "idle_timeout_ms", None),
    ("watermark", "idle_advance", False),
    ("watermark", "max_drift_ms", None),
)
"""Settings of an input that the join's inputs share (with their defaults): one
pipeline finishes, starts and combines all its source partitions' watermarks (idleness,
alignment) as one."""


@rule(reports={"inputs_disagree"}, beyond_schema={"inputs_disagree": COMPARES})
def inputs_agree(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Both inputs bounded or neither, from the same start, with one idleness timeout,
    idle advance and drift bound (reported at the second input)."""
    inputs = input_sections(spec)
    op = join_of(spec)
    if len(inputs) != 2 or (op is not None and op.get("kind") == "lookup"):
        return  # a lookup table is read apart from the stream (_lookup_table_input)
    (first, a), (second, b) = inputs
    for section, name, default in _RUN_TOGETHER:
        part_a, part_b = as_map(a.get(section, {})), as_map(b.get(section, {}))
        if part_a is None or part_b is None:
            continue
        value_a, value_b = part_a.get(name, default), part_b.get(name, default)
        if value_a != value_b:
            yield Problem(
                ("inputs", second, section, name),
                "inputs_disagree",
                f"{section}.{name} is {value_b!r} here but {value_a!r} in {first!r}: a "
                "join's inputs share it (one pipeline reads, finishes and combines "
                "watermarks for both)",
                value_b,
            )


@rule(
    reports={"join_always_shuffles"},
    schema=Fragment(
        "InputSpec",
        {"properties": {"key": {"properties": {"partitioned": {"not": {"const": True}}}}}},
    ),
)
def inputs_are_shuffled(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A join brings both inputs to its key through the shuffle, whatever their
    partitioning: a promise of ``partitioned`` would not be used."""
    for name, section in input_sections(spec):
        key = as_map(section.get("key"))
        if key is not None and key.get("partitioned") is True:
            yield Problem(
                ("inputs", name, "key", "partitioned"),
                "join_always_shuffles",
                "a join always routes both inputs through the shuffle to its key: leave "
                "partitioned out",
                True,
            )


@rule(
    reports={"lookup_table_bounded", "lookup_table_from_latest"},
    beyond_schema={
        "lookup_table_bounded": "the table is the input that right names, which no JSON "
        "Schema can follow",
        "lookup_table_from_latest": "the table is the input that right names, which no "
        "JSON Schema can follow",
    },
)
def lookup_table_input(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A lookup join's table (its right input) is read whole and followed live: never
    bounded, never from the latest offset."""
    op = join_of(spec)
    inputs = as_map(spec.get("inputs"))
    if op is None or op.get("kind") != "lookup" or inputs is None:
        return
    right = as_str(op.get("right"))
    if right is None:
        return
    section = as_map(inputs.get(right))
    source = as_map(section.get("source")) if section is not None else None
    if source is None:
        return
    if source.get("bounded") is True:
        yield Problem(
            ("inputs", right, "source", "bounded"),
            "lookup_table_bounded",
            "a lookup table is followed live, never bounded (bound the left input alone)",
            True,
        )
    if source.get("start_from") == "latest":
        yield Problem(
            ("inputs", right, "source", "start_from"),
            "lookup_table_from_latest",
            "a lookup table is read whole, from its beginning: leave start_from out",
            "latest",
        )


@rule(reports={"input_topics_overlap"}, beyond_schema={"input_topics_overlap": COMPARES})
def input_topics_disjoint(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Each topic is one input's: a record belongs to one side of the join."""
    owner: dict[str, str] = {}
    for name, section in input_sections(spec):
        for i, topic in enumerate(topics_of(section)):
            if not isinstance(topic, str):
                continue
            first = owner.setdefault(topic, name)
            if first != name:
                yield Problem(
                    ("inputs", name, "source", "topics", i),
                    "input_topics_overlap",
                    f"{topic!r} is also an input of {first!r}: each topic is one input's",
                    topic,
                )
