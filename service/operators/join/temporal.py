"""The event-time temporal join: Flink's ``FOR SYSTEM_TIME AS OF`` join on a versioned table
(``TemporalRowTimeJoinOperator``).

The right input is a versioned table: a changelog keyed by the table's key, where a
record is the new version from its timestamp on and a tombstone (a null value) deletes
the row from its timestamp on. A left row at ``t`` waits until the join's watermark
reaches ``t``; then it is joined with the version valid at ``t``: the newest version
with a timestamp at or below ``t``, unless that is a tombstone. ``inner`` emits only the
rows that found one, ``left`` also the others padded with NULLs; every output row is
timestamped ``t``. Two versions of one key at the same timestamp: the later one to
arrive wins (Flink keeps one version per time).

Waiting for the watermark is what makes the answer exact: a version of time ``<= t``
can still arrive while ``W < t``. Once ``W - allowed_lateness`` has passed a version's
successor, no left row can ask for it any more (a left row at or below it is late), so
a key keeps the newest version at or below ``W - allowed_lateness`` and those above,
and a tombstone there with nothing older to answer for is dropped with its key.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from typing import Any

from service.core.time import MIN_TIMESTAMP
from service.operators.base import Collector, InputRecord, OperatorGauges
from service.operators.join.projection import RowEmitter
from service.operators.join.rows import (
    How,
    JoinConfigError,
    Projection,
    Side,
    both_sides,
    is_late,
    send_late,
)

SNAPSHOT_VERSION = 1
META_ENTRY = "meta"
PREFIXES = ("l:", "r:")
"""A checkpoint entry per key: ``l:<key>`` (left rows waiting), ``r:<key>`` (versions)."""

Row = tuple[int, int, Any]
"""``(ts, position, value)``; a version's value None is a tombstone."""

_NO_COUNTS: dict[str, tuple[int, int, int]] = {}


class _Timeline:
    """One key's rows of one side sorted by time."""

    __slots__ = ("rows", "times")

    def __init__(self) -> None:
        self.times: list[int] = []
        self.rows: list[Row] = []

    def add(self, row: Row, replace: bool) -> None:
        """Insert in time order after rows of the same time, or with ``replace`` in
        their place (one version per time)."""
        ts = row[0]
        times = self.times
        at = bisect_right(times, ts)
        if replace and at and times[at - 1] == ts:
            self.rows[at - 1] = row
            return
        times.insert(at, ts)
        self.rows.insert(at, row)

    def drop_through(self, count: int) -> None:
        del self.times[:count]
        del self.rows[:count]


class TemporalJoinOperator:
    """One partition's temporal join (see the module docstring)."""

    kind = "temporal"

    def __init__(
        self,
        pipeline: str,
        how: How,
        allowed_lateness_ms: int = 0,
        project: Projection = both_sides,
        inputs: tuple[str, str] = ("left", "right"),
        late_output: bool = True,
    ) -> None:
        if how not in (How.INNER, How.LEFT):
            raise JoinConfigError(f"a temporal join is inner or left, not {how}")
        if allowed_lateness_ms < 0:
            raise JoinConfigError("allowed_lateness_ms must not be negative")
        self._pipeline = pipeline
        self.how = how
        self.lateness = allowed_lateness_ms
        self._project = project
        self.inputs = inputs
        self.late_output = late_output
        self._waiting: dict[str, _Timeline] = {}
        self._versions: dict[str, _Timeline] = {}
        self._due: list[tuple[int, str]] = []  # (time of a key's first waiting row, key)
        self._prunable: list[tuple[int, str]] = []  # (when a key's oldest version can go, key)
        self._dirty: set[tuple[int, str]] = set()
        self._watermark = MIN_TIMESTAMP
        self.collector = Collector()
        self._emit = RowEmitter(self.collector, project, pipeline, self.kind).emit

    # -- input ----------------------------------------------------------------------------
    def process_left(self, records: Sequence[InputRecord]) -> None:
        watermark = self._watermark
        lateness = self.lateness
        waiting = self._waiting
        dirty = self._dirty
        for key, ts, value, position, source in records:
            if is_late(ts, watermark, lateness):
                send_late(
                    self.collector,
                    self.late_output,
                    source,
                    key,
                    ts,
                    watermark,
                    self.inputs[Side.LEFT],
                )
                continue
            rows = waiting.get(key)
            if rows is None:
                rows = waiting[key] = _Timeline()
            if not rows.times or ts < rows.times[0]:
                heapq.heappush(self._due, (ts, key))
            rows.add((ts, position, value), replace=False)
            dirty.add((Side.LEFT, key))
            if ts <= watermark:  # allowed-late: its time has come
                self._fire(key, rows, watermark)

    def process_right(self, records: Sequence[InputRecord]) -> None:
        versions = self._versions
        dirty = self._dirty
        for key, ts, value, position, _ in records:
            rows = versions.get(key)
            if rows is None:
                rows = versions[key] = _Timeline()
            rows.add((ts, position, value), replace=True)
            dirty.add((Side.RIGHT, key))
            self._schedule_prune(key, rows)

    def process_batch(self, records: Sequence[InputRecord]) -> None:
        raise TypeError("a join takes its inputs through process_left and process_right")

    # -- time -----------------------------------------------------------------------------
    @property
    def current_watermark(self) -> int:
        return self._watermark

    def advance_watermark(self, watermark: int) -> None:
        """Join every waiting left row at or below ``watermark``, in time order per key,
        then drop the versions no left row can ask for any more."""
        if watermark <= self._watermark:
            return
        self._watermark = watermark
        due = self._due
        while due and due[0][0] <= watermark:
            ts, key = heapq.heappop(due)
            rows = self._waiting.get(key)
            if rows is not None and rows.times[0] == ts:
                self._fire(key, rows, watermark)
        # a left row above W - allowed lateness may still come and ask for its version
        oldest_asked = watermark - self.lateness
        prunable = self._prunable
        while prunable and prunable[0][0] <= oldest_asked:
            _, key = heapq.heappop(prunable)
            versions = self._versions.get(key)
            if versions is not None:
                self._prune(key, versions, oldest_asked)

    def _fire(self, key: str, rows: _Timeline, through: int) -> None:
        """Join ``key``'s waiting rows at or below ``through`` and drop them."""
        count = bisect_right(rows.times, through)
        versions = self._versions.get(key)
        pad = self.how is How.LEFT
        for ts, position, value in rows.rows[:count]:
            version = None
            if versions is not None:
                at = bisect_right(versions.times, ts)
                if at and versions.rows[at - 1][2] is not None:
                    version = versions.rows[at - 1]
            if version is None and not pad:
                continue
            if version is None:
                self._emit(key, ts, position, value, None, None)
            else:
                self._emit(key, ts, position, value, version[1], version[2])
        rows.drop_through(count)
        self._dirty.add((Side.LEFT, key))
        if rows.times:
            heapq.heappush(self._due, (rows.times[0], key))
        else:
            del self._waiting[key]

    def _prune(self, key: str, versions: _Timeline, through: int) -> None:
        """Keep the newest version at or below ``through`` and those above it; a
        tombstone left oldest at or below it goes too, and the key with nothing left."""
        newest = bisect_right(versions.times, through) - 1
        if newest > 0:
            versions.drop_through(newest)
            self._dirty.add((Side.RIGHT, key))
        if versions.times and versions.times[0] <= through and versions.rows[0][2] is None:
            versions.drop_through(1)
            self._dirty.add((Side.RIGHT, key))
        if not versions.times:
            del self._versions[key]
        else:
            self._schedule_prune(key, versions)

    def _schedule_prune(self, key: str, versions: _Timeline) -> None:
        """When the watermark makes the key's oldest version useless: at its successor's
        time, or at its own if it is a tombstone."""
        times = versions.times
        if len(times) > 1:
            heapq.heappush(self._prunable, (times[1], key))
        elif versions.rows[0][2] is None:
            heapq.heappush(self._prunable, (times[0], key))

    def advance_processing_time(self, now: int) -> None:
        return None

    def next_processing_time(self) -> int | None:
        return None

    # -- numbers --------------------------------------------------------------------------
    def rows_held(self, side: Side) -> int:
        """Left rows waiting, or versions kept of the table; O(keys)."""
        held = self._waiting if side is Side.LEFT else self._versions
        return sum(len(rows.times) for rows in held.values())

    def gauges(self) -> OperatorGauges:
        return OperatorGauges(
            event_timers=len(self._due),
            processing_timers=0,
            windows_open=0,
            keys=len(self._waiting.keys() | self._versions.keys()),
        )

    def timer_counts(self) -> dict[str, tuple[int, int, int]]:
        return _NO_COUNTS

    # -- snapshots ------------------------------------------------------------------------
    def _encode(self, side: int, key: str) -> list[list[Any]] | None:
        rows = (self._waiting if side == Side.LEFT else self._versions).get(key)
        return None if rows is None else [list(row) for row in rows.rows]

    def snapshot(self) -> dict[str, Any]:
        entries: dict[str, Any] = {
            PREFIXES[side] + key: self._encode(side, key)
            for side, held in ((0, self._waiting), (1, self._versions))
            for key in held
        }
        entries[META_ENTRY] = self._meta()
        return entries

    def restore(self, snapshot: dict[str, Any]) -> None:
        self._waiting, self._versions = {}, {}
        self._due, self._prunable = [], []
        self._dirty = set()
        self._watermark = MIN_TIMESTAMP
        self.restore_changes(snapshot.items())

    def snapshot_changes(self) -> dict[str, Any]:
        changes: dict[str, Any] = {
            PREFIXES[side] + key: self._encode(side, key) for side, key in self._dirty
        }
        self._dirty.clear()
        changes[META_ENTRY] = self._meta()
        return changes

    def _meta(self) -> dict[str, Any]:
        return {"version": SNAPSHOT_VERSION, "watermark": self._watermark}

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        newest = dict(entries)
        meta = newest.pop(META_ENTRY, None)
        if meta is not None:
            if meta.get("version") != SNAPSHOT_VERSION:
                raise JoinConfigError(f"unknown join checkpoint version {meta.get('version')!r}")
            self._watermark = int(meta["watermark"])
        for name, value in newest.items():
            side = 0 if name.startswith(PREFIXES[0]) else 1 if name.startswith(PREFIXES[1]) else -1
            if side < 0:
                raise JoinConfigError(f"unknown join checkpoint entry {name!r}")
            key = name[len(PREFIXES[side]) :]
            held = self._waiting if side == Side.LEFT else self._versions
            if value is None:
                held.pop(key, None)
                continue
            rows = held[key] = _Timeline()
            for ts, position, row_value in value:
                rows.add((int(ts), int(position), row_value), replace=False)
            if side == Side.LEFT:
                heapq.heappush(self._due, (rows.times[0], key))
            else:
                self._schedule_prune(key, rows)
