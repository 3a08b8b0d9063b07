"""A window aggregation -> the window operator, the key and the aggregations.

```sql
SELECT "user", window_start, window_end, COUNT(*) AS orders, SUM(amount) AS revenue
FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE)
GROUP BY "user", window_start, window_end
```

The window table functions are RisingWave's (and Flink's, without ``TABLE`` and
``DESCRIPTOR``): ``TUMBLE(src, ts, size[, offset])``, ``HOP(src, ts, slide, size[,
offset])``, ``SESSION(src, ts, gap)``. The time column must be the source's
``WATERMARK`` column: windows run on event time, and results are final per window
(``EMIT ON WINDOW CLOSE``).

A result record is ``{key, window, result}`` (contract.md): the select list may name the
group keys and ``window_start``/``window_end`` (they are the record's ``key`` and
``window``) and aggregates (the ``result``, named by their aliases). An aggregate over an
expression gets a ``set`` step that computes the expression into a field ``_sql_<name>``
first; ``COUNT(x)`` (non-NULL ``x``) is a ``sum`` over such a field of 0s and 1s, since
the operator's ``count`` counts records. One group key that is a column is the spec's
``key.field``; several, or an expression, are joined into one field ``_sql_key`` (``a|b``:
the key of the result record); none (``GROUP BY window_start, window_end``) is one
constant key, a non-keyed window as in Flink.
"""

from __future__ import annotations

import re
from typing import Any

from sqlglot import exp

from .context import Compilation
from .expressions import (
    Scope,
    column_path,
    describe,
    family,
    one_source_query,
    resolve_columns,
    translate,
    write_source,
)
from .selects import resolve_select
from .sink import Settings
from .sources import Source, stand_in

__all__ = [
    "WINDOW_FUNCTIONS",
    "aggregations_of",
    "compile_window",
    "group_key",
    "resolve_window",
    "window_call",
]

WINDOW_FUNCTIONS = {"TUMBLE": 3, "HOP": 4, "SESSION": 3}
"""Each window table function and its arguments (TUMBLE and HOP take one more, the
offset)."""
_WINDOW_COLUMNS = ("window_start", "window_end", "window_time")
_AGGREGATES = {
    exp.Sum: "sum",
    exp.Min: "min",
    exp.Max: "max",
    exp.Avg: "avg",
    exp.FirstValue: "first",
    exp.LastValue: "last",
    exp.ArrayAgg: "collect",
}
_NAMED_AGGREGATES = {"COLLECT": "collect", "FIRST": "first", "LAST": "last"}
SUPPORTED_AGGREGATES = (
    "COUNT(*), COUNT(x), COUNT(DISTINCT x), SUM, MIN, MAX, AVG, FIRST_VALUE, LAST_VALUE, "
    "ARRAY_AGG (or COLLECT), MAX_BY(x, by), MIN_BY(x, by) (or ARG_MAX, ARG_MIN)"
)
KEY_FIELD = "_sql_key"
ALL_KEY = "all"
"""The key of every record of a window without group keys."""


def window_call(node: exp.Expression | None) -> exp.Anonymous | None:
    """The ``TUMBLE(...)``/``HOP(...)``/``SESSION(...)`` a FROM item is, if it is one."""
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous):
        return node.this
    return None


def compile_window(
    comp: Compilation,
    sources: dict[str, Source],
    select: exp.Select,
    call: exp.Anonymous,
    statement: int,
    settings: Settings,
) -> None:
    """Write the window pipeline of ``select`` (FROM a window table function) into the spec."""
    # A source or a window refused here is reported and the rest still checked (each
    # column, aggregate and key of the query): one answer names every problem, and
    # the compiler writes no spec while any exists.
    source = _window_source(comp, sources, call, statement)
    assigner = _assigner(comp, call, statement) or {}
    scope, steps = one_source_query(comp, source, select, statement)
    computed: dict[str, str] = {}
    key = group_key(comp, scope, source, select, statement, computed)
    aggregations = aggregations_of(comp, scope, select, statement, computed)
    if computed:
        comp.came_from(("steps", len(steps)), select, statement)
        steps.append({"set": computed})
    spec = write_source(comp, source, steps)
    if key is not None:
        spec["key"] = key
        comp.came_from(("key",), select.args.get("group"), statement)
    spec["timestamp"] = source.timestamp
    spec["watermark"] = source.watermark
    comp.came_from(("timestamp",), source.watermark_node, source.statement)
    comp.came_from(("watermark",), source.watermark_node, source.statement)
    operator: dict[str, Any] = {"type": "window", "assigner": assigner, "time": "event"}
    values = settings.values
    if "allowed_lateness" in values:
        operator["allowed_lateness_ms"] = values["allowed_lateness"]
        comp.origins[("operator", "allowed_lateness_ms")] = settings.at["allowed_lateness"]
    if "early_fire" in values:
        operator["trigger"] = {"type": "continuous", "interval_ms": values["early_fire"]}
        comp.origins[("operator", "trigger")] = settings.at["early_fire"]
    if "on_bad_value" in values:
        operator["on_bad_value"] = values["on_bad_value"]
    operator["aggregations"] = aggregations
    spec["operator"] = operator
    comp.came_from(("operator",), call, statement)
    comp.came_from(("operator", "assigner"), call, statement)


def resolve_window(
    comp: Compilation,
    sources: dict[str, Source],
    select: exp.Select,
    call: exp.Anonymous,
    statement: int,
) -> None:
    """Check the source and columns of a query over a window function refused by name
    (``CUMULATE``): its other problems come in the same answer."""
    source = _window_source(comp, sources, call, statement)
    bounds: dict[str, tuple[str, ...]] = {column: (column,) for column in _WINDOW_COLUMNS}
    resolve_select(comp, source, select, statement, bounds)


def _window_source(
    comp: Compilation, sources: dict[str, Source], call: exp.Anonymous, statement: int
) -> Source:
    """The source a window function reads, its problems reported: a source without a
    watermark, or with another time column, is still the source its columns are read
    against; one that is unknown (or not named) a :func:`stand_in`."""
    name = call.name.upper()
    args = call.expressions
    if len(args) < 2:
        comp.refuse(
            call, statement, f"{name}(source, time_column, ...) names its source and time column"
        )
        return stand_in("", statement, call)
    table, time = args[0], args[1]
    table_path = column_path(table) if isinstance(table, exp.Column) else None
    if not table_path or len(table_path) != 1:
        comp.refuse(table, statement, f"{name}'s first argument names a source")
        return stand_in("", statement, table)
    source = sources.get(table_path[0])
    if source is None:
        comp.refuse(table, statement, _unknown_source(table_path[0], sources), "sql_unknown_source")
        return stand_in(table_path[0], statement, table)
    if source.time_column is None:
        if not source.watermark_refused:  # else refused at its WATERMARK already
            comp.refuse(
                call,
                statement,
                f"a window needs a watermark: source {source.name!r} declares none (add "
                "WATERMARK FOR <time column> AS <time column> - INTERVAL '...' SECOND)",
                "sql_no_watermark",
            )
        return source
    time_path = column_path(time) if isinstance(time, exp.Column) else None
    if time_path != source.time_path:
        comp.refuse(
            time,
            statement,
            f"{name} runs on the source's event time: its time column is "
            f"{source.time_column!r}, the column of the WATERMARK",
        )
    return source


def _unknown_source(name: str, sources: dict[str, Source]) -> str:
    declared = ", ".join(sources) or "none"
    return f"unknown source {name!r}: declare it with CREATE SOURCE (declared: {declared})"


def _assigner(comp: Compilation, call: exp.Anonymous, statement: int) -> dict[str, Any] | None:
    from .options import OptionError, duration_ms

    name = call.name.upper()
    durations = call.expressions[2:]
    expected = {"TUMBLE": (1, 2), "HOP": (2, 3), "SESSION": (1, 1)}[name]
    if not expected[0] <= len(durations) <= expected[1]:
        usage = {
            "TUMBLE": "TUMBLE(source, ts, size[, offset])",
            "HOP": "HOP(source, ts, slide, size[, offset])",
            "SESSION": "SESSION(source, ts, gap)",
        }[name]
        comp.refuse(call, statement, f"{usage}: {len(durations)} duration(s) given")
        return None
    values: list[int] = []
    for node in durations:  # each refused duration is reported, not only the first
        try:
            values.append(duration_ms(node))
        except OptionError as exc:
            comp.refuse(node, statement, f"{name} takes durations: {exc}")
    if len(values) < len(durations):
        return None
    if name == "TUMBLE":
        tumbling: dict[str, Any] = {"type": "tumbling", "size_ms": values[0]}
        if len(values) > 1:
            tumbling["offset_ms"] = values[1]
        return tumbling
    if name == "HOP":
        sliding: dict[str, Any] = {"type": "sliding", "size_ms": values[1], "slide_ms": values[0]}
        if len(values) > 2:
            sliding["offset_ms"] = values[2]
        return sliding
    return {"type": "session", "gap_ms": values[0]}


def group_key(
    comp: Compilation,
    scope: Scope,
    source: Source,
    select: exp.Select,
    statement: int,
    computed: dict[str, str],
    *,
    windowed: bool = True,
) -> dict[str, Any] | None:
    """The spec's key from the GROUP BY (and, ``windowed``, the window bounds it must
    name; without a window every item is a key)."""
    group = select.args.get("group")
    items = list(group.expressions) if isinstance(group, exp.Group) else []
    window_columns = {(c,) for c in _WINDOW_COLUMNS} if windowed else set()
    bounds = {
        path[0]
        for item in items
        if isinstance(item, exp.Column)
        and (path := column_path(item))
        and len(path) == 1
        and path[0] in _WINDOW_COLUMNS
    }
    if windowed and not {"window_start", "window_end"} <= bounds:
        comp.refuse(
            group if isinstance(group, exp.Group) else select,
            statement,
            "a window aggregation groups by window_start and window_end (and its keys): "
            "GROUP BY <keys>, window_start, window_end",
        )
    keys = [
        item
        for item in items
        if not (isinstance(item, exp.Column) and column_path(item) in window_columns)
    ]
    if group is not None:
        for extra in ("rollup", "cube", "grouping_sets"):
            if group.args.get(extra):
                comp.refuse(
                    group, statement, f"GROUP BY {extra.upper().replace('_', ' ')} is not supported"
                )
    extra_key: dict[str, Any] = {}
    if source.shuffle_partitions is not None:
        extra_key["shuffle_partitions"] = source.shuffle_partitions
    if not keys:
        computed[KEY_FIELD] = f"'{ALL_KEY}'"
        return {"field": KEY_FIELD, **extra_key}
    if len(keys) == 1 and isinstance(keys[0], exp.Column | exp.Dot):
        texts = translate(comp, scope, keys[0], statement, what="GROUP BY")
        path = column_path(keys[0])
        if texts is None or path is None:
            return None
        if len(path) > 1 and path[0] in scope.names:
            path = path[1:]
        field = ".".join(path)
        partitioned = source.partitioned_by == field
        return {"field": field, **({"partitioned": True} if partitioned else {}), **extra_key}
    translated = [translate(comp, scope, item, statement, what="GROUP BY") for item in keys]
    parts = [f"CAST({text} AS VARCHAR)" for text in translated if text is not None]
    if len(parts) < len(translated):  # each key's problems are reported, not only the first's
        return None
    computed[KEY_FIELD] = " || '|' || ".join(parts)
    return {"field": KEY_FIELD, **extra_key}


def aggregations_of(
    comp: Compilation,
    scope: Scope,
    select: exp.Select,
    statement: int,
    computed: dict[str, str],
    *,
    windowed: bool = True,
) -> dict[str, Any]:
    """The select list's aggregates, named by their aliases; what else it names must be a
    group key or (``windowed``) a window bound."""
    what = "a window's" if windowed else "a running aggregate's"
    window_columns = {(c,) for c in _WINDOW_COLUMNS} if windowed else set()
    group = select.args.get("group")
    group_items = {
        item.sql("risingwave")
        for item in (group.expressions if isinstance(group, exp.Group) else ())
    }
    aggregations: dict[str, Any] = {}
    before = len(comp.problems)
    for item in select.expressions:
        alias = item.alias if isinstance(item, exp.Alias) else None
        value = item.this if isinstance(item, exp.Alias) else item
        if _is_aggregate(value):
            name = alias or _default_name(value, len(aggregations))
            if name in aggregations:
                comp.refuse(
                    item,
                    statement,
                    f"two results are named {name!r}: give each its own alias",
                    "sql_duplicate",
                )
                resolve_columns(comp, scope, value, statement)  # its own problems too
                continue
            aggregation = _aggregation(comp, scope, value, name, statement, computed)
            if aggregation is not None:
                aggregations[name] = aggregation
                comp.came_from(("operator", "aggregations", name), item, statement)
            continue
        if isinstance(value, exp.Star):
            comp.refuse(
                value,
                statement,
                f"SELECT * is not {what} result: name the keys, "
                + ("window_start, window_end " if windowed else "")
                + "and the aggregates",
            )
        elif value.sql("risingwave") in group_items or (
            isinstance(value, exp.Column) and column_path(value) in window_columns
        ):
            continue  # a group key or a window bound: the record's key and window
        else:
            comp.refuse(
                value,
                statement,
                f"{value.sql('risingwave')!r} is neither a group key, a window bound nor an "
                "aggregate: a window's result is its key, its window and aggregates (an "
                "expression over aggregates is not supported)"
                if windowed
                else f"{value.sql('risingwave')!r} is neither a group key nor an aggregate: "
                "a running aggregate's result is its key and aggregates (an expression over "
                "aggregates is not supported)",
            )
            resolve_columns(comp, scope, value, statement)
    if not aggregations and len(comp.problems) == before:  # not when one was refused
        comp.refuse(
            select,
            statement,
            f"{'a window aggregation' if windowed else 'a GROUP BY'} computes at least one "
            f"aggregate ({SUPPORTED_AGGREGATES})",
        )
    return aggregations


def _is_aggregate(node: exp.Expression) -> bool:
    if isinstance(node, exp.Filter):
        return True
    if isinstance(node, exp.AggFunc):
        return True
    return isinstance(node, exp.Anonymous) and node.name.upper() in _NAMED_AGGREGATES


def _default_name(node: exp.Expression, index: int) -> str:
    """A result name for an aggregate without alias: ``count``, ``sum_amount``."""
    fn = _function_name(node).lower()
    arg = node.this if isinstance(node.this, exp.Expression) else None
    path = column_path(arg) if arg is not None else None
    name = (
        f"{fn}_{'_'.join(path)}"
        if path
        else (fn if index == 0 or fn == "count" else f"{fn}_{index}")
    )
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64]


def _function_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous) or not isinstance(node, exp.Func):
        return node.name or type(node).__name__
    return node.sql_name()


def _aggregation(
    comp: Compilation,
    scope: Scope,
    node: exp.Expression,
    name: str,
    statement: int,
    computed: dict[str, str],
) -> dict[str, Any] | None:
    if isinstance(node, exp.Filter):
        comp.refuse(
            node,
            statement,
            "an aggregate's FILTER (WHERE ...) is not supported: filter the records with WHERE",
        )
        resolve_columns(comp, scope, node, statement)
        return None
    if isinstance(node, exp.Count):
        arg = node.this
        if isinstance(arg, exp.Star) or (isinstance(arg, exp.Literal) and not arg.is_string):
            return {"fn": "count"}
        if isinstance(arg, exp.Distinct):
            if len(arg.expressions) != 1:
                comp.refuse(node, statement, "COUNT(DISTINCT x) takes one expression")
                resolve_columns(comp, scope, node, statement)
                return None
            field = _field(comp, scope, arg.expressions[0], name, statement, computed)
            return None if field is None else {"fn": "count_distinct", "field": field}
        if not isinstance(arg, exp.Expression):
            return {"fn": "count"}
        text = translate(comp, scope, arg, statement, what="COUNT")
        if text is None:
            return None
        helper = _helper(name)
        computed[helper] = f"CASE WHEN {text} IS NULL THEN 0 ELSE 1 END"
        return {"fn": "sum", "field": helper}
    if isinstance(node, exp.ArgMax | exp.ArgMin):
        return _by_aggregation(comp, scope, node, name, statement, computed)
    fn = next((fn for kind, fn in _AGGREGATES.items() if isinstance(node, kind)), None)
    if fn is None and isinstance(node, exp.Anonymous):
        fn = _NAMED_AGGREGATES.get(node.name.upper())
    if fn is None:
        comp.refuse(
            node,
            statement,
            f"aggregate {_function_name(node)} "
            f"is not supported (supported: {SUPPORTED_AGGREGATES})",
        )
        resolve_columns(comp, scope, node, statement)
        return None
    args = node.expressions if isinstance(node, exp.Anonymous) else [node.this]
    if len(args) != 1 or not isinstance(args[0], exp.Expression):
        comp.refuse(node, statement, f"{fn.upper()} takes one argument")
        resolve_columns(comp, scope, node, statement)
        return None
    arg = args[0]
    if isinstance(arg, exp.Distinct):
        comp.refuse(
            node, statement, f"DISTINCT is supported in COUNT(DISTINCT x) only, not in {fn.upper()}"
        )
        resolve_columns(comp, scope, node, statement)
        return None
    if fn in ("sum", "avg"):
        kind = family(scope, arg)
        if kind is not None and kind != "number":
            comp.refuse(
                arg,
                statement,
                f"type mismatch: {fn.upper()} takes numbers, "
                f"{arg.sql('risingwave')} is {describe(scope, arg, kind)}",
                "sql_type_mismatch",
            )
            return None
    field = _field(comp, scope, arg, name, statement, computed)
    return None if field is None else {"fn": fn, "field": field}


def _by_aggregation(
    comp: Compilation,
    scope: Scope,
    node: exp.ArgMax | exp.ArgMin,
    name: str,
    statement: int,
    computed: dict[str, str],
) -> dict[str, Any] | None:
    """``MAX_BY(x, by)`` / ``MIN_BY(x, by)`` (Spark's and Flink's names; ``ARG_MAX``,
    ``ARG_MIN``): ``x`` of the row with the largest/smallest ``by``."""
    fn = "max_by" if isinstance(node, exp.ArgMax) else "min_by"
    value, by = node.this, node.expression
    if not isinstance(value, exp.Expression) or not isinstance(by, exp.Expression):
        comp.refuse(node, statement, f"{fn.upper()}(x, by) takes two arguments")
        return None
    if node.args.get("count") is not None:
        comp.refuse(node, statement, f"{fn.upper()}(x, by) takes two arguments, not a count")
        return None
    field = _field(comp, scope, value, name, statement, computed)
    by_field = _field(comp, scope, by, f"{name}_by", statement, computed)
    if field is None or by_field is None:
        return None
    return {"fn": fn, "field": field, "by": by_field}


def _field(
    comp: Compilation,
    scope: Scope,
    arg: exp.Expression,
    name: str,
    statement: int,
    computed: dict[str, str],
) -> str | None:
    """The field an aggregate reads: the column's path, or a helper field computed by a
    ``set`` step for an expression."""
    text = translate(comp, scope, arg, statement, what="an aggregate's argument")
    if text is None:
        return None
    path = column_path(arg)
    if path is not None and isinstance(arg, exp.Column | exp.Dot):
        if len(path) > 1 and path[0] in scope.names:
            path = path[1:]
        return ".".join(path)
    helper = _helper(name)
    computed[helper] = text
    return helper


def _helper(name: str) -> str:
    return "_sql_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
