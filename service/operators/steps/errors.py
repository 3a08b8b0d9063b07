"""What can go wrong with a step: at spec time (an expression) or on a record."""

from __future__ import annotations

from typing import NamedTuple


class ExpressionProblem(NamedTuple):
    """One problem of an expression: what, and where in its text (1-based column)."""

    message: str
    column: int | None = None

    def __str__(self) -> str:
        if self.column is None:
            return self.message
        return f"{self.message} (at column {self.column})"


class ExpressionError(ValueError):
    """An expression that cannot be compiled; :attr:`problems` lists every problem found."""

    def __init__(self, problems: list[ExpressionProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(map(str, problems)))


class EvalError(Exception):
    """An expression failed on a record (a type mismatch, a division by zero...)."""


class StepFailed(Exception):
    """Step ``index`` failed on a record; the record goes to the dead-letter topic."""

    def __init__(self, index: int, message: str) -> None:
        self.index = index
        self.message = message
        super().__init__(f"step {index}: {message}")
