"""Window assigners: which windows ``[start, end)`` a record belongs to.

A window is a plain ``(start, end)`` tuple of epoch milliseconds: hashable (it is the
timer namespace), JSON-friendly once listed, and free of per-record object graphs.
``max_ts = end - 1``, except for the global window, whose ``max_ts`` is MAX (Flink's
``GlobalWindow.maxTimestamp()``), so it never gets a cleanup timer.

Assignment follows Flink's assigners: the start of a tumbling window is
``ts - ((ts - offset) mod size)`` with a non-negative modulo (Python's ``%``), sliding
windows are listed newest first, a session window is ``[ts, ts + gap)`` and overlapping
session windows (``a.start <= b.end and a.end >= b.start``, touching ones included) are
merged.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP

from .errors import WindowConfigError

Window = tuple[int, int]
"""``(start, end)``: a half-open interval of epoch milliseconds."""

GLOBAL_WINDOW: Window = (MIN_TIMESTAMP, MAX_TIMESTAMP)
"""The one window of the global assigner."""

MergeResult = tuple[Window, list[Window]]
"""``(merged window, the windows it covers)``; only groups of two or more are reported."""


def max_timestamp(window: Window) -> int:
    """The largest timestamp that belongs to ``window`` (MAX for the global window)."""
    if window[1] == MAX_TIMESTAMP:
        return MAX_TIMESTAMP
    return window[1] - 1


def _positive(name: str, value: int) -> int:
    if type(value) is not int or value <= 0:
        raise WindowConfigError(f"{name} must be a positive integer of milliseconds, not {value!r}")
    return value


def _offset(value: int) -> int:
    if type(value) is not int:
        raise WindowConfigError(f"offset_ms must be an integer, not {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class TumblingAssigner:
    """Fixed-size, non-overlapping windows; ``offset`` shifts them (time zones)."""

    size: int
    offset: int = 0

    merging = False

    def __post_init__(self) -> None:
        _positive("size_ms", self.size)
        _offset(self.offset)

    def assign(self, timestamp: int) -> list[Window]:
        start = timestamp - (timestamp - self.offset) % self.size
        return [(start, start + self.size)]


@dataclass(frozen=True, slots=True)
class SlidingAssigner:
    """Windows of ``size`` starting every ``slide``; a record is in ``ceil(size/slide)``."""

    size: int
    slide: int
    offset: int = 0

    merging = False

    def __post_init__(self) -> None:
        _positive("size_ms", self.size)
        _positive("slide_ms", self.slide)
        _offset(self.offset)

    def assign(self, timestamp: int) -> list[Window]:
        size = self.size
        start = timestamp - (timestamp - self.offset) % self.slide
        lowest = timestamp - size
        windows: list[Window] = []
        while start > lowest:
            windows.append((start, start + size))
            start -= self.slide
        return windows


@dataclass(frozen=True, slots=True)
class SessionAssigner:
    """``[ts, ts + gap)`` per record; overlapping windows of a key merge into one."""

    gap: int

    merging = True

    def __post_init__(self) -> None:
        _positive("gap_ms", self.gap)

    def assign(self, timestamp: int) -> list[Window]:
        return [(timestamp, timestamp + self.gap)]

    @staticmethod
    def merge_windows(windows: list[Window]) -> list[MergeResult]:
        """Groups of overlapping windows and their cover, as Flink's ``TimeWindow.mergeWindows``."""
        results: list[MergeResult] = []
        current: Window | None = None
        members: list[Window] = []
        for window in sorted(windows):
            if current is not None and current[0] <= window[1] and current[1] >= window[0]:
                current = (min(current[0], window[0]), max(current[1], window[1]))
                if window not in members:
                    members.append(window)
                continue
            if current is not None and len(members) > 1:
                results.append((current, members))
            current, members = window, [window]
        if current is not None and len(members) > 1:
            results.append((current, members))
        return results


@dataclass(frozen=True, slots=True)
class GlobalAssigner:
    """Every record of a key in one window forever; its default trigger never fires."""

    merging = False

    def assign(self, timestamp: int) -> list[Window]:
        return [GLOBAL_WINDOW]


WindowAssigner = TumblingAssigner | SlidingAssigner | SessionAssigner | GlobalAssigner
