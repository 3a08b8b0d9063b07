"""A join's ``select``: output fields as SQL expressions over ``<input>.<path>``.

Each expression is compiled by the steps' compiler (``operators/steps/``) over one
record, ``{<left input name>: left row, <right input name>: right row}``, so
``orders.amount`` reads the left row's ``amount`` and a missing side reads as NULL. In a
window join, ``window.start`` and ``window.end`` read the bounds of the row's window
(Flink SQL's ``window_start``/``window_end`` of a window join), so the record holds
``{"window": {"start", "end"}}`` too, built only when an expression reads it. A semi or
anti join has no right row: its ``select`` reads the left input (and the window) only.
All expressions become one generated function, built once per spec.

``where`` (optional) is a condition over the same record: a row is emitted only when it
is TRUE (NULL and FALSE drop it, as SQL's ``WHERE`` over the joined rows; a padded
outer row reads its missing side as NULL). It compares the two sides, which the inputs'
own filter steps cannot (Nexmark q4: ``bid.dateTime <= auction.expires``); the
generated function returns None for a dropped row.

At spec time every expression is checked, and every field path must start with one of
the two inputs' names; :class:`SelectError` lists every problem with the output field it
is in. On a row, an expression that fails (a type mismatch, a division by zero) raises
:class:`~service.operators.steps.errors.EvalError`; the join sends the pair to the
dead-letter topic (:class:`RowEmitter`) instead of emitting it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.operators.base import Collector, FailedRecord, JoinRow
from service.operators.join.rows import Projection, Window, both_sides, row_id
from service.operators.steps.compiler import (
    GENERATED_BUILTINS,
    HELPERS,
    _Names,
    as_defaults,
    compile_expression,
)
from service.operators.steps.errors import EvalError, ExpressionError
from service.operators.steps.values import kind

REASON_SELECT = "select_failed"
WINDOW = "window"
"""The root of a window join's bounds in its ``select``: ``window.start``, ``window.end``."""
_BOUNDS = {"start", "end"}


class SelectError(ValueError):
    """A ``select`` or ``where`` that cannot be compiled: ``(output field, message)`` per
    problem, the field None for the ``where``."""

    def __init__(self, problems: list[tuple[str | None, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{field or 'where'}: {message}" for field, message in problems))


def projection_for(spec: Mapping[str, Any], inputs: tuple[str, str]) -> Projection:
    """The join operator object's ``select`` compiled for its kind and ``how`` (none:
    :func:`both_sides`); ``inputs`` are the left and the right input's names."""
    select, where = spec.get("select"), spec.get("where")
    if select is None and where is None:
        return both_sides
    return compile_projection(
        select,
        inputs,
        window=spec.get("kind") == "window",
        right_row=spec.get("how", "inner") not in ("semi", "anti"),
        where=where,
    )


def compile_projection(
    select: Mapping[str, str] | None,
    inputs: tuple[str, str],
    *,
    window: bool = False,
    right_row: bool = True,
    where: str | None = None,
) -> Projection:
    """One function ``(left, right, window) -> {field: value}`` for ``select`` (None:
    the ``{"left", "right"}`` record), or None for a row ``where`` drops.

    ``window``: the join is a window join, and ``window.start``/``window.end`` read its
    row's bounds. ``right_row``: False for a semi or anti join, whose rows have no right
    side: reading the right input is then a problem (it would always be NULL)."""
    if select is not None and not select:
        raise SelectError([("", "select names no output field")])
    names = _Names()
    problems: list[tuple[str | None, str]] = []
    namespace: dict[str, Any] = {
        **HELPERS,
        "__builtins__": GENERATED_BUILTINS,
        "_EvalError": EvalError,
        "_kind": kind,
    }
    parts: list[str] = []
    reads_window = False
    if window and WINDOW in inputs:
        problems.append(
            ("", f"an input named {WINDOW!r} hides the window's bounds: rename the input")
        )
    expressions: list[tuple[str | None, str]] = list((select or {}).items())
    if where is not None:
        expressions.append((None, where))
    condition = ""
    for index, (field, text) in enumerate(expressions):
        try:
            compiled = compile_expression(text, names, record="value")
        except ExpressionError as exc:
            problems.extend((field, str(problem)) for problem in exc.problems)
            continue
        roots = {path[0] for path in compiled.fields}
        bad = _window_problem(compiled.fields, window, inputs)
        if bad:
            problems.append((field, bad))
            continue
        if window and WINDOW in roots:
            reads_window = True
            roots.discard(WINDOW)
        unknown = sorted(roots - set(inputs))
        if unknown:
            problems.append(
                (
                    field,
                    f"{', '.join(unknown)} is not an input of the join "
                    f"(fields are <input>.<path>, the inputs are {inputs[0]} and {inputs[1]}"
                    + ("; window.start and window.end are the window's bounds" if window else "")
                    + ")",
                )
            )
            continue
        if not right_row and inputs[1] in roots:
            problems.append(
                (
                    field,
                    f"a semi or anti join's rows have no right row: {inputs[1]} cannot be "
                    f"read ({'select' if field is not None else 'compare'} {inputs[0]}'s fields"
                    + (" and the window's bounds" if window else "")
                    + ")",
                )
            )
            continue
        namespace.update(compiled.constants)
        if field is None:
            condition = compiled.source
            continue
        name = f"_F{index}"
        namespace[name] = field
        parts.append(f"{name}: {compiled.source}")
    if problems:
        raise SelectError(problems)
    left_name, right_name = "_IL", "_IR"
    namespace[left_name], namespace[right_name] = inputs
    body = "{" + ", ".join(parts) + "}" if select is not None else '{"left": left, "right": right}'
    check = (
        f"    kept = {condition}\n"
        "    if kept is not True:\n"
        "        if kept is False or kept is None:\n"
        "            return None\n"
        "        raise _EvalError('the where gave a value that is not BOOLEAN: ' + _kind(kept))\n"
        if condition
        else ""
    )
    defaults = as_defaults(namespace, body + check + left_name + right_name)
    bounds = ', "window": {"start": window[0], "end": window[1]}' if reads_window else ""
    source = (
        f"def project(left, right, window=None, {defaults}):\n"
        f"    value = {{{left_name}: left, {right_name}: right{bounds}}}\n"
        f"{check}"
        f"    return {body}\n"
    )
    exec(compile(source, "<join-select>", "exec"), namespace)
    function: Projection = namespace["project"]
    return function


def _window_problem(
    fields: list[tuple[str, ...]], window: bool, inputs: tuple[str, str]
) -> str | None:
    """What is wrong with the ``window.*`` paths of one expression (None: nothing)."""
    for path in fields:
        if path[0] != WINDOW or WINDOW in inputs:
            continue
        if not window:
            return (
                "window.start and window.end are a window join's (its row's window); "
                "this join has no windows"
            )
        if len(path) != 2 or path[1] not in _BOUNDS:
            return f"{'.'.join(path)}: a window join's window has start and end only"
    return None


class RowEmitter:
    """Makes a join's output rows: the id, the projection (or a dead letter when its
    ``select`` fails), the row, into the collector. One call per row on the hot path."""

    __slots__ = ("_collector", "_kind", "_pipeline", "_project")

    def __init__(self, collector: Collector, project: Projection, pipeline: str, kind: str):
        self._collector = collector
        self._project = project
        self._pipeline = pipeline
        self._kind = kind

    def emit(
        self,
        key: str,
        timestamp: int,
        left_pos: int | None,
        left: Any,
        right_pos: int | None,
        right: Any,
        window: Window | None = None,
    ) -> None:
        """A row of ``left`` and ``right`` (a missing side: position and value None)."""
        ident = row_id(self._pipeline, key, left_pos, right_pos, window)
        try:
            value = self._project(left, right, window)
        except EvalError as exc:
            self._collector.failed.append(
                FailedRecord(None, key, REASON_SELECT, f"{exc} ({ident})")
            )
            return
        if value is None:  # the where dropped it
            return
        self._collector.results.append(JoinRow(ident, key, self._kind, timestamp, value, window))
