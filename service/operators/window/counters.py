"""Cumulative counters of one window operator instance, read by the runtime per batch."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from service.operators.base import FireKind


@dataclass(slots=True)
class WindowCounters:
    """Monotonic counts since the operator was created (restored from a snapshot)."""

    records: int = 0
    late_dropped: int = 0
    """Late records counted and dropped (no late output configured)."""
    late_emitted: int = 0
    """Late records sent to the late output."""
    fired_early: int = 0
    fired_on_time: int = 0
    fired_late: int = 0
    function_errors: int = 0
    bad_values_dead_lettered: int = 0
    """Records sent to the dead-letter topic for a value an aggregation cannot take."""

    def count_firing(self, kind: FireKind) -> None:
        if kind is FireKind.ON_TIME:
            self.fired_on_time += 1
        elif kind is FireKind.EARLY:
            self.fired_early += 1
        else:
            self.fired_late += 1

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def load(self, data: dict[str, Any]) -> None:
        """Replace every count, in place (compiled loops hold this object)."""
        for name in self.as_dict():
            setattr(self, name, int(data.get(name, 0)))
