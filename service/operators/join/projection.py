"""A join's ``select``: output fields as SQL expressions over ``<input>.<path>``.

Each expression is compiled by the steps' compiler (``operators/steps/``) over one
record, ``{<left input name>: left row, <right input name>: right row}``, so
``orders.amount`` reads the left row's ``amount`` and a missing side reads as NULL. All
expressions become one generated function, built once per spec.

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
from service.operators.join.rows import Projection, Window, row_id
from service.operators.steps.compiler import (
    GENERATED_BUILTINS,
    HELPERS,
    _Names,
    as_defaults,
    compile_expression,
)
from service.operators.steps.errors import EvalError, ExpressionError

REASON_SELECT = "select_failed"


class SelectError(ValueError):
    """A ``select`` that cannot be compiled: ``(output field, message)`` per problem."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{field}: {message}" for field, message in problems))


def compile_projection(select: Mapping[str, str], inputs: tuple[str, str]) -> Projection:
    """One function ``(left, right) -> {field: value}`` for ``select``."""
    if not select:
        raise SelectError([("", "select names no output field")])
    names = _Names()
    problems: list[tuple[str, str]] = []
    namespace: dict[str, Any] = {**HELPERS, "__builtins__": GENERATED_BUILTINS}
    parts: list[str] = []
    for index, (field, text) in enumerate(select.items()):
        try:
            compiled = compile_expression(text, names, record="value")
        except ExpressionError as exc:
            problems.extend((field, str(problem)) for problem in exc.problems)
            continue
        unknown = sorted({path[0] for path in compiled.fields} - set(inputs))
        if unknown:
            problems.append(
                (
                    field,
                    f"{', '.join(unknown)} is not an input of the join "
                    f"(fields are <input>.<path>, the inputs are {inputs[0]} and {inputs[1]})",
                )
            )
            continue
        namespace.update(compiled.constants)
        name = f"_F{index}"
        namespace[name] = field
        parts.append(f"{name}: {compiled.source}")
    if problems:
        raise SelectError(problems)
    left_name, right_name = "_IL", "_IR"
    namespace[left_name], namespace[right_name] = inputs
    body = "{" + ", ".join(parts) + "}"
    defaults = as_defaults(namespace, body + left_name + right_name)
    source = (
        f"def project(left, right, {defaults}):\n"
        f"    value = {{{left_name}: left, {right_name}: right}}\n"
        f"    return {body}\n"
    )
    exec(compile(source, "<join-select>", "exec"), namespace)
    function: Projection = namespace["project"]
    return function


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
            value = self._project(left, right)
        except EvalError as exc:
            self._collector.failed.append(
                FailedRecord(None, key, REASON_SELECT, f"{exc} ({ident})")
            )
            return
        self._collector.results.append(JoinRow(ident, key, self._kind, timestamp, value, window))
