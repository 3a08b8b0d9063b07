"""A plain ``SELECT ... FROM source [WHERE ...]``: no window, no join, no aggregate.

Compiles to the stateless ``map`` operator: ``WHERE`` becomes a ``filter`` step, the
select list a ``set`` step (every computed or renamed column, each expression reading
the record as it came) and the operator's ``fields``, the listed columns in that order
(kept after the timestamp is read, so the time column may be left out); ``SELECT *``
keeps the whole record. Each record is a result at once, with
the source's timestamp; the Kafka key stays the source record's.
"""

from __future__ import annotations

from sqlglot import exp

from .context import Compilation
from .expressions import (
    column_path,
    one_source_query,
    resolve_columns,
    translate,
    write_source,
)
from .sources import Source

__all__ = ["compile_select", "resolve_select"]


def compile_select(comp: Compilation, source: Source, select: exp.Select, statement: int) -> None:
    """Write the map pipeline of ``select`` over ``source`` into the spec."""
    scope, steps = one_source_query(comp, source, select, statement)
    computed: dict[str, str] = {}
    kept: list[str] = []
    whole = False
    for item in select.expressions:
        if isinstance(item, exp.Star):
            whole = True
            continue
        node = item.this if isinstance(item, exp.Alias) else item
        path = column_path(node) if isinstance(node, exp.Column | exp.Dot) else None
        name = item.alias if isinstance(item, exp.Alias) else (path[-1] if path else None)
        if not name:
            comp.refuse(item, statement, f"name the computed column: {item.sql()} AS <name>")
            resolve_columns(comp, scope, node, statement)  # its own problems too
            continue
        if name in kept:
            comp.refuse(item, statement, f"the column {name!r} is selected twice")
            resolve_columns(comp, scope, node, statement)
            continue
        text = translate(comp, scope, node, statement, what="SELECT")
        if text is None:
            continue
        kept.append(name)
        if text != f"`{name}`":  # not the record's own top-level field of that name
            computed[name] = text
    if whole and kept:
        comp.refuse(select, statement, "SELECT * with other columns: list them, or only *")
        return
    if computed:
        comp.came_from(("steps", len(steps)), select, statement)
        steps.append({"set": computed})
    spec = write_source(comp, source, steps)
    if source.timestamp:
        spec["timestamp"] = source.timestamp
    if source.watermark:
        spec["watermark"] = source.watermark
    spec["operator"] = {"type": "map", "fields": kept} if kept else {"type": "map"}
    comp.came_from(("operator",), select, statement)


def resolve_select(
    comp: Compilation,
    source: Source,
    select: exp.Select,
    statement: int,
    bounds: dict[str, tuple[str, ...]] | None = None,
) -> None:
    """Check the columns of a select refused as a whole (an aggregate without a window, a
    window function there is no assigner for): its ``WHERE``, select list and ``GROUP
    BY`` are read against ``source`` all the same, so that an unknown column comes in the
    same answer as the refusal. ``bounds``: names that are not the source's columns
    (a window's ``window_start``)."""
    scope, _ = one_source_query(comp, source, select, statement)
    group = select.args.get("group")
    for node in [*select.expressions, *(group.expressions if isinstance(group, exp.Group) else ())]:
        resolve_columns(comp, scope, node, statement, bounds)
