"""A join's ``select``: output fields as SQL expressions over ``<input>.<path>``.

Each expression is compiled by the steps' compiler (``operators/steps/``) over one
record, ``{<left input name>: left row, <right input name>: right row}``, so
``orders.amount`` reads the left row's ``amount`` and a missing side reads as NULL. All
expressions become one generated function, built once per spec.

At spec time every expression is checked, and every field path must start with one of
the two inputs' names; :class:`SelectError` lists every problem with the output field it
is in. On a row, an expression that fails (a type mismatch, a division by zero) raises
:class:`~service.operators.steps.errors.EvalError`; the join sends the pair to the
dead-letter topic (:func:`project_or_fail`) instead of emitting it.
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


def project_or_fail(
    project: Projection,
    collector: Collector,
    key: str,
    left: Any,
    right: Any,
    where: str,
) -> tuple[bool, Any]:
    """``(True, projected)``, or ``(False, None)`` with the failure in the collector's
    dead letters (``where`` says which rows: positions, window)."""
    try:
        return True, project(left, right)
    except EvalError as exc:
        collector.failed.append(FailedRecord(None, key, REASON_SELECT, f"{exc} ({where})"))
        return False, None


def emit(
    collector: Collector,
    project: Projection,
    pipeline: str,
    kind: str,
    key: str,
    timestamp: int,
    left: tuple[int, Any] | None,
    right: tuple[int, Any] | None,
    window: Window | None = None,
) -> None:
    """One output row of ``left`` and ``right`` (each ``(position, value)`` or None for
    a missing side) into ``collector``, or a dead letter if its ``select`` fails."""
    left_pos, left_value = left if left is not None else (None, None)
    right_pos, right_value = right if right is not None else (None, None)
    ident = row_id(pipeline, key, left_pos, right_pos, window)
    ok, value = project_or_fail(project, collector, key, left_value, right_value, ident)
    if ok:
        collector.results.append(JoinRow(ident, key, kind, timestamp, value, window))
