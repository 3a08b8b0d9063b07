"""Evictors: remove elements from a window before or after its function runs.

They work on the window's element list, a ``list`` of ``[timestamp, value]`` pairs in
arrival order (plain data, so it snapshots as is), and edit it in place, as Flink's
``CountEvictor`` and ``TimeEvictor`` do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .errors import WindowConfigError

Element = list[Any]
"""``[timestamp, value]``: one element of a window that keeps its elements."""


class Evictor(Protocol):
    def evict(self, elements: list[Element]) -> None:
        """Remove, in place, the elements this evictor does not keep."""
        ...


@dataclass(frozen=True, slots=True)
class CountEvictor:
    """Keeps the last ``max_count`` elements (by arrival)."""

    max_count: int

    def __post_init__(self) -> None:
        if type(self.max_count) is not int or self.max_count < 0:
            raise WindowConfigError(f"count evictor needs max_count >= 0, not {self.max_count!r}")

    def evict(self, elements: list[Element]) -> None:
        excess = len(elements) - self.max_count
        if excess > 0:
            del elements[:excess]


@dataclass(frozen=True, slots=True)
class TimeEvictor:
    """Keeps the elements whose timestamp is within ``keep_ms`` of the newest one.

    As Flink: with ``newest`` the largest timestamp, every element with
    ``timestamp <= newest - keep_ms`` is removed.
    """

    keep_ms: int

    def __post_init__(self) -> None:
        if type(self.keep_ms) is not int or self.keep_ms < 0:
            raise WindowConfigError(f"time evictor needs keep_ms >= 0, not {self.keep_ms!r}")

    def evict(self, elements: list[Element]) -> None:
        if not elements:
            return
        cutoff = max(element[0] for element in elements) - self.keep_ms
        elements[:] = [element for element in elements if element[0] > cutoff]
