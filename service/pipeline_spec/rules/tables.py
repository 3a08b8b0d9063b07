"""The rules of a table source (``source.changelog: "upsert"``, #50): what may read one,
and what may stand between it and the aggregate. A table's rows are replaced and
deleted, so whatever reads it must take a row back: a running aggregate
(``"type": "aggregate"``), with aggregations that retract (:mod:`.aggregates`), or a
regular join (an input of ``kind: "regular"``), keyed by the table's primary key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from service.pipeline_spec.rules.base import Fragment, JsonSchema, Problem, Service, rule
from service.pipeline_spec.rules.raw import as_map, input_sections

__all__ = [
    "UPSERT_SOURCE",
    "is_table",
    "table_input_keyed_by_its_primary_key",
    "table_input_steps_keep_rows",
    "table_key_not_partitioned",
    "table_not_a_join_input",
    "table_read_by_an_aggregate",
    "table_steps_keep_rows",
]

UPSERT_SOURCE: JsonSchema = {
    "required": ["source"],
    "properties": {
        "source": {
            "type": "object",
            "required": ["changelog"],
            "properties": {"changelog": {"const": "upsert"}},
        }
    },
}
"""A stream section (the top level, a join's input) whose source is a table."""


def is_table(section: Mapping[str, Any]) -> bool:
    """Whether ``section``'s source is a table (``changelog: "upsert"``)."""
    source = as_map(section.get("source"))
    return source is not None and source.get("changelog") == "upsert"


@rule(
    reports={"table_needs_running_aggregate"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": UPSERT_SOURCE,
            "then": {"properties": {"operator": {"properties": {"type": {"const": "aggregate"}}}}},
        },
    ),
)
def table_read_by_an_aggregate(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A table's rows are replaced and deleted: only a running aggregate takes them back
    (a window, a keyed process function or a map would see each version as a new row)."""
    op = as_map(spec.get("operator"))
    if not is_table(spec) or op is None or "type" not in op or op["type"] == "aggregate":
        return
    yield Problem(
        ("source", "changelog"),
        "table_needs_running_aggregate",
        f"a table source (changelog 'upsert') is read by a running aggregate "
        f"(type 'aggregate'), which takes replaced and deleted rows back, not by "
        f"{op['type']!r}",
        "upsert",
    )


_REGULAR_JOIN: JsonSchema = {
    "required": ["operator"],
    "properties": {
        "operator": {"required": ["kind"], "properties": {"kind": {"const": "regular"}}}
    },
}
"""A spec whose operator is a regular join (``kind: "regular"``)."""
_INPUTS_TAKE_NO_TABLE: JsonSchema = {
    "properties": {
        "inputs": {
            "additionalProperties": {
                "properties": {
                    "source": {"properties": {"changelog": {"not": {"const": "upsert"}}}}
                }
            }
        }
    }
}


@rule(
    reports={"table_not_a_join_input"},
    schema=Fragment("PipelineSpec", {"if": _REGULAR_JOIN, "else": _INPUTS_TAKE_NO_TABLE}),
)
def table_not_a_join_input(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Only a regular join takes a table input (it retracts the joined rows of a row's old
    version); a lookup or temporal join reads its right input as a table already, and
    the interval and window joins' rows are final."""
    op = as_map(spec.get("operator"))
    if op is not None and op.get("kind") == "regular":
        return
    for name, section in input_sections(spec):
        if is_table(section):
            yield Problem(
                ("inputs", name, "source", "changelog"),
                "table_not_a_join_input",
                "only a regular join (kind 'regular') takes a table input (changelog "
                "'upsert'): a lookup or temporal join reads its right input as a table "
                "already, and other joins' rows are final",
                "upsert",
            )


@rule(
    reports={"table_input_keyed_by_field"},
    schema=Fragment(
        "InputSpec",
        {
            "if": UPSERT_SOURCE,
            "then": {"properties": {"key": {"not": {"required": ["field"]}}}},
        },
    ),
)
def table_input_keyed_by_its_primary_key(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A join's table input is joined on its primary key, the Kafka key: every version of
    a row then comes to the one partition that holds the row (joined on a field, a row
    whose field changes would move, its old joined rows left where it was)."""
    for name, section in input_sections(spec):
        key = as_map(section.get("key"))
        if is_table(section) and key is not None and "field" in key:
            yield Problem(
                ("inputs", name, "key", "field"),
                "table_input_keyed_by_field",
                "a table input is joined on its primary key, the Kafka key: drop key.field "
                "(join on a field of a table is not supported)",
                key["field"],
            )


_DROPS_ROWS = {"anyOf": [{"type": "object", "required": [s]} for s in ("filter", "unnest")]}


@rule(
    reports={"table_step_drops_rows"},
    schema=Fragment(
        "InputSpec",
        {"if": UPSERT_SOURCE, "then": {"properties": {"steps": {"items": {"not": _DROPS_ROWS}}}}},
    ),
)
def table_input_steps_keep_rows(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A table input's steps keep every row, as a table source's (:func:`table_steps_keep_rows`):
    a version a filter dropped would leave the old one joined."""
    for name, section in input_sections(spec):
        if is_table(section):
            yield from _row_dropping_steps(section.get("steps"), ("inputs", name, "steps"))


@rule(
    reports={"table_partitioned_by_group"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": UPSERT_SOURCE,
            "then": {
                "properties": {"key": {"properties": {"partitioned": {"not": {"const": True}}}}}
            },
        },
    ),
)
def table_key_not_partitioned(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A table is partitioned by its primary key (the Kafka key): a row whose group
    changes would land in another partition than its old version, which nothing there
    would take back. Grouped by a field, a table goes through the retraction shuffle."""
    key = as_map(spec.get("key"))
    if not is_table(spec) or key is None or key.get("partitioned") is not True:
        return
    yield Problem(
        ("key", "partitioned"),
        "table_partitioned_by_group",
        "a table source is partitioned by its primary key, the Kafka key: grouped by a "
        "field it is shuffled (the old version of a row that changes group is taken back "
        "where it was), so drop partitioned",
        True,
    )


@rule(
    reports={"table_step_drops_rows"},
    schema=Fragment(
        "PipelineSpec",
        {"if": UPSERT_SOURCE, "then": {"properties": {"steps": {"items": {"not": _DROPS_ROWS}}}}},
    ),
)
def table_steps_keep_rows(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A table's steps may compute and pick fields (``set``, ``select``, ``drop``), but
    not drop or multiply rows: a version a ``filter`` dropped would leave the old one
    counted, and an ``unnest`` makes one key many rows."""
    if is_table(spec):
        yield from _row_dropping_steps(spec.get("steps"), ("steps",))


def _row_dropping_steps(steps: Any, at: tuple[str, ...]) -> Iterator[Problem]:
    """A problem at each ``filter`` or ``unnest`` step of a table's ``steps``."""
    if not isinstance(steps, list):
        return
    for i, step in enumerate(steps):
        found = as_map(step)
        if found is None:
            continue
        for kind in ("filter", "unnest"):
            if kind in found:
                yield Problem(
                    (*at, i),
                    "table_step_drops_rows",
                    f"a {kind} over a table source is not supported: a row's version "
                    "it dropped would leave the old one counted or joined (filter in the "
                    "reader, or in the pipeline that writes the table)",
                    kind,
                )
                break
