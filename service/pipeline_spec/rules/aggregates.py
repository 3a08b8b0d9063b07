"""The rules of aggregations (a window's, a running aggregate's): which fields each
aggregate function takes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from service.operators.window.aggregate_kinds import AGGREGATES
from service.pipeline_spec.rules.base import (
    Fragment,
    Loc,
    Problem,
    Service,
    of_type,
    present,
    rule,
)
from service.pipeline_spec.rules.raw import aggregating_operator_of, as_map
from service.pipeline_spec.rules.tables import UPSERT_SOURCE, is_table

__all__ = [
    "FIELD_FREE_FNS",
    "RETRACTING_FNS",
    "aggregation_by",
    "aggregation_field",
    "aggregation_retracts",
]

FIELD_FREE_FNS = frozenset(kind.value for kind, a in AGGREGATES.items() if not a.takes_field)
"""Aggregate functions that take no ``field``; every other one needs it."""


def _aggregations(spec: Mapping[str, Any]) -> Iterator[tuple[Any, str, Mapping[str, Any]]]:
    """Each aggregation of a window or a running aggregate that names its function: its
    output name, the function's name and the aggregation's object (another is the field
    checks' to report)."""
    op = aggregating_operator_of(spec)
    aggregations = as_map(op.get("aggregations")) if op is not None else None
    for name, agg in (aggregations or {}).items():
        agg_obj = as_map(agg)
        if agg_obj is not None and isinstance(agg_obj.get("fn"), str):
            yield name, agg_obj["fn"], agg_obj


@rule(
    reports={"aggregation_field_unused", "missing"},
    schema=Fragment(
        "Aggregation",
        {
            "if": {"properties": {"fn": {"enum": sorted(FIELD_FREE_FNS)}}},
            "then": {"properties": {"field": False}},
            "else": present("field", "string"),
        },
    ),
)
def aggregation_field(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """``count`` takes no field, every other function needs one."""
    for name, fn_name, agg_obj in _aggregations(spec):
        loc: Loc = ("operator", "aggregations", name, "field")
        if fn_name in FIELD_FREE_FNS and "field" in agg_obj:
            yield Problem(
                loc,
                "aggregation_field_unused",
                f"{fn_name!r} counts records and takes no field",
                agg_obj["field"],
            )
        elif fn_name not in FIELD_FREE_FNS and agg_obj.get("field") is None:
            yield Problem(loc, "missing", f"{fn_name!r} needs the field it aggregates")


_BY_FNS = tuple(kind.value for kind, a in AGGREGATES.items() if a.takes_by)
"""Aggregate functions that order the rows ``by`` another field; no other one takes it."""


@rule(
    reports={"aggregation_by_unused", "missing"},
    schema=Fragment(
        "Aggregation",
        {
            "if": {"properties": {"fn": {"enum": list(_BY_FNS)}}},
            "then": present("by", "string"),
            "else": {"properties": {"by": False}},
        },
    ),
)
def aggregation_by(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """``max_by`` and ``min_by`` need the field they order the rows by; no other
    function takes one."""
    for name, fn_name, agg_obj in _aggregations(spec):
        loc: Loc = ("operator", "aggregations", name, "by")
        if fn_name in _BY_FNS and agg_obj.get("by") is None:
            yield Problem(loc, "missing", f"{fn_name!r} needs by: the field that picks the row")
        elif fn_name not in _BY_FNS and "by" in agg_obj:
            yield Problem(
                loc,
                "aggregation_by_unused",
                f"only max_by and min_by take by, not {fn_name!r}",
                agg_obj["by"],
            )


RETRACTING_FNS = tuple(kind.value for kind, a in AGGREGATES.items() if a.retracts)
"""Aggregate functions that can take a row back (the registry's ``retracts``)."""


@rule(
    reports={"aggregation_cannot_retract"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": UPSERT_SOURCE,
            "then": {
                "properties": {
                    "operator": {
                        "if": of_type("aggregate"),
                        "then": {
                            "properties": {
                                "aggregations": {
                                    "additionalProperties": {
                                        "properties": {"fn": {"enum": list(RETRACTING_FNS)}}
                                    }
                                }
                            }
                        },
                    }
                }
            },
        },
    ),
)
def aggregation_retracts(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Over a table source a running aggregate takes each replaced or deleted row back:
    only the functions that can (count, sum, avg, min, max, count_distinct, collect)."""
    op = aggregating_operator_of(spec)
    if not is_table(spec) or op is None or op.get("type") != "aggregate":
        return
    for name, fn_name, _agg in _aggregations(spec):
        if fn_name not in RETRACTING_FNS:
            yield Problem(
                ("operator", "aggregations", name, "fn"),
                "aggregation_cannot_retract",
                f"{fn_name!r} cannot take a row back, so it cannot aggregate a table source "
                f"(changelog 'upsert'): use one of {', '.join(RETRACTING_FNS)}",
                fn_name,
            )
