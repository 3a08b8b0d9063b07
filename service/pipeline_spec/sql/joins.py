"""A join of two sources -> the spec's ``inputs`` and join operator.

```sql
-- interval join: rows whose times are within bounds of each other
FROM orders o JOIN payments p
  ON o.id = p.order_id AND p.ts BETWEEN o.ts - INTERVAL '1' MINUTE AND o.ts + INTERVAL '5' MINUTE
-- window join: rows of the same window (SELECT may name o.window_start, o.window_end)
FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE) o JOIN TUMBLE(payments, ts, INTERVAL '1' MINUTE) p
  ON o.id = p.order_id AND o.window_start = p.window_start AND o.window_end = p.window_end
-- semi (anti) window join: each order with (without) a payment in its window, once
FROM TUMBLE(orders, ...) o LEFT SEMI JOIN TUMBLE(payments, ...) p ON ... window bounds ...
-- temporal join: each order with the rate valid at its time
FROM orders o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r ON o.currency = r.currency
-- regular join: every auction with every person of its seller, whenever each came
FROM auction a JOIN person p ON a.seller = p.id
-- outer regular join: also each auction without person, padded until one comes
FROM auction a LEFT JOIN person p ON a.seller = p.id
```

The ``ON`` clause is a conjunction of equalities between the two sides (the join key:
one pair is each input's ``key.field``, several are joined into ``_sql_key``) and, for
an interval join, the time bounds (``BETWEEN`` or two comparisons of the time columns).
A ``WHERE`` condition over one side becomes that input's filter step; one over both
sides (``b.dateTime <= a.expires``) becomes the join's ``where``, which filters the
joined rows (a padded outer row reads its missing side as NULL, so SQL's ``WHERE``
drops it). In an inner join's ``ON`` such a condition is the same ``where`` (ON and
WHERE mean the same there); in an outer join's it is refused: it would decide which
rows match, and the operators match on the key and time only. The select
list becomes the join's ``select`` (``o.amount`` reads ``orders.amount``), ``SELECT *``
the default ``{"left", "right"}`` record. ``FOR SYSTEM_TIME AS OF PROCTIME()`` is a
lookup join, compiled to ``kind: "lookup"`` with the table source's ``max_rows`` (its
``WITH`` option: how many rows every replica may hold; required). A join of two sources
with neither time bounds nor windows is Flink's regular join (``kind: "regular"``; an
outer one's results are an upsert stream), its state bounded by ``SET state_ttl`` (Flink's
``table.exec.state.ttl``) when set. ``LEFT SEMI JOIN`` and ``LEFT ANTI JOIN`` (Spark's and
Hive's words for Flink's ``WHERE [NOT] EXISTS``/``IN`` subqueries) are window joins'
``how: semi``/``anti``: their select reads the left side and the window bounds only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from .context import Compilation
from .expressions import Scope, column_path, resolve_columns, translate
from .options import OptionError, duration_ms
from .sink import Settings
from .sources import Source, source_origins, stand_in
from .windows import KEY_FIELD, _assigner, _window_source, window_call

__all__ = ["compile_join"]
_HOWS = {"": "inner", "INNER": "inner", "LEFT": "left", "RIGHT": "right", "FULL": "full"}
_BOUNDS: dict[str, tuple[str, ...]] = {
    "window_start": ("window", "start"),
    "window_end": ("window", "end"),
}
"""A window join's select names its row's window as Flink SQL does; the spec reads
``window.start`` and ``window.end``."""
_LEFT_ONLY = ("semi", "anti")
_COMPARE = (exp.EQ, exp.LT, exp.LTE, exp.GT, exp.GTE)
_BOUNDING = (exp.Between, exp.LT, exp.LTE, exp.GT, exp.GTE)
"""The conditions an interval join's time bounds are written with."""


@dataclass(slots=True)
class _Side:
    """One input of the join as the compiler reads it."""

    source: Source
    alias: str
    node: exp.Expression
    assigner: dict[str, Any] | None = None
    windowed: bool = False
    """Written as a window (``assigner`` is None when its durations were refused)."""
    keys: list[exp.Expression] = field(default_factory=list)
    filters: list[exp.Expression] = field(default_factory=list)


def compile_join(
    comp: Compilation,
    sources: dict[str, Source],
    select: exp.Select,
    statement: int,
    settings: Settings,
) -> None:
    """Write the two-input join of ``select`` into the spec.

    A refused part (a side without a watermark, a condition the operators do not take,
    a self join, ``USING``...) is reported and the rest still read: the keys, the
    ``WHERE`` and the select list are resolved whatever else failed, so that one answer
    names every problem. The compiler writes no spec while any problem exists."""
    joins = select.args.get("joins") or []
    if len(joins) > 1:
        # Not read further: any column may be a third source's, which no scope holds.
        comp.refuse(joins[1], statement, "one join per pipeline (two inputs)")
        return
    join: exp.Join = joins[0]
    for clause in ("group", "having"):
        if select.args.get(clause):
            comp.refuse(
                select.args[clause],
                statement,
                "aggregating a join's rows is not supported: a pipeline is one operator (the join)",
            )
    using = bool(join.args.get("using"))
    if using:
        comp.refuse(join, statement, "JOIN ... USING is not supported: write ON a.k = b.k")
    left = _side(comp, sources, select.args["from_"].this, statement)
    right = _side(comp, sources, join.this, statement)
    if left.source is right.source:
        comp.refuse(
            join.this,
            statement,
            "a source joined with itself is not supported (the two inputs read different topics)",
        )
    how = _how(comp, join, statement)
    version = join.this.args.get("version") if isinstance(join.this, exp.Table) else None
    kind = "interval"
    if isinstance(version, exp.Version):
        kind = _temporal_kind(comp, version, left, statement)
    elif left.windowed or right.windowed:
        kind = "window"
    if (left.windowed != right.windowed) and kind != "temporal":
        comp.refuse(
            join, statement, "a window join joins two windows (TUMBLE or HOP on both sides)"
        )
    scope = Scope({}, [left.source] if left.source is right.source else [left.source, right.source])
    for side in (left, right):
        scope.names[side.source.name] = side.source
        scope.names[side.alias] = side.source
    before_on = len(comp.problems)
    across: list[exp.Expression] = []
    """Conditions over both sides: the join's ``where``."""
    lower, upper = _on(
        comp, scope, join.args.get("on"), left, right, kind, statement, how, across, using
    )
    on_refused = len(comp.problems) > before_on
    if kind == "interval" and lower is None and upper is None:
        kind = "regular"
    _where(comp, scope, select.args.get("where"), left, right, statement, across)
    operator: dict[str, Any] = {
        "type": "join",
        "kind": kind,
        "how": how,
        "left": left.source.name,
        "right": right.source.name,
    }
    if left.source is right.source:  # refused above: the spec names its inputs by source,
        del operator["right"]  # so it cannot hold this join (no rule says so again)
    if kind == "interval":
        if (lower is None or upper is None) and not on_refused:  # else ON says what is wrong
            comp.refuse(join.args.get("on") or join, statement, _INTERVAL_USAGE)
        operator["between"] = {"lower_ms": lower, "upper_ms": upper}
    if "state_ttl" in settings.values:  # a kind that takes none: the spec's rules say so
        operator["state_ttl_ms"] = settings.values["state_ttl"]
        comp.origins[("operator", "state_ttl_ms")] = settings.at["state_ttl"]
    if kind == "window" and left.assigner is not None and right.assigner is not None:
        if left.assigner != right.assigner:
            comp.refuse(
                join, statement, "a window join's two windows are the same (size, slide, offset)"
            )
        elif left.assigner["type"] not in ("tumbling", "sliding"):
            comp.refuse(left.node, statement, "a window join takes TUMBLE or HOP windows")
        operator["assigner"] = left.assigner
    if kind == "lookup":
        if right.source.max_rows is not None:
            operator["max_rows"] = right.source.max_rows
        if right.source.known:  # without it, the spec's rule (lookup_max_rows) says so here
            at = ("operator", "max_rows")
            comp.came_from(at, right.source.node, right.source.statement)
            comp.hints[at] = f"WITH (max_rows = N) on CREATE SOURCE {right.source.name}"
    if "allowed_lateness" in settings.values:
        operator["allowed_lateness_ms"] = settings.values["allowed_lateness"]
        comp.origins[("operator", "allowed_lateness_ms")] = settings.at["allowed_lateness"]
    projection = _select(
        comp, scope, select, statement, kind == "window", right if how in _LEFT_ONLY else None
    )
    if projection:
        operator["select"] = projection
    condition = _across(comp, scope, across, statement, kind == "window")
    if condition is not None:
        operator["where"] = condition
        comp.came_from(("operator", "where"), across[0], statement)
    comp.spec["inputs"] = {
        side.source.name: _input(comp, scope, side, statement) for side in (left, right)
    }
    comp.spec["operator"] = operator
    comp.came_from(("operator",), join, statement)
    # A how the kind does not take (a right temporal join, a semi join of two streams)
    # is the spec's rule's to refuse, at the side's keyword (LEFT, RIGHT, FULL) when
    # one was written.
    keyword = str(join.args.get("side") or "").upper()
    if how in ("left", "right", "full") and keyword:
        comp.origins[("operator", "how")] = comp.text.at_keyword(join, statement, keyword)
    else:
        comp.came_from(("operator", "how"), join, statement)


_INTERVAL_USAGE = (
    "an interval join bounds the two times: ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL "
    "'...' <unit> AND a.ts + INTERVAL '...' <unit> (the time columns are the WATERMARK "
    "columns); or join two windows, or FOR SYSTEM_TIME AS OF a.ts (temporal), or leave "
    "the times out (a regular join)"
)


def _side(
    comp: Compilation, sources: dict[str, Source], node: exp.Expression, statement: int
) -> _Side:
    """One input, its problems reported; a side refused (a source without a watermark)
    is still the source its columns are read against, an unknown one a stand-in."""
    call = window_call(node)
    alias = node.alias if isinstance(node, exp.Table) else ""
    if call is not None:
        if call.name.upper() not in ("TUMBLE", "HOP", "SESSION"):
            comp.refuse(call, statement, f"{call.name}(...) is not a window function here")
            return _Side(stand_in(alias, statement, node), alias, node)
        windowed = _window_source(comp, sources, call, statement)
        assigner = _assigner(comp, call, statement)
        return _Side(windowed, alias or windowed.name, node, assigner, windowed=True)
    if not isinstance(node, exp.Table) or not node.name or node.args.get("db"):
        comp.refuse(node, statement, "a join's side is a source or a window of one (no subquery)")
        return _Side(stand_in(alias, statement, node), alias, node)
    source = sources.get(node.name)
    if source is None:
        comp.refuse(
            node,
            statement,
            f"unknown source {node.name!r}: declare it with CREATE "
            f"SOURCE (declared: {', '.join(sources) or 'none'})",
            "sql_unknown_source",
        )
        source = stand_in(node.name, statement, node)
    elif source.time_column is None and not source.watermark_refused:
        comp.refuse(
            node,
            statement,
            f"a join runs on event time: source {source.name!r} needs a WATERMARK",
            "sql_no_watermark",
        )
    return _Side(source, alias or source.name, node)


def _how(comp: Compilation, join: exp.Join, statement: int) -> str:
    side = str(join.args.get("side") or "").upper()
    kind = str(join.args.get("kind") or "").upper()
    if kind in ("SEMI", "ANTI") and side in ("", "LEFT"):
        return kind.lower()
    if kind in ("CROSS", "SEMI", "ANTI", "NATURAL") or join.args.get("method"):
        comp.refuse(
            join,
            statement,
            f"{side + ' ' if side else ''}{kind or join.args.get('method')} JOIN is not "
            "supported (INNER, LEFT, RIGHT, FULL, and LEFT SEMI and LEFT ANTI of windows)",
        )
        return "inner"
    return _HOWS.get(side, "inner")


def _temporal_kind(comp: Compilation, version: exp.Version, left: _Side, statement: int) -> str:
    at = version.expression
    if isinstance(at, exp.Anonymous | exp.Func) and (
        (at.name if isinstance(at, exp.Anonymous) else at.sql_name()).upper() == "PROCTIME"
    ):
        return "lookup"
    path = column_path(at) if isinstance(at, exp.Column) else None
    if left.source.time_column is None:
        return "temporal"  # its lack of a watermark is reported at the side
    if path is None or (
        path != left.source.time_path
        and (path[0] not in (left.alias, left.source.name) or path[1:] != left.source.time_path)
    ):
        comp.refuse(
            at,
            statement,
            "FOR SYSTEM_TIME AS OF <left>.<its WATERMARK column> "
            "(event time) or PROCTIME() (a lookup)",
        )
    return "temporal"


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.And):
        return [*_conjuncts(node.this), *_conjuncts(node.expression)]
    return [node]


def _side_of(scope: Scope, node: exp.Expression, left: _Side, right: _Side) -> set[str]:
    """Which sides (``left``/``right``) the columns of ``node`` read."""
    found: set[str] = set()
    for column in node.find_all(exp.Column):
        path = column_path(column) or ()
        if len(path) > 1 and path[0] in (left.alias, left.source.name):
            found.add("left")
        elif len(path) > 1 and path[0] in (right.alias, right.source.name):
            found.add("right")
        else:
            owners = scope.owner(path[0]) if path else []
            if len(owners) == 1:
                found.add("left" if owners[0] is left.source else "right")
            else:
                found.add("?")
    return found


def _time_of(node: exp.Expression, side: _Side) -> bool:
    path = column_path(node) if isinstance(node, exp.Column) else None
    if path is None or side.source.time_column is None:
        return False
    return path[0] in (side.alias, side.source.name) and path[1:] == side.source.time_path


def _offset(node: exp.Expression, side: _Side) -> int | None:
    """``side.ts`` (0), ``side.ts + INTERVAL`` or ``side.ts - INTERVAL``, in ms."""
    if _time_of(node, side):
        return 0
    if isinstance(node, exp.Add | exp.Sub) and _time_of(node.this, side):
        try:
            ms = duration_ms(node.expression)
        except OptionError:
            return None
        return ms if isinstance(node, exp.Add) else -ms
    return None


def _on(
    comp: Compilation,
    scope: Scope,
    on: exp.Expression | None,
    left: _Side,
    right: _Side,
    kind: str,
    statement: int,
    how: str,
    across: list[exp.Expression],
    using: bool = False,
) -> tuple[int | None, int | None]:
    """Keys into the sides; the interval bounds ``(lower, upper)`` of ``r.ts - l.ts``
    (None: ON does not bound that side). An inner join's condition over both sides that
    is neither goes to ``across`` (the join's ``where``)."""
    if on is None:
        if not using:  # else refused at the USING
            comp.refuse(None, statement, "a join needs ON <left key> = <right key>")
        return None, None
    lower: int | None = None
    upper: int | None = None
    windows_named: set[str] = set()
    # A side without event time (its refusal reported) cannot be bounded: a comparison
    # is taken as the bound it would be, its columns still resolved.
    timeless = left.source.time_column is None or right.source.time_column is None
    for cond in _conjuncts(on):
        bounds = _bounds(cond, left, right)
        if bounds is None and timeless and kind == "interval" and isinstance(cond, _BOUNDING):
            resolve_columns(comp, scope, cond, statement)
            bounds = (0, 0)
        if bounds is not None:
            lo, hi = bounds
            lower = lo if lo is not None else lower
            upper = hi if hi is not None else upper
            continue
        if isinstance(cond, exp.EQ) and kind == "window":
            names = {(column_path(n) or ("",))[-1] for n in (cond.this, cond.expression)}
            if len(names) == 1 and names <= {"window_start", "window_end"}:
                windows_named |= names
                continue
        if isinstance(cond, exp.EQ):
            sides = (
                _side_of(scope, cond.this, left, right),
                _side_of(scope, cond.expression, left, right),
            )
            if sides == ({"left"}, {"right"}):
                left.keys.append(cond.this)
                right.keys.append(cond.expression)
                continue
            if sides == ({"right"}, {"left"}):
                left.keys.append(cond.expression)
                right.keys.append(cond.this)
                continue
        before = len(comp.problems)
        reads = _side_of(scope, cond, left, right)
        if "?" in reads:  # an unknown column: say so
            resolve_columns(comp, scope, cond, statement, _BOUNDS if kind == "window" else None)
        if len(comp.problems) > before:
            continue
        if how == "inner" and reads == {"left", "right"}:
            across.append(cond)  # ON and WHERE are one in an inner join
            continue
        comp.refuse(
            cond,
            statement,
            f"join condition {cond.sql('risingwave')!r} is not supported: ON takes equalities "
            "of a left and a right column (the key)"
            + (
                ", the time bounds"
                if kind == "interval"
                else " and window_start/window_end equalities"
                if kind == "window"
                else ""
            )
            + (
                "; compare the two sides in WHERE (it filters the joined rows)"
                if reads == {"left", "right"}
                else "; filter one side with WHERE"
            ),
            "sql_join_condition",
        )
    if not left.keys:
        comp.refuse(
            on,
            statement,
            "a join needs an equality of a left and a right column (its key) in ON",
            "sql_join_condition",
        )
    if kind == "window" and windows_named != {"window_start", "window_end"}:
        comp.refuse(
            on,
            statement,
            "a window join matches rows of the same window: ON ... AND "
            "a.window_start = b.window_start AND a.window_end = b.window_end",
            "sql_join_condition",
        )
    if kind != "interval" and (lower is not None or upper is not None):
        comp.refuse(
            on,
            statement,
            f"time bounds are for interval joins, not {kind} joins",
            "sql_join_condition",
        )
    return lower, upper


def _bounds(
    cond: exp.Expression, left: _Side, right: _Side
) -> tuple[int | None, int | None] | None:
    """``(lower, upper)`` of ``r.ts - l.ts`` that ``cond`` states (None: no time bound)."""
    if isinstance(cond, exp.Between):
        low, high = cond.args.get("low"), cond.args.get("high")
        if not isinstance(low, exp.Expression) or not isinstance(high, exp.Expression):
            return None
        if _time_of(cond.this, right):
            lo, hi = _offset(low, left), _offset(high, left)
            if lo is not None and hi is not None:
                return lo, hi
        if _time_of(cond.this, left):
            lo, hi = _offset(low, right), _offset(high, right)
            if lo is not None and hi is not None:  # l in [r+lo, r+hi]: r - l in [-hi, -lo]
                return -hi, -lo
        return None
    if isinstance(cond, exp.GT | exp.GTE | exp.LT | exp.LTE):
        a, b = cond.this, cond.expression
        if isinstance(cond, exp.LT | exp.LTE):  # a <= b  as  b >= a
            a, b = b, a
        # now: a >= b
        if _time_of(a, right) and (off := _offset(b, left)) is not None:
            return off, None  # r >= l + off
        if _time_of(b, right) and (off := _offset(a, left)) is not None:
            return None, off  # l + off >= r
        if _time_of(a, left) and (off := _offset(b, right)) is not None:
            return None, -off  # l >= r + off: r - l <= -off
        if _time_of(b, left) and (off := _offset(a, right)) is not None:
            return -off, None  # r + off >= l: r - l >= -off
    return None


def _where(
    comp: Compilation,
    scope: Scope,
    where: exp.Expression | None,
    left: _Side,
    right: _Side,
    statement: int,
    across: list[exp.Expression],
) -> None:
    """Each condition over one side into that side's filters; over both into ``across``
    (the join's ``where``)."""
    if not isinstance(where, exp.Where):
        return
    for cond in _conjuncts(where.this):
        sides = _side_of(scope, cond, left, right)
        if sides == {"left"}:
            left.filters.append(cond)
        elif sides == {"right"}:
            right.filters.append(cond)
        elif sides == {"left", "right"}:
            across.append(cond)
        else:
            before = len(comp.problems)
            if "?" in sides:  # a column of neither side: name it (unknown, or ambiguous)
                resolve_columns(comp, scope, cond, statement)
            if len(comp.problems) > before:
                continue
            comp.refuse(
                cond,
                statement,
                f"WHERE {cond.sql('risingwave')!r} reads no column: a join's WHERE filters "
                "one input, or the joined rows by a comparison of the two",
            )


def _across(
    comp: Compilation,
    scope: Scope,
    across: list[exp.Expression],
    statement: int,
    windowed: bool,
) -> str | None:
    """The conditions over both sides as the join's ``where``, ANDed (None: none, or
    every one refused: its problems are reported)."""
    texts = [
        translate(
            comp,
            scope,
            cond,
            statement,
            qualified=True,
            what="a join's condition",
            bounds=_BOUNDS if windowed else None,
        )
        for cond in across
    ]
    found = [t for t in texts if t is not None]
    if not found:
        return None
    return found[0] if len(found) == 1 else " AND ".join(f"({t})" for t in found)


def _input(comp: Compilation, scope: Scope, side: _Side, statement: int) -> dict[str, Any]:
    source = side.source
    own = Scope({source.name: source, side.alias: source}, [source])
    steps: list[dict[str, Any]] = []
    at = ("inputs", source.name)
    for cond in side.filters:
        text = translate(comp, own, cond, statement, what="WHERE")
        if text is not None:
            comp.came_from((*at, "steps", len(steps)), cond, statement)
            steps.append({"filter": text})
    key: dict[str, Any]
    paths = [column_path(k) for k in side.keys]
    if len(side.keys) == 1 and paths[0] is not None:
        path = paths[0]
        if len(path) > 1 and path[0] in (side.alias, source.name):
            path = path[1:]
        translate(comp, own, side.keys[0], statement, what="the join key")
        key = {"field": ".".join(path)}
    else:
        texts = [translate(comp, own, k, statement, what="the join key") for k in side.keys]
        parts = [f"CAST({t} AS VARCHAR)" for t in texts if t is not None]
        comp.came_from((*at, "steps", len(steps)), side.keys[0] if side.keys else None, statement)
        steps.append({"set": {KEY_FIELD: " || '|' || ".join(parts) or "''"}})
        key = {"field": KEY_FIELD}
    if source.shuffle_partitions is not None:
        key["shuffle_partitions"] = source.shuffle_partitions
    section: dict[str, Any] = {"source": source.source}
    if steps:
        section["steps"] = steps
    if source.source.get("changelog") == "upsert" and key == {"field": _primary_key_column(source)}:
        pass  # a table joined on its primary key: keyed by the Kafka key, which holds it
    else:  # (a table joined on another column keeps it: the spec's rule refuses it there)
        section["key"] = key
    section["timestamp"] = source.timestamp
    section["watermark"] = source.watermark
    comp.came_from(at, source.node, source.statement)
    source_origins(comp, (*at, "source"), source)
    comp.came_from((*at, "key"), side.keys[0] if side.keys else None, statement)
    comp.came_from((*at, "watermark"), source.watermark_node, source.statement)
    comp.came_from((*at, "timestamp"), source.watermark_node, source.statement)
    return section


def _primary_key_column(source: Source) -> str | None:
    """A table's one ``PRIMARY KEY`` column (None: none, or several)."""
    return source.primary_key[0] if len(source.primary_key) == 1 else None


def _select(
    comp: Compilation,
    scope: Scope,
    select: exp.Select,
    statement: int,
    windowed: bool,
    unread: _Side | None,
) -> dict[str, str]:
    """The join's ``select``: output name -> expression over ``<input>.<path>``
    (``windowed``: and ``window_start``/``window_end``, the row's window; ``unread``: the
    side a semi or anti join's rows do not have)."""
    out: dict[str, str] = {}
    bounds = _BOUNDS if windowed else None
    items = select.expressions
    if len(items) == 1 and isinstance(items[0], exp.Star):
        return out
    for item in items:
        value = item.this if isinstance(item, exp.Alias) else item
        if isinstance(value, exp.Star) or (
            isinstance(value, exp.Column) and isinstance(value.this, exp.Star)
        ):
            comp.refuse(item, statement, "* with other items: name each output, or SELECT * alone")
            continue
        name = item.alias if isinstance(item, exp.Alias) else None
        if name is None:
            path = column_path(value)
            if path is None:
                comp.refuse(
                    item, statement, "an expression in a join's select needs a name: ... AS name"
                )
                resolve_columns(comp, scope, value, statement, bounds)  # its own problems too
                continue
            name = path[-1]
        if name in out:
            comp.refuse(
                item, statement, f"two outputs are named {name!r}: alias one", "sql_duplicate"
            )
            resolve_columns(comp, scope, value, statement, bounds)
            continue
        if unread is not None and _reads(value, unread):
            comp.refuse(
                item,
                statement,
                f"a SEMI or ANTI join returns left rows: {unread.alias} has no columns "
                "here (select the left side's columns and the window bounds)",
                "sql_unknown_column",
            )
            continue
        text = translate(
            comp,
            scope,
            value,
            statement,
            qualified=True,
            what="a join's select",
            bounds=bounds,
        )
        if text is not None:
            out[name] = text
            comp.came_from(("operator", "select", name), item, statement)
    return out


def _reads(node: exp.Expression, side: _Side) -> bool:
    """Whether ``node`` names a column of ``side`` by its alias or name (the window
    bounds aside: ``a.window_start`` is the row's window, whichever side names it)."""
    for column in node.find_all(exp.Column):
        path = column_path(column) or ()
        if len(path) > 1 and path[0] in (side.alias, side.source.name):
            if not (len(path) == 2 and path[1] in _BOUNDS):
                return True
        elif len(path) == 1 and path[0] not in _BOUNDS and side.source.declares(path[0]):
            return True
    return False
