"""Where a SQL problem is and what it says: statement, line, column, message.

Every problem a script has is reported together (one 422), each at the place a SQL user
looks for it: the statement (1-based, in the order written), the line and the column
(1-based, of the whole script). Positions come from sqlglot's token offsets, which are
offsets into the whole script because each statement is parsed in place (see
:mod:`.parsing`), so a line number is the editor's.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

__all__ = ["Position", "SqlError", "SqlProblem", "Text"]


@dataclass(frozen=True, slots=True)
class Position:
    """A place in the script (all 1-based; statement 0: the script as a whole)."""

    statement: int
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class SqlProblem:
    """One problem of a script: where, what kind, and a message a SQL user understands.

    ``spec_loc`` is set when the problem was found by the spec's own validation (a rule of
    :mod:`service.pipeline_spec.rules`): the JSON path in the spec the script compiled to.
    """

    at: Position
    type: str
    message: str
    spec_loc: tuple[str | int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        """The problem as a 422 entry: FastAPI's ``loc``/``msg``/``type`` (``loc`` in the
        body: ``sql``, or ``name`` for the pipeline's name) plus where in the script."""
        return {
            "loc": ["name"] if self.spec_loc == ("name",) else ["sql"],
            "msg": self.message,
            "type": self.type,
            "input": None,
            "statement": self.at.statement,
            "line": self.at.line,
            "column": self.at.column,
            "spec_loc": None if self.spec_loc is None else list(self.spec_loc),
        }


class SqlError(ValueError):
    """A script that does not compile: every problem found, in script order."""

    def __init__(self, problems: Iterable[SqlProblem]) -> None:
        self.problems = sorted(problems, key=lambda p: (p.at.statement, p.at.line, p.at.column))
        super().__init__(
            "; ".join(
                f"statement {p.at.statement}, line {p.at.line}:{p.at.column}: {p.message}"
                for p in self.problems
            )
        )


@dataclass(slots=True)
class Text:
    """The script and the offsets its lines start at, to turn offsets into positions."""

    sql: str
    statement_starts: list[int] = field(default_factory=list)
    """Offset of each statement's first character, in order."""
    _line_starts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._line_starts = [0]
        for i, char in enumerate(self.sql):
            if char == "\n":
                self._line_starts.append(i + 1)

    def at_offset(self, offset: int, statement: int | None = None) -> Position:
        """The position of character ``offset`` (its statement found when not given)."""
        offset = max(0, min(offset, len(self.sql)))
        line = _last_at_most(self._line_starts, offset)
        if statement is None:
            statement = _last_at_most(self.statement_starts, offset) + 1
        return Position(statement, line + 1, offset - self._line_starts[line] + 1)

    def at_node(self, node: exp.Expr | None, statement: int) -> Position:
        """Where ``node`` starts: the first of its parts (in the order written) that
        carries a token offset; the statement's start when none does."""
        if isinstance(node, exp.Expr):  # sqlglot keeps flags (bools) where nodes may be
            offsets = [
                int(meta["start"])
                for sub in node.walk()
                if "start" in (meta := getattr(sub, "_meta", None) or {})
            ]
            if offsets:
                return self.at_offset(min(offsets), statement)
        return self.statement_start(statement)

    def at_keyword(self, node: exp.Expr, statement: int, keyword: str) -> Position:
        """Where the clause ``node`` starts: its ``keyword`` (``GROUP``, ``ORDER``...),
        the last one before its first part (sqlglot keeps no offset for clauses)."""
        found = self.at_node(node, statement)
        first = self._offset(found)
        if 1 <= statement <= len(self.statement_starts):
            start = self.statement_starts[statement - 1]
            at = self.sql.upper().rfind(keyword.upper(), start, first + len(keyword))
            if at >= 0:
                return self.at_offset(at, statement)
        return found

    def _offset(self, position: Position) -> int:
        return self._line_starts[position.line - 1] + position.column - 1

    def statement_start(self, statement: int) -> Position:
        """Where statement ``statement`` (1-based) starts; 1:1 for the script (0)."""
        if 1 <= statement <= len(self.statement_starts):
            return self.at_offset(self.statement_starts[statement - 1], statement)
        return Position(statement, 1, 1)


def _last_at_most(starts: list[int], offset: int) -> int:
    """The index of the last start at or before ``offset`` (0 when none)."""
    return max(bisect.bisect_right(starts, offset) - 1, 0)
