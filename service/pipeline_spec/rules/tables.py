"""The rules of a table source (``source.changelog: "upsert"``, #50): what may read one,
and what may stand between it and the aggregate. A table's rows are replaced and
deleted, so whatever reads it must take a row back: a running aggregate
(``"type": "aggregate"``), with aggregations that retract (:mod:`.aggregates`), or a
Top-N (``"type": "top_n"``), ranking each partition's current rows, or a regular join
(an input of ``kind: "regular"``), keyed by the table's primary key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from service.pipeline_spec.rules.base import (
    Fragment,
    JsonSchema,
    Problem,
    Service,
    of_type,
    present,
    rule,
)
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
    "table_top_n_ranks_rows_by_primary_key",
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


_READERS = ("aggregate", "top_n")
"""The operators that take a table's replaced and deleted rows back."""


@rule(
    reports={"table_needs_running_aggregate"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": UPSERT_SOURCE,
            "then": {
                "properties": {"operator": {"properties": {"type": {"enum": list(_READERS)}}}}
            },
        },
    ),
)
def table_read_by_an_aggregate(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A table's rows are replaced and deleted: only a running aggregate or a Top-N takes
    them back (a window, a keyed process function or a map would see each version as a
    new row)."""
    op = as_map(spec.get("operator"))
    if not is_table(spec) or op is None or "type" not in op or op["type"] in _READERS:
        return
    yield Problem(
        ("source", "changelog"),
        "table_needs_running_aggregate",
        f"a table source (changelog 'upsert') is read by a running aggregate "
        f"(type 'aggregate') or a Top-N (type 'top_n'), which take replaced and deleted "
        f"rows back, not by {op['type']!r}",
        "upsert",
    )


_TABLE_TOP_N: JsonSchema = {
    "allOf": [
        UPSERT_SOURCE,
        {"required": ["operator"], "properties": {"operator": of_type("top_n")}},
    ]
}


@rule(
    reports={"table_top_n_row_key", "table_top_n_needs_key"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": _TABLE_TOP_N,
            "then": {
                **present("key", "object"),
                "properties": {
                    "key": {"type": "object"},
                    "operator": {"not": present("row_key", "string")},
                },
            },
        },
    ),
)
def table_top_n_ranks_rows_by_primary_key(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A Top-N over a table ranks the table's rows, each named by its primary key (the
    Kafka key), so no ``row_key``; and within the partitions of ``key.field`` (its
    PARTITION BY), as without one every row would be a partition of its own, always
    first."""
    op = as_map(spec.get("operator"))
    if not is_table(spec) or op is None or op.get("type") != "top_n":
        return
    row_key = op.get("row_key")
    if isinstance(row_key, str):
        yield Problem(
            ("operator", "row_key"),
            "table_top_n_row_key",
            "over a table source each row is named by its primary key (the Kafka key), "
            "which a new version replaces and a tombstone deletes: drop row_key",
            row_key,
        )
    if as_map(spec.get("key")) is None:
        yield Problem(
            ("key",),
            "table_top_n_needs_key",
            "a Top-N over a table ranks the rows of each partition: name it with "
            "key.field (its PARTITION BY; a table's rows are keyed by their primary key, "
            "so without it each row would be ranked alone)",
            spec.get("key"),
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
    """A join's table input's steps keep every row: a version a filter dropped would leave
    the old one joined (a table source's own steps may filter, its dropped version
    decoded as a delete: :func:`table_steps_keep_rows`; a join's inputs are not yet)."""
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
        {
            "if": UPSERT_SOURCE,
            "then": {
                "properties": {
                    "steps": {"items": {"not": {"type": "object", "required": ["unnest"]}}}
                }
            },
        },
    ),
)
def table_steps_keep_rows(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A table's steps may compute and pick fields (``set``, ``select``, ``drop``) and
    ``filter`` rows (a version the filter drops is its row's delete, so the previous
    version is taken back), but not multiply rows: an ``unnest`` would make one primary
    key many rows, and a later version could not say which of them it replaces."""
    steps = spec.get("steps")
    if not is_table(spec) or not isinstance(steps, list):
        return
    for i, step in enumerate(steps):
        found = as_map(step)
        if found is not None and "unnest" in found:
            yield Problem(
                ("steps", i),
                "table_step_drops_rows",
                "an unnest over a table source is not supported: a table's row is one "
                "primary key, and an unnest would make it many rows that its next version "
                "or its tombstone could not take back one by one (unnest in the pipeline "
                "that writes the table, keyed by the element)",
                "unnest",
            )


def _row_dropping_steps(steps: Any, at: tuple[str, ...]) -> Iterator[Problem]:
    """A problem at each ``filter`` or ``unnest`` step of a join's table input's ``steps``
    (a table source's own steps may filter: :func:`table_steps_keep_rows`)."""
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
                    f"a {kind} over a join's table input is not supported: a row's version "
                    "it dropped would leave the old one joined (filter the joined rows, or "
                    "in the pipeline that writes the table)",
                    kind,
                )
                break
