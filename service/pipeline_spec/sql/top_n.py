"""Flink's Top-N query -> the Top-N operator (``"type": "top_n"``).

```sql
SET emit_interval = INTERVAL '1' SECOND;   -- the default
INSERT INTO top_products
SELECT * FROM (
  SELECT *, ROW_NUMBER() OVER (PARTITION BY category ORDER BY revenue DESC) AS rn
  FROM sales WHERE region = 'eu')
WHERE rn <= 3;
```

Flink SQL's Top-N: ``PARTITION BY`` is the pipeline key (read as a ``GROUP BY`` is:
one column is ``key.field``, several or an expression are joined into ``_sql_key``, none
is the one key ``all``), ``ORDER BY`` one column (``DESC`` or ``ASC``) is ``order_by``,
and ``rn <= N`` (or ``rn < N``, ``rn = 1``) is ``n``. The inner ``WHERE`` is a filter
step. Over a stream each record is a row of its own (append-only input); over a table
(a ``PRIMARY KEY`` or ``changelog = 'upsert'``) each primary key is a row, replaced and
deleted (the Top-N over a table: docs/pipeline-spec.md, "Top-N"); the spec's ``row_key``
has no other SQL form. The results are the rank rows, upserts keyed by
``<key>|<rank>`` with the whole record as ``row`` (docs/pipeline-spec.md, "Top-N"): what
Flink writes when the query selects ``rn``. So the outer select is ``*``, and the inner
one ``*`` and the ``ROW_NUMBER()``; anything else is refused where it is written.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from .context import Compilation
from .expressions import column_path, one_source_query, resolve_columns, write_source
from .problems import SqlProblem
from .sink import Settings
from .sources import Source, stand_in
from .windows import group_key

__all__ = ["compile_top_n", "top_n_query"]

_NOT_FOR_TOP_N = ("allowed_lateness", "early_fire", "state_ttl")
_INNER_CLAUSES = ("group", "having", "order", "limit", "offset", "qualify", "distinct", "joins")


def top_n_query(select: exp.Select) -> exp.Select | None:
    """The inner select of a Top-N query (``FROM (SELECT ..., ROW_NUMBER() OVER (...)
    ...)``), or None when ``select`` is not one."""
    from_ = select.args.get("from_")
    sub = from_.this if isinstance(from_, exp.From) else None
    if not isinstance(sub, exp.Subquery) or not isinstance(sub.this, exp.Select):
        return None
    inner = sub.this
    if any(isinstance(w.this, exp.RowNumber) for w in inner.find_all(exp.Window)):
        return inner
    return None


def compile_top_n(
    comp: Compilation,
    sources: dict[str, Source],
    select: exp.Select,
    inner: exp.Select,
    statement: int,
    settings: Settings,
) -> None:
    """Write the Top-N of ``select`` (its ``inner`` select ranking the rows) into the spec."""
    source = _source(comp, sources, inner, statement)
    for clause in _INNER_CLAUSES:
        node = inner.args.get(clause)
        if node:
            at = node[0] if isinstance(node, list) else node
            comp.refuse(
                at if isinstance(at, exp.Expression) else inner,
                statement,
                f"{clause.upper()} in a Top-N's inner query is not supported: it ranks the "
                "records of one source (filter them with WHERE)",
            )
    scope, steps = one_source_query(comp, source, inner, statement)
    window, rank_name = _row_number(comp, scope, inner, statement)
    listed = [item for item in select.expressions if not isinstance(item, exp.Star)]
    if listed:
        comp.refuse(
            listed[0],
            statement,
            "a Top-N selects * (its results are rank rows: the key, the rank and the whole record)",
        )
    n = _n(comp, select, rank_name, statement)
    computed: dict[str, str] = {}
    key: dict[str, Any] | None = None
    order: dict[str, Any] | None = None
    if window is not None:
        partition = [p.copy() for p in window.args.get("partition_by") or []]
        grouped = exp.Select(group=exp.Group(expressions=partition)) if partition else exp.Select()
        key = group_key(comp, scope, source, grouped, statement, computed, windowed=False)
        order = _order(comp, scope, window, statement)
        if window.args.get("spec") is not None:
            comp.refuse(window.args["spec"], statement, "a Top-N's ROW_NUMBER() takes no frame")
    if computed:
        comp.came_from(("steps", len(steps)), inner, statement)
        steps.append({"set": computed})
    spec = write_source(comp, source, steps)
    if key is not None:
        spec["key"] = key
        comp.came_from(("key",), window, statement)
    if source.timestamp:
        spec["timestamp"] = source.timestamp
    if source.watermark:
        spec["watermark"] = source.watermark
    values = settings.values
    for name in _NOT_FOR_TOP_N:
        if name in values:
            comp.problems.append(
                SqlProblem(
                    settings.at[name],
                    "sql_option",
                    f"SET {name} is not for a Top-N (nothing is late, every row is kept as "
                    "its rank needs; emit_interval says how often ranks are emitted)",
                )
            )
    operator: dict[str, Any] = {"type": "top_n"}
    if order is not None:
        operator["order_by"] = order
    if n is not None:
        operator["n"] = n
    if "emit_interval" in values:
        operator["emit_interval_ms"] = values["emit_interval"]
        comp.origins[("operator", "emit_interval_ms")] = settings.at["emit_interval"]
    spec["operator"] = operator
    comp.came_from(("operator",), select, statement)


def _source(
    comp: Compilation, sources: dict[str, Source], inner: exp.Select, statement: int
) -> Source:
    from_ = inner.args.get("from_")
    table = from_.this if isinstance(from_, exp.From) else None
    if not isinstance(table, exp.Table) or not table.name:
        comp.refuse(
            table if isinstance(table, exp.Expression) else inner,
            statement,
            "a Top-N ranks the records of one source: FROM <source> in the inner query",
        )
        return stand_in("", statement, inner)
    source = sources.get(table.name)
    if source is None:
        comp.refuse(
            table,
            statement,
            f"unknown source {table.name!r}: declare it with CREATE "
            f"SOURCE (declared: {', '.join(sources) or 'none'})",
            "sql_unknown_source",
        )
        return stand_in(table.name, statement, table)
    return source


def _row_number(
    comp: Compilation, scope: Any, inner: exp.Select, statement: int
) -> tuple[exp.Window | None, str | None]:
    """The inner select's ``ROW_NUMBER() OVER (...) AS name`` and its name; every other
    item but ``*`` refused."""
    window: exp.Window | None = None
    name: str | None = None
    for item in inner.expressions:
        if isinstance(item, exp.Star):
            continue
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Window) and isinstance(node.this, exp.RowNumber) and window is None:
            window = node
            name = item.alias if isinstance(item, exp.Alias) else None
            if not name:
                comp.refuse(item, statement, "name the row number: ROW_NUMBER() OVER (...) AS rn")
            continue
        comp.refuse(
            item,
            statement,
            "a Top-N's inner query selects * and one ROW_NUMBER() OVER (...) AS rn (a rank "
            "row holds the whole record)",
        )
        resolve_columns(comp, scope, node, statement)
    return window, name


def _order(
    comp: Compilation, scope: Any, window: exp.Window, statement: int
) -> dict[str, Any] | None:
    order = window.args.get("order")
    items = list(order.expressions) if isinstance(order, exp.Order) else []
    if len(items) != 1:
        message = (
            "a Top-N orders by one column: ROW_NUMBER() OVER (PARTITION BY ... ORDER BY "
            "<column> [DESC])"
        )
        if isinstance(order, exp.Order):
            comp.refuse_clause(order, statement, "ORDER", message)
        else:
            comp.refuse(window, statement, message)
        for item in items:
            resolve_columns(comp, scope, item, statement)
        return None
    ordered = items[0]
    node = ordered.this if isinstance(ordered, exp.Ordered) else ordered
    path = column_path(node) if isinstance(node, exp.Column | exp.Dot) else None
    if path is None:
        comp.refuse(
            node,
            statement,
            "a Top-N orders by a column, not an expression (compute it first in another "
            "pipeline, or order by the column itself)",
        )
        resolve_columns(comp, scope, node, statement)
        return None
    before = len(comp.problems)
    resolve_columns(comp, scope, node, statement)
    if len(comp.problems) > before:
        return None
    if len(path) > 1 and path[0] in scope.names:
        path = path[1:]
    desc = bool(ordered.args.get("desc")) if isinstance(ordered, exp.Ordered) else False
    comp.came_from(("operator", "order_by"), node, statement)
    return {"field": ".".join(path), "desc": desc}


def _n(comp: Compilation, select: exp.Select, rank: str | None, statement: int) -> int | None:
    """N from the outer ``WHERE rn <= N`` (``rn < N``: N - 1; ``rn = 1``: 1)."""
    where = select.args.get("where")
    shape = (
        "a Top-N keeps the first N rows: WHERE rn <= N (or rn < N, rn = 1), rn the "
        "ROW_NUMBER()'s name"
    )
    if not isinstance(where, exp.Where):
        comp.refuse(select, statement, shape, "sql_missing")
        return None
    cond = where.this
    flipped = {exp.GTE: exp.LTE, exp.GT: exp.LT}
    if type(cond) in flipped and isinstance(cond.this, exp.Literal):
        cond = flipped[type(cond)](this=cond.expression, expression=cond.this)
    if not isinstance(cond, exp.LTE | exp.LT | exp.EQ):
        comp.refuse(where.this, statement, shape)
        return None
    column, bound = cond.this, cond.expression
    path = column_path(column) if isinstance(column, exp.Column) else None
    if path is None or path[-1] != rank:
        comp.refuse(column, statement, shape)
        return None
    value = bound.this if isinstance(bound, exp.Literal) and not bound.is_string else None
    try:
        number = int(value) if value is not None else None
    except ValueError:
        number = None
    if number is None:
        comp.refuse(bound, statement, f"{shape}: N is an integer")
        return None
    if isinstance(cond, exp.EQ) and number != 1:
        comp.refuse(where.this, statement, f"{shape}: rn = {number} is not the first rows")
        return None
    n = number - 1 if isinstance(cond, exp.LT) else number
    comp.came_from(("operator", "n"), bound, statement)
    return n
