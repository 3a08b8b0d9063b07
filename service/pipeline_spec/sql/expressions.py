"""Expressions of a query -> the steps' SQL expressions, with their columns checked.

A query's expressions (``WHERE``, an aggregate's argument, a computed group key, a
join's select item) become the text of a step (or of a join's ``select``), which the
steps compiler (:mod:`service.operators.steps`) turns into code. This module resolves
each column against the sources in scope (``o.amount`` through the alias ``o``,
``payload.a.b`` as a path into the column ``payload``), refuses an unknown one, checks
types where the columns declare them (a number compared with a string, ``SUM`` over a
``VARCHAR``), and writes the expression in the steps' dialect, the columns rewritten to
the record's field paths (or ``<input>.<path>`` in a join's select).

Type checks are only where both sides are known: a column of a declared scalar type, a
literal, a ``CAST``; an undeclared or structured value (``payload.a.b``) is not
guessed at (the step checks it per record and sends a mismatch to the dead-letter topic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from service.operators.steps import check_expression
from service.operators.steps.compiler import StepsDialect, column_path

from .context import Compilation
from .sources import Source, family_of, source_origins

__all__ = [
    "Scope",
    "column_path",
    "describe",
    "family",
    "one_source_query",
    "resolve_columns",
    "translate",
    "write_source",
]


@dataclass(slots=True)
class Scope:
    """The sources a query reads, by name and by alias."""

    names: dict[str, Source]
    """Each source under its name and its alias (``FROM orders o``: both)."""
    order: list[Source]
    """Distinct sources, in the order of the FROM clause."""

    def owner(self, column: str) -> list[Source]:
        """The sources that declare ``column`` (every one that declares no columns); a
        stand-in for an unknown source only when no declared source does, as it
        "declares" every column and would make each one ambiguous."""
        found = [s for s in self.order if s.declares(column)]
        return [s for s in found if s.known] or found


def resolve(
    comp: Compilation, scope: Scope, node: exp.Expression, statement: int
) -> tuple[Source, tuple[str, ...]] | None:
    """The source and field path a column reference names (None: reported)."""
    path = column_path(node)
    if not path:
        comp.refuse(node, statement, f"{node.sql('risingwave')!r} is not a column reference")
        return None
    if len(path) > 1 and path[0] in scope.names:
        source, rest = scope.names[path[0]], path[1:]
        if not source.declares(rest[0]):
            comp.refuse(
                node,
                statement,
                f"unknown column {rest[0]!r} of {source.name!r} (it declares "
                f"{', '.join(source.columns)})",
                "sql_unknown_column",
            )
            return None
        return source, rest
    owners = scope.owner(path[0])
    if len(owners) == 1:
        return owners[0], path
    if not owners:
        known = sorted({c for s in scope.order for c in s.columns})
        comp.refuse(
            node,
            statement,
            f"unknown column {path[0]!r}"
            + (f" (the sources declare {', '.join(known)})" if known else ""),
            "sql_unknown_column",
        )
    else:
        comp.refuse(
            node,
            statement,
            f"column {path[0]!r} is ambiguous: qualify it with one of "
            f"{', '.join(s.name for s in owners)}",
            "sql_ambiguous_column",
        )
    return None


_REFUSED: dict[type[exp.Expression], str] = {
    exp.Subquery: "a subquery",
    exp.Select: "a subquery",
    exp.Exists: "EXISTS",
    exp.Window: "an OVER window",
    exp.Star: "*",
}

_STRING_FUNCS = (
    "UPPER",
    "LOWER",
    "TRIM",
    "LTRIM",
    "RTRIM",
    "SUBSTRING",
    "SUBSTR",
    "CONCAT",
    "REPLACE",
    "LEFT",
    "RIGHT",
)
_NUMBER_FUNCS = (
    "LENGTH",
    "CHAR_LENGTH",
    "ABS",
    "ROUND",
    "FLOOR",
    "CEIL",
    "CEILING",
    "POWER",
    "SQRT",
    "LN",
    "LOG10",
    "EXP",
    "MOD",
    "SIGN",
    "CARDINALITY",
)


def family(scope: Scope, node: exp.Expression) -> str | None:
    """What ``node`` evaluates to, where that is known: ``number``, ``string``,
    ``boolean``, ``timestamp``; None where it is not (NULL, structured, undeclared)."""
    if isinstance(node, exp.Paren):
        return family(scope, node.this)
    if isinstance(node, exp.Literal):
        return "string" if node.is_string else "number"
    if isinstance(node, exp.Boolean):
        return "boolean"
    if isinstance(node, exp.Column | exp.Dot):
        path = column_path(node)
        if not path:
            return None
        if len(path) > 1 and path[0] in scope.names:
            source, path = scope.names[path[0]], path[1:]
        else:
            owners = scope.owner(path[0])
            if len(owners) != 1:
                return None
            source = owners[0]
        column = source.columns.get(path[0])
        if column is None or len(path) > 1 or column.family == "any":
            return None
        return column.family
    if isinstance(node, exp.Cast):
        to = node.args.get("to")
        kind = family_of(to) if isinstance(to, exp.DataType) else "any"
        return None if kind == "any" else kind
    if isinstance(node, exp.Neg | exp.Add | exp.Sub | exp.Mul | exp.Div | exp.Mod):
        return "number"
    if isinstance(node, exp.DPipe | exp.Concat):
        return "string"
    if isinstance(
        node,
        exp.And
        | exp.Or
        | exp.Not
        | exp.EQ
        | exp.NEQ
        | exp.LT
        | exp.LTE
        | exp.GT
        | exp.GTE
        | exp.Like
        | exp.In
        | exp.Between
        | exp.Is,
    ):
        return "boolean"
    if isinstance(node, exp.Case):
        for branch in node.args.get("ifs") or ():
            found = family(scope, branch.args["true"])
            if found is not None:
                return found
        default = node.args.get("default")
        return family(scope, default) if isinstance(default, exp.Expression) else None
    if isinstance(node, exp.Func):
        name = node.sql_name().upper() if not isinstance(node, exp.Anonymous) else node.name.upper()
        if name in _STRING_FUNCS:
            return "string"
        if name in _NUMBER_FUNCS:
            return "number"
    return None


def _check_types(
    comp: Compilation, scope: Scope, node: exp.Expression, statement: int, skipped: set[int]
) -> None:
    """Report each operator applied to values of types it cannot take (outside the
    ``skipped`` parts, refused already)."""
    for sub in node.walk(prune=lambda n: id(n) in skipped):
        if id(sub) in skipped:
            continue
        if isinstance(sub, exp.EQ | exp.NEQ | exp.LT | exp.LTE | exp.GT | exp.GTE):
            left, right = family(scope, sub.this), family(scope, sub.expression)
            if left and right and left != right and "timestamp" not in (left, right):
                comp.refuse(
                    sub,
                    statement,
                    f"type mismatch: {_show(sub.this)} is {describe(scope, sub.this, left)} and "
                    f"{_show(sub.expression)} is {describe(scope, sub.expression, right)}",
                    "sql_type_mismatch",
                )
        elif isinstance(sub, exp.Add | exp.Sub | exp.Mul | exp.Div | exp.Mod | exp.Neg):
            operands = [sub.this] if isinstance(sub, exp.Neg) else [sub.this, sub.expression]
            for operand in operands:
                kind = family(scope, operand)
                if kind is not None and kind != "number":
                    comp.refuse(
                        operand,
                        statement,
                        f"type mismatch: arithmetic on {_show(operand)}, which is "
                        f"{describe(scope, operand, kind)}",
                        "sql_type_mismatch",
                    )
        elif isinstance(sub, exp.Like):
            for operand in (sub.this, sub.expression):
                kind = family(scope, operand)
                if kind is not None and kind != "string":
                    comp.refuse(
                        operand,
                        statement,
                        f"type mismatch: LIKE takes strings, {_show(operand)} is "
                        f"{describe(scope, operand, kind)}",
                        "sql_type_mismatch",
                    )


def _show(node: exp.Expr) -> str:
    text = node.sql("risingwave")
    return text if len(text) <= 40 else text[:37] + "..."


def describe(scope: Scope, node: exp.Expression, kind: str) -> str:
    """A column's declared type, else the family (``a number``)."""
    path = column_path(node)
    if path:
        qualified = len(path) > 1 and path[0] in scope.names
        sources = [scope.names[path[0]]] if qualified else scope.order
        for source in sources:
            column = source.columns.get(path[1] if qualified else path[0])
            if column is not None:
                return column.sql_type
    return {"number": "a number", "string": "a string", "boolean": "a boolean"}.get(kind, kind)


def translate(
    comp: Compilation,
    scope: Scope,
    node: exp.Expression,
    statement: int,
    *,
    qualified: bool = False,
    what: str = "expression",
    bounds: dict[str, tuple[str, ...]] | None = None,
) -> str | None:
    """``node`` as a steps expression (None: its problems are reported).

    ``qualified``: columns are written ``<source>.<path>`` (a join's select reads both
    inputs so); otherwise as the record's path. ``bounds``: names that are not columns
    of a source but fixed paths, bare or qualified by a source (a window join's
    ``window_start`` is ``window.start``, whichever side names it)."""
    before = len(comp.problems)
    node = node.copy()  # rewritten in place below; the copy keeps the token offsets
    refused: set[int] = set()
    for sub in node.walk(prune=lambda n: id(n) in refused):
        label = next((label for kind, label in _REFUSED.items() if isinstance(sub, kind)), None)
        if label is not None:
            comp.refuse(sub, statement, f"{label} is not supported in {what}")
            refused.add(id(sub))
        elif isinstance(sub, exp.AggFunc):
            comp.refuse(sub, statement, f"an aggregate ({_show(sub)}) is not allowed in {what}")
            refused.add(id(sub))
    # The rest is checked even beside a refused part (whose own columns are not the
    # query's, or are refused with it), so that one answer names every problem.
    mapping = _columns(comp, scope, node, statement, qualified, bounds, refused)
    _check_types(comp, scope, node, statement, refused)  # unknown columns have no type
    if len(comp.problems) > before:
        return None

    def rewrite(sub: exp.Expression) -> exp.Expression:
        path = mapping.get(id(sub))
        return path_node(path) if path is not None else sub

    text = node.transform(rewrite, copy=False).sql(dialect=StepsDialect, identify=True)
    problems = check_expression(text)
    for problem in problems:
        comp.refuse(node, statement, f"{what}: {problem.message}", "sql_expression")
    return None if problems else text


def _columns(
    comp: Compilation,
    scope: Scope,
    node: exp.Expression,
    statement: int,
    qualified: bool,
    bounds: dict[str, tuple[str, ...]] | None,
    skipped: set[int],
) -> dict[int, tuple[str, ...]]:
    """Each column reference of ``node`` (outside the ``skipped`` parts) -> its field
    path; an unknown or ambiguous one is reported."""
    mapping: dict[int, tuple[str, ...]] = {}
    for sub in node.walk(prune=lambda n: id(n) in skipped):
        if id(sub) in skipped:
            continue
        if isinstance(sub, exp.Column | exp.Dot) and not isinstance(sub.parent, exp.Dot):
            if isinstance(sub, exp.Dot) and column_path(sub) is None:
                continue  # a Dot over something else (the steps compiler refuses it)
            if isinstance(sub, exp.Column) and isinstance(sub.this, exp.Star):
                continue  # o.*: refused where a select item is read
            bound = _bound(scope, sub, bounds)
            if bound is not None:
                mapping[id(sub)] = bound
                continue
            resolved = resolve(comp, scope, sub, statement)
            if resolved is not None:
                source, path = resolved
                mapping[id(sub)] = (source.name, *path) if qualified else path
    return mapping


def resolve_columns(
    comp: Compilation,
    scope: Scope,
    node: exp.Expression,
    statement: int,
    bounds: dict[str, tuple[str, ...]] | None = None,
) -> None:
    """Report each unknown or ambiguous column of ``node``, aggregates' arguments
    included, for a part refused as a whole (a window function refused by name, a condition a join
    does not take): the rest of its problems then come in the same answer."""
    skipped = {id(sub) for sub in node.walk() if isinstance(sub, exp.Subquery | exp.Select)}
    _columns(comp, scope, node, statement, False, bounds, skipped)


def _bound(
    scope: Scope, node: exp.Expression, bounds: dict[str, tuple[str, ...]] | None
) -> tuple[str, ...] | None:
    """The fixed path ``node`` names when it is one of ``bounds`` (``window_start`` or
    ``o.window_start``), else None."""
    if not bounds:
        return None
    path = column_path(node) or ()
    if len(path) == 1 or (len(path) == 2 and path[0] in scope.names):
        return bounds.get(path[-1])
    return None


def path_node(path: tuple[str, ...]) -> exp.Expression:
    """A column reference to ``path`` (a Column for up to four parts, then Dots)."""
    head = path[:4]
    keys = ("catalog", "db", "table", "this")[4 - len(head) :]
    node: exp.Expression = exp.Column(
        **{key: exp.to_identifier(part) for key, part in zip(keys, head, strict=True)}
    )
    for part in path[4:]:
        node = exp.Dot(this=node, expression=exp.to_identifier(part))
    return node


def one_source_query(
    comp: Compilation, source: Source, select: exp.Select, statement: int
) -> tuple[Scope, list[dict[str, Any]]]:
    """The scope of a query over one source (its name and the FROM's alias) and the
    steps its ``WHERE`` becomes (a ``filter``; none without a WHERE)."""
    scope = Scope({source.name: source}, [source])
    alias = select.args["from_"].this.alias
    if alias:
        scope.names[alias] = source
    steps: list[dict[str, Any]] = []
    where = select.args.get("where")
    if isinstance(where, exp.Where):
        text = translate(comp, scope, where.this, statement, what="WHERE")
        if text is not None:
            comp.came_from(("steps", len(steps)), where.this, statement)
            steps.append({"filter": text})
    return scope, steps


def write_source(comp: Compilation, source: Source, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Put a one-source query's source and steps in the spec; the spec, for the rest."""
    spec = comp.spec
    spec["source"] = source.source
    source_origins(comp, ("source",), source)
    if steps:
        spec["steps"] = steps
    return spec
