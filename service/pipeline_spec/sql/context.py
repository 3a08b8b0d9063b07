"""What the compilation of one script builds up: the spec, where each part came from,
and the problems found so far.

One object the concern modules (sources, steps, windows, joins, sink) write into, so
each stays a few functions over plain data, and so that every problem is kept (a module
reports and carries on; the compiler decides at the end).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from .problems import Position, SqlProblem, Text

__all__ = ["Compilation", "Loc"]

Loc = tuple[str | int, ...]


@dataclass(slots=True)
class Compilation:
    """The spec being written, the origin of each of its parts, and the problems."""

    text: Text
    spec: dict[str, Any] = field(default_factory=dict)
    origins: dict[Loc, Position] = field(default_factory=dict)
    """A spec path -> where in the script it came from (the longest known prefix of a
    spec problem's path places that problem)."""
    problems: list[SqlProblem] = field(default_factory=list)
    hints: dict[Loc, str] = field(default_factory=dict)
    """A spec path -> how that part is written in SQL, for a rule's problem of it (a
    part the script left out names no SQL of its own to point at)."""

    def at(self, node: exp.Expr | None, statement: int) -> Position:
        return self.text.at_node(node, statement)

    def refuse(
        self,
        node: exp.Expr | None,
        statement: int,
        message: str,
        kind: str = "sql_unsupported",
    ) -> None:
        """Report a problem at ``node`` (compilation goes on, to find the others)."""
        self.problems.append(SqlProblem(self.at(node, statement), kind, message))

    def refuse_clause(
        self,
        node: exp.Expr,
        statement: int,
        keyword: str,
        message: str,
        kind: str = "sql_unsupported",
    ) -> None:
        """Report a problem at the keyword that starts the clause ``node``."""
        self.problems.append(
            SqlProblem(self.text.at_keyword(node, statement, keyword), kind, message)
        )

    def came_from(self, loc: Loc, node: exp.Expr | None, statement: int) -> None:
        """Note that the spec's part at ``loc`` was written from ``node``."""
        self.origins[loc] = self.at(node, statement)

    def origin(self, loc: Loc) -> Position:
        """Where the part at ``loc`` (or its nearest known enclosing part) came from."""
        for n in range(len(loc), -1, -1):
            found = self.origins.get(loc[:n])
            if found is not None:
                return found
        return Position(0, 1, 1)
