"""Time: the two domains, their bounds, and clocks that can be passed in.

All times in the engine are integer epoch milliseconds. The clock is an argument
everywhere it is needed, so tests drive a :class:`ManualClock` and never sleep.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Protocol

MIN_TIMESTAMP = -(2**63)
"""The smallest timestamp: the watermark of a partition that has seen nothing."""

MAX_TIMESTAMP = 2**63 - 1
"""The largest timestamp: the final watermark of bounded input; it fires every timer."""

MAX_DURATION_MS = 2**53 - 1
"""The largest duration (or count) a configuration may give: its sum with any epoch-millis
timestamp stays a Kafka timestamp (int64), and JSON readers that hold numbers as doubles
(browsers) read it exactly."""


class TimeDomain(StrEnum):
    """Which clock a timer or a window follows."""

    EVENT_TIME = "event"
    PROCESSING_TIME = "processing"


class Clock(Protocol):
    """A source of processing time."""

    def now_ms(self) -> int:
        """The current processing time in epoch milliseconds."""
        ...


class SystemClock:
    """The wall clock."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to; for tests and deterministic replays."""

    __slots__ = ("_now",)

    def __init__(self, start_ms: int = 0) -> None:
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def set(self, now_ms: int) -> None:
        """Move the clock to ``now_ms``; processing time never goes back."""
        if now_ms < self._now:
            raise ValueError(f"processing time cannot go back: {now_ms} < {self._now}")
        self._now = now_ms

    def advance(self, delta_ms: int) -> int:
        """Move the clock forward by ``delta_ms`` and return the new time."""
        if delta_ms < 0:
            raise ValueError(f"processing time cannot go back: delta {delta_ms}")
        self._now += delta_ms
        return self._now


def saturating_add(ts: int, delta: int) -> int:
    """``ts + delta`` clamped to [MIN_TIMESTAMP, MAX_TIMESTAMP], as Flink's cleanup time."""
    total = ts + delta
    if total > MAX_TIMESTAMP:
        return MAX_TIMESTAMP
    if total < MIN_TIMESTAMP:
        return MIN_TIMESTAMP
    return total
