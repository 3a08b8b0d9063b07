"""The join kinds: the one list that the spec's model, its rules and JSON Schema, SQL and
the join factory read, each kind with the ``how`` it takes.

Which rows a kind may emit besides the matches is the operator's own property (a
regular outer join retracts a padded row when its partner arrives, so its output is an
upsert stream), so the list lives with the operators, below the spec.

Adding a join kind: its entry here, its operator (a :class:`.base.JoinOperator`) and its
branch in ``factory.py``, the spec's rules of the fields it alone takes
(``pipeline_spec/rules/joins.py``), its SQL form (``pipeline_spec/sql/joins.py``) and
its documentation rows (docs/architecture.md, "Recipe: add a join kind");
``tests/pipeline_spec/test_registries.py`` fails until SQL, the schema and the docs know
it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from service.operators.join.rows import How

__all__ = ["HOW_NAMES", "JOIN_KINDS", "KINDS", "HowName", "JoinKind", "JoinKindName"]


@dataclass(frozen=True, slots=True)
class JoinKind:
    """One kind of join: its name in a spec and the rows it may emit (``how``)."""

    name: str
    hows: tuple[How, ...]
    """The ``how`` it takes, in the order a refusal lists them."""
    right_is_table: bool = False
    """Its right input is a table keyed by the Kafka key: a record with a null value is
    a tombstone that deletes its key."""

    @property
    def how_names(self) -> tuple[str, ...]:
        """:attr:`hows` as the spec writes them."""
        return tuple(how.value for how in self.hows)


_OUTER = (How.INNER, How.LEFT, How.RIGHT, How.FULL)

_KINDS = (
    JoinKind("interval", _OUTER),
    JoinKind("window", (*_OUTER, How.SEMI, How.ANTI)),
    JoinKind("temporal", (How.INNER, How.LEFT), right_is_table=True),
    JoinKind("lookup", (How.INNER, How.LEFT), right_is_table=True),
    JoinKind("regular", _OUTER),
)
"""Flink's choices: a temporal or lookup join keeps every left row or only the matched
ones; semi and anti only where a window bounds "never matched"; a regular join is inner
(append-only output) or outer (an upsert stream: a padded row is deleted when its
partner arrives)."""

JOIN_KINDS: Mapping[str, JoinKind] = {kind.name: kind for kind in _KINDS}
"""Every join kind by name, in the order the spec's schema lists them."""

KINDS: tuple[str, ...] = tuple(JOIN_KINDS)
HOW_NAMES: tuple[str, ...] = tuple(how.value for how in How)

if TYPE_CHECKING:
    JoinKindName = str
    HowName = str
else:
    # The Literals pydantic reads (the JSON Schema's enum, the 422's literal_error); mypy
    # cannot build a Literal from a tuple and sees a str.
    JoinKindName = Literal[KINDS]
    HowName = Literal[HOW_NAMES]
