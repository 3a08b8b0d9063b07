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

**State backends.** With ``memory`` the waiting rows and the versions are dicts (key
-> rows). With ``rocksdb`` they are two named maps of the partition's RocksDB
(``left``, ``right``) behind its write-back cache; the two heaps (the keys' first
waiting row, the keys' next prunable version) stay in memory, as Flink's RocksDB
backend keeps its timers on the heap, so the watermark finds its keys, held or
evicted. A restore walks both maps once to rebuild them.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from service.core.state_cache import StateCache, StateMaps
from service.operators.base import InputRecord, OperatorGauges
from service.operators.join.base import JoinOperator
from service.operators.join.checkpoint import parse_side_entry, side_entry
from service.operators.join.kinds import JOIN_KINDS
from service.operators.join.rows import How, JoinConfigError, Projection, Side, both_sides, is_late

Row = tuple[int, int, Any]
"""``(ts, position, value)``; a version's value None is a tombstone. The checkpoint
holds one entry per key and side: ``l:<key>`` (left rows waiting), ``r:<key>``
(versions)."""


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


class TimelineCodec:
    """A :class:`_Timeline` in a RocksDB map: its rows, as arrays."""

    __slots__ = ()

    def encode(self, value: _Timeline) -> list[Row]:
        return value.rows

    def decode(self, data: Any) -> _Timeline:
        value = _Timeline()
        value.rows = [(ts, position, v) for ts, position, v in data]
        value.times = [row[0] for row in value.rows]
        return value


TIMELINE_CODEC = TimelineCodec()
SIDE_MAPS = ("left", "right")
"""The maps of the waiting rows and of the versions in the partition's RocksDB."""


class TemporalJoinOperator(JoinOperator):
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
        state_maps: StateMaps | None = None,
    ) -> None:
        """``state_maps``: the rocksdb backend's named maps (None: memory)."""
        # Defensive only: the spec's rules refuse this first (join_how_fits_kind, in
        # pipeline_spec/rules/joins.py), so no spec reaches it; it guards a direct
        # construction (tests, benchmarks). The hows are kinds.py's list.
        if how not in JOIN_KINDS[self.kind].hows:
            raise JoinConfigError(f"a temporal join is inner or left, not {how}")
        super().__init__(pipeline, how, allowed_lateness_ms, project, inputs, late_output)
        self._cached = state_maps is not None
        self._waiting: Any = {} if state_maps is None else state_maps(SIDE_MAPS[0], TIMELINE_CODEC)
        """Key -> its left rows waiting: a dict, or the rocksdb backend's cache (an
        entry changed in place is marked dirty right after it was got)."""
        self._versions: Any = {} if state_maps is None else state_maps(SIDE_MAPS[1], TIMELINE_CODEC)
        """Key -> its versions, as :attr:`_waiting`."""
        self._due: list[tuple[int, str]] = []  # (time of a key's first waiting row, key)
        self._prunable: list[tuple[int, str]] = []  # (when a key's oldest version can go, key)
        self._dirty: set[tuple[int, str]] = set()
        self._held = [0, 0]
        """Left rows waiting and versions kept, counted as they change (the status and
        the metrics ask every second)."""
        self._keys = 0
        """Keys with rows waiting or versions kept."""

    # -- input ----------------------------------------------------------------------------
    def _process(self, side: Side, records: Sequence[InputRecord]) -> None:
        if side is Side.LEFT:
            self._process_left(records)
        else:
            self._process_right(records)

    def _process_left(self, records: Sequence[InputRecord]) -> None:
        watermark = self._watermark
        lateness = self.lateness
        waiting = self._waiting
        dirty = self._dirty
        mark = waiting.mark_dirty if self._cached else None
        for key, ts, value, position, source in records:
            if is_late(ts, watermark, lateness):
                self._late(Side.LEFT, key, ts, source)
                continue
            rows = waiting.get(key)
            if rows is None:
                rows = waiting[key] = _Timeline()
                if key not in self._versions:
                    self._keys += 1
            if not rows.times or ts < rows.times[0]:
                heapq.heappush(self._due, (ts, key))
            rows.add((ts, position, value), replace=False)
            if mark is not None:
                mark(key)
            self._held[0] += 1
            dirty.add((Side.LEFT, key))
            if ts <= watermark:  # allowed-late: its time has come
                self._fire(key, rows, watermark)

    def _process_right(self, records: Sequence[InputRecord]) -> None:
        versions = self._versions
        dirty = self._dirty
        mark = versions.mark_dirty if self._cached else None
        for key, ts, value, position, _ in records:
            rows = versions.get(key)
            if rows is None:
                rows = versions[key] = _Timeline()
                if key not in self._waiting:
                    self._keys += 1
            held = len(rows.times)
            rows.add((ts, position, value), replace=True)
            if mark is not None:
                mark(key)
            self._held[1] += len(rows.times) - held
            dirty.add((Side.RIGHT, key))
            self._schedule_prune(key, rows)

    # -- time -----------------------------------------------------------------------------
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
        self._held[0] -= count
        self._dirty.add((Side.LEFT, key))
        if rows.times:
            if self._cached:  # got by the caller; only the versions' map was used since
                self._waiting.mark_dirty(key)
            heapq.heappush(self._due, (rows.times[0], key))
        else:
            del self._waiting[key]
            if key not in self._versions:
                self._keys -= 1

    def _prune(self, key: str, versions: _Timeline, through: int) -> None:
        """Keep the newest version at or below ``through`` and those above it; a
        tombstone left oldest at or below it goes too, and the key with nothing left."""
        newest = bisect_right(versions.times, through) - 1
        changed = newest > 0
        if changed:
            versions.drop_through(newest)
            self._held[1] -= newest
            self._dirty.add((Side.RIGHT, key))
        if versions.times and versions.times[0] <= through and versions.rows[0][2] is None:
            versions.drop_through(1)
            self._held[1] -= 1
            self._dirty.add((Side.RIGHT, key))
            changed = True
        if changed and versions.times and self._cached:
            self._versions.mark_dirty(key)
        if not versions.times:
            del self._versions[key]
            if key not in self._waiting:
                self._keys -= 1
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

    # -- numbers --------------------------------------------------------------------------
    def rows_held(self, side: Side) -> int:
        """Left rows waiting, or versions kept of the table."""
        return self._held[side]

    def gauges(self) -> OperatorGauges:
        return OperatorGauges(
            event_timers=len(self._due),
            processing_timers=0,
            windows_open=0,
            keys=self._keys,
        )

    # -- checkpoint hooks -----------------------------------------------------------------
    def _pieces(self) -> Iterator[tuple[int, str]]:
        return iter(
            [
                (side, key)
                for side, held in ((0, self._waiting), (1, self._versions))
                for key in list(held.keys())
            ]
        )

    def _entry(self, piece: tuple[int, str]) -> str:
        return side_entry(*piece)

    def _encode(self, piece: tuple[int, str]) -> list[list[Any]] | None:
        side, key = piece
        rows = (self._waiting if side == Side.LEFT else self._versions).get(key)
        return None if rows is None else [list(row) for row in rows.rows]

    def _clear(self) -> None:
        if self._cached:
            self._waiting.clear()
            self._versions.clear()
        else:
            self._waiting, self._versions = {}, {}
        self._due, self._prunable = [], []
        self._held = [0, 0]
        self._keys = 0

    def _restore_entry(self, name: str, value: Any) -> None:
        side, key = parse_side_entry(name)
        held = self._waiting if side is Side.LEFT else self._versions
        if self._cached:  # onto the store; then _rebuild
            if value is None:
                held.pop(key, None)
            else:
                held[key] = TIMELINE_CODEC.decode(value)
            return
        other = self._versions if side is Side.LEFT else self._waiting
        old = held.pop(key, None)
        if old is not None:
            self._held[side] -= len(old.times)
            if key not in other:
                self._keys -= 1
        if value is None:
            return
        rows = held[key] = _Timeline()
        for ts, position, row_value in value:
            rows.add((int(ts), int(position), row_value), replace=False)
        self._held[side] += len(rows.times)
        if key not in other:
            self._keys += 1
        if side is Side.LEFT:
            heapq.heappush(self._due, (rows.times[0], key))
        else:
            self._schedule_prune(key, rows)

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        super().restore_changes(entries)
        if self._cached:
            self._rebuild()

    def _rebuild(self) -> None:
        """The rocksdb backend, after a restore applied the changelog's entries onto the
        store (empty, or as a local checkpoint left it): both heaps and the counts, from
        one walk of both maps."""
        self._due, self._prunable = [], []
        self._held = [0, 0]
        keys: set[str] = set()
        for key, rows in self._waiting.items():
            self._due.append((rows.times[0], key))
            self._held[0] += len(rows.times)
            keys.add(key)
        heapq.heapify(self._due)
        for key, rows in self._versions.items():
            self._schedule_prune(key, rows)
            self._held[1] += len(rows.times)
            keys.add(key)
        self._keys = len(keys)

    def state_maps(self) -> list[StateCache]:
        """The rocksdb backend's maps (none with memory)."""
        return [self._waiting, self._versions] if self._cached else []
