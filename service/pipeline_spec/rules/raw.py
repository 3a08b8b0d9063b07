"""Reading a spec's raw JSON defensively: the parts the rules look at, or None.

The rules run on the raw input, not the validated models (a bad field must hide no other
problem), so every reader here skips a part that is missing or of the wrong type: the
models' field checks report it already.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from service.pipeline_spec.rules.base import Loc

__all__ = [
    "WINDOW_TIMES",
    "aggregating_operator_of",
    "as_int",
    "as_map",
    "as_str",
    "assigner_of",
    "input_sections",
    "join_of",
    "running_aggregate_of",
    "source_sections",
    "source_topics",
    "stream_sections",
    "top_n_of",
    "topics_of",
    "watermark_sections",
    "window_of",
    "window_time_of",
]

WINDOW_TIMES = ("event", "processing")
"""A window's time domains (``time``)."""


def as_map(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def window_of(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    op = as_map(spec.get("operator"))
    return op if op is not None and op.get("type") == "window" else None


def aggregating_operator_of(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The operator whose ``aggregations`` the aggregate rules check: a window, or a
    running aggregate (``"type": "aggregate"``)."""
    op = as_map(spec.get("operator"))
    return op if op is not None and op.get("type") in ("window", "aggregate") else None


def running_aggregate_of(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    op = as_map(spec.get("operator"))
    return op if op is not None and op.get("type") == "aggregate" else None


def top_n_of(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    op = as_map(spec.get("operator"))
    return op if op is not None and op.get("type") == "top_n" else None


def window_time_of(op: Mapping[str, Any]) -> str | None:
    time = op.get("time", "event")
    return time if isinstance(time, str) and time in WINDOW_TIMES else None


def stream_sections(spec: Mapping[str, Any]) -> Iterator[tuple[Loc, Mapping[str, Any]]]:
    """Where a stream's settings (source, steps, key, timestamp, watermark) are, with
    their path: the top level, and each of a join's inputs."""
    yield (), spec
    inputs = as_map(spec.get("inputs"))
    for name, section in (inputs or {}).items():
        if isinstance(name, str) and as_map(section) is not None:
            yield ("inputs", name), section


def topics_of(section: Mapping[str, Any]) -> list[Any]:
    source = as_map(section.get("source"))
    topics = source.get("topics") if source is not None else None
    return topics if isinstance(topics, list) else []


def source_topics(spec: Mapping[str, Any]) -> list[Any]:
    """Every topic the spec reads: its source's and its inputs'."""
    return [topic for _, section in stream_sections(spec) for topic in topics_of(section)]


def join_of(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    op = as_map(spec.get("operator"))
    return op if op is not None and op.get("type") == "join" else None


def source_sections(spec: Mapping[str, Any]) -> Iterator[tuple[Loc, Mapping[str, Any]]]:
    """The source section of the pipeline, or of each input of a join."""
    source = as_map(spec.get("source"))
    if source is not None:
        yield ("source",), source
    inputs = as_map(spec.get("inputs"))
    for name, value in (inputs or {}).items():
        section = as_map(value)
        found = as_map(section.get("source")) if section is not None else None
        if found is not None:
            yield ("inputs", name, "source"), found


def input_sections(spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return [
        (at[1], section) for at, section in stream_sections(spec) if at and isinstance(at[1], str)
    ]


def watermark_sections(spec: Mapping[str, Any]) -> Iterator[tuple[Loc, Mapping[str, Any]]]:
    """Each ``watermark`` object given (top level, each input), with its path."""
    for at, section in stream_sections(spec):
        wm = as_map(section.get("watermark"))
        if wm is not None:
            yield (*at, "watermark"), wm


def assigner_of(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A window's assigner, or a window join's."""
    op = window_of(spec) or join_of(spec)
    return as_map(op.get("assigner")) if op is not None else None
