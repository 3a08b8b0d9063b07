"""The window aggregate functions: the one list that the spec's model, its rules and JSON
Schema, SQL, the sink's result schemas and the operators' code generation read.

Each function is an :class:`AggKind` (its name in a spec) with one :class:`Aggregate`
entry: whether it reads a ``field``, whether it orders rows ``by`` another, and what
kind of value it gives (:class:`Result`), from which the sink schemas type its output in
every format. How it accumulates is :mod:`.aggregations`' (its slots and generated code).

Adding an aggregate: its :class:`AggKind` member and entry here, its implementation in
:mod:`.aggregations` (slots, initial value, update, merge, result), its SQL form
(``pipeline_spec/sql/windows.py``), its rows in docs/pipeline-spec.md and docs/sql.md,
and its tests; ``tests/pipeline_spec/test_registries.py`` fails until SQL, the schema
and the docs know it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Literal

__all__ = [
    "AGGREGATES",
    "AGGREGATE_NAMES",
    "AggKind",
    "Aggregate",
    "AggregateName",
    "Result",
]


class AggKind(StrEnum):
    """An aggregate function, by its name in a spec."""

    COUNT = "count"
    SUM = "sum"
    MIN = "min"
    MAX = "max"
    AVG = "avg"
    FIRST = "first"
    LAST = "last"
    COUNT_DISTINCT = "count_distinct"
    COLLECT = "collect"
    MAX_BY = "max_by"
    MIN_BY = "min_by"


class Result(StrEnum):
    """What kind of value an aggregate gives, as the result schemas type it
    (docs/formats.md, "Results")."""

    COUNT = "count"
    """An integer, 0 when nothing was counted."""
    SUM = "sum"
    """An integer or a float, as its inputs were; 0 for none."""
    AVERAGE = "average"
    """A float; null when there is nothing to average."""
    EXTREME = "extreme"
    """A number or a string (min and max's one order); null for none."""
    VALUE = "value"
    """Any JSON value of one row; null for none."""
    LIST = "list"
    """A list of JSON values; empty for none."""


@dataclass(frozen=True, slots=True)
class Aggregate:
    """One aggregate function's entry: what a spec gives it and what it gives back."""

    kind: AggKind
    result: Result
    takes_field: bool = True
    """It reads a ``field`` (every function but ``count``)."""
    takes_by: bool = False
    """It gives ``field`` of the row with the largest or smallest ``by``."""
    retracts: bool = False
    """It can take a row back (a running aggregate over a table source, Flink's
    retraction): count, sum and avg exactly, min and max with a value-to-count map
    (Flink's ``MaxWithRetract``), count_distinct with one too, collect by value
    (``operators/table/retracting.py``). first, last, max_by and min_by cannot: the
    row they hold may be taken back with nothing kept to fall back on."""


AGGREGATES: Mapping[AggKind, Aggregate] = {
    entry.kind: entry
    for entry in (
        Aggregate(AggKind.COUNT, Result.COUNT, takes_field=False, retracts=True),
        Aggregate(AggKind.SUM, Result.SUM, retracts=True),
        Aggregate(AggKind.MIN, Result.EXTREME, retracts=True),
        Aggregate(AggKind.MAX, Result.EXTREME, retracts=True),
        Aggregate(AggKind.AVG, Result.AVERAGE, retracts=True),
        Aggregate(AggKind.FIRST, Result.VALUE),
        Aggregate(AggKind.LAST, Result.VALUE),
        Aggregate(AggKind.COUNT_DISTINCT, Result.COUNT, retracts=True),
        Aggregate(AggKind.COLLECT, Result.LIST, retracts=True),
        Aggregate(AggKind.MAX_BY, Result.VALUE, takes_by=True),
        Aggregate(AggKind.MIN_BY, Result.VALUE, takes_by=True),
    )
}
"""Every aggregate's entry, in :class:`AggKind`'s order (a test holds the two to each
other: a member without an entry fails)."""

AGGREGATE_NAMES: tuple[str, ...] = tuple(kind.value for kind in AggKind)

if TYPE_CHECKING:
    AggregateName = str
else:
    # The Literal pydantic reads (the JSON Schema's enum, the 422's literal_error); mypy
    # cannot build a Literal from a tuple and sees a str.
    AggregateName = Literal[AGGREGATE_NAMES]
