"""The interval join: Flink's ``IntervalJoinOperator``, with outer sides.

A left row ``l`` and a right row ``r`` of the same key match when
``l.ts + lower <= r.ts <= l.ts + upper`` (bounds inclusive; ``lower`` may be negative).
A match is emitted as soon as its second row arrives, timestamped ``max(l.ts, r.ts)``.

Each row is kept until the join's watermark ``W`` passes the last time a partner could
still arrive for it -- its **cleanup time**: ``l.ts + upper + allowed_lateness`` for a
left row, ``r.ts - lower + allowed_lateness`` for a right one. A partner arriving later
would have a timestamp above ``W - allowed_lateness`` (else it is late and not joined),
and so out of the row's interval. At its cleanup time the row is dropped and, for an
outer side (``how``), emitted padded with NULLs **if it never matched**, timestamped with
its own time: never at arrival, so no outer row is emitted and then contradicted by a
match (the spurious outer results Kafka Streams fixed in KAFKA-10847).

State per key and side is a list of rows sorted by time, so a new row finds its
partners with two binary searches, and the rows that expire at a watermark are a prefix
(cleanup time is the row's time plus a constant of its side). One heap entry per key
and side, at the cleanup time of its oldest row, finds them without a timer per row.

**State backends.** With ``memory`` each side's rows are a dict (key -> rows). With
``rocksdb`` each side is a named map of the partition's RocksDB (``left``, ``right``)
behind its write-back cache (:class:`~service.core.state_cache.StateCache`, the rows
encoded by :data:`ROWS_CODEC`); the expiry heap stays in memory, as Flink's RocksDB
backend keeps its timers on the heap, so the watermark finds the rows to drop whether
they are held or evicted (a heap entry names its key; the rows are read back when it
is due). A restore applies the changelog's entries onto the store and then walks both
maps once to rebuild the heap and the counts (:meth:`RowsPerSideJoin._rebuild`).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from service.core.state_cache import StateCache, StateMaps
from service.operators.base import InputRecord, OperatorGauges
from service.operators.join.base import JoinOperator
from service.operators.join.checkpoint import parse_side_entry, side_entry
from service.operators.join.kinds import JOIN_KINDS
from service.operators.join.rows import How, JoinConfigError, Projection, Side, both_sides, is_late

Row = list[Any]
"""``[ts, position, value, matched]``: a list, so ``matched`` is set in place. The
checkpoint holds one entry per key and side (``l:<key>``, ``r:<key>``)."""


class TimeSortedRows:
    """One key's rows of one side, sorted by time (ties: arrival order); each row is a
    list starting with its time (the regular join keeps its rows here too).

    ``written``: whether the changelog holds an entry of this key and side (a checkpoint
    encoded these rows, or they were restored): only then does dropping the last of
    them need a tombstone. Rows that come and go between two checkpoints, as most do
    in a join whose partners arrive close together, cost the changelog nothing."""

    __slots__ = ("rows", "times", "written")

    def __init__(self, written: bool = False) -> None:
        self.times: list[int] = []
        self.rows: list[Row] = []
        self.written = written

    def add(self, row: Row) -> None:
        ts = row[0]
        times = self.times
        if not times or ts >= times[-1]:
            times.append(ts)
            self.rows.append(row)
            return
        at = bisect_right(times, ts)
        times.insert(at, ts)
        self.rows.insert(at, row)

    def between(self, low: int, high: int) -> list[Row]:
        times = self.times
        return self.rows[bisect_left(times, low) : bisect_right(times, high)]


class RowsCodec:
    """:class:`TimeSortedRows` in a RocksDB map: ``[written, rows]`` (the rows as their
    lists; ``written`` kept, so an evicted key still owes the changelog its tombstone)."""

    __slots__ = ()

    def encode(self, value: TimeSortedRows) -> list[Any]:
        return [value.written, value.rows]

    def decode(self, data: Any) -> TimeSortedRows:
        written, rows = data
        value = TimeSortedRows(bool(written))
        value.rows = rows
        value.times = [row[0] for row in rows]
        return value


ROWS_CODEC = RowsCodec()
SIDE_MAPS = ("left", "right")
"""The names of the two sides' maps in the partition's RocksDB."""


class RowsPerSideJoin(JoinOperator):
    """A join that keeps each side's rows per key in :class:`TimeSortedRows` (the
    interval and regular joins): the state, its expiry heap, its numbers and its
    checkpoint entries (``l:<key>``, ``r:<key>``: the key's rows as lists). A subclass
    fills them (:meth:`_new_rows`, then counting what it adds in ``_held``), drops them
    (:meth:`_drop_oldest`) and restores an entry's rows (:meth:`_put_rows`).

    Rows held per side and keys held are counted as they change, not by walking the
    state: the status and the metrics ask every second, and a join can hold millions."""

    def _init_rows(self, state_maps: StateMaps | None) -> None:
        self._sides: tuple[Any, Any] = (
            ({}, {})
            if state_maps is None
            else (state_maps(SIDE_MAPS[0], ROWS_CODEC), state_maps(SIDE_MAPS[1], ROWS_CODEC))
        )
        """Key -> :class:`TimeSortedRows` per side: dicts, or the rocksdb backend's caches
        (an entry changed in place is marked dirty right after it was got)."""
        self._cached = state_maps is not None
        self._expiry: list[tuple[int, int, str]] = []  # (expiry time, side, key)
        self._dirty: set[tuple[int, str]] = set()
        self._held = [0, 0]
        """Rows held per side."""
        self._keys = 0
        """Keys with rows on either side."""

    # -- the state ------------------------------------------------------------------------
    def _new_rows(self, side: int, key: str, alone: bool) -> TimeSortedRows:
        """Empty rows for a key ``side`` holds nothing of; ``alone``: the other side
        holds nothing of it either (the caller looked it up already).

        A key marked changed while it holds no rows owes the changelog a tombstone for
        rows written before: the new rows take that debt over (``written``), so that
        dropping them too still deletes the entry."""
        owed = (side, key) in self._dirty
        rows = self._sides[side][key] = TimeSortedRows(written=owed)
        if alone:
            self._keys += 1
        return rows

    def _drop_oldest(self, side: int, key: str, rows: TimeSortedRows, count: int) -> bool:
        """Drop ``key``'s ``count`` oldest rows of ``side``, and the key when none is
        left; mark what the next checkpoint must write. True if rows are left."""
        del rows.times[:count]
        del rows.rows[:count]
        self._held[side] -= count
        mine = self._sides[side]
        if rows.times:
            if self._cached:
                mine.mark_dirty(key)
            self._dirty.add((side, key))
            return True
        del mine[key]
        if key not in self._sides[1 - side]:
            self._keys -= 1
        if rows.written:
            self._dirty.add((side, key))
        else:  # never in the changelog: nothing to delete there
            self._dirty.discard((side, key))
        return False

    def _put_rows(self, side: int, key: str, rows: TimeSortedRows | None) -> None:
        """``key``'s rows of ``side`` are ``rows`` now (None or empty: none). With the
        rocksdb backend, only the map: a restore rebuilds the counts (:meth:`_rebuild`)."""
        mine = self._sides[side]
        if self._cached:
            if rows is not None and rows.times:
                mine[key] = rows
            else:
                mine.pop(key, None)
            return
        there = key in self._sides[1 - side]
        old = mine.pop(key, None)
        if old is not None:
            self._held[side] -= len(old.times)
            if not there:
                self._keys -= 1
        if rows is not None and rows.times:
            mine[key] = rows
            self._held[side] += len(rows.times)
            if not there:
                self._keys += 1

    # -- numbers --------------------------------------------------------------------------
    def rows_held(self, side: Side) -> int:
        """Rows kept for ``side`` (``clockwork_join_state_rows``)."""
        return self._held[side]

    def gauges(self) -> OperatorGauges:
        return OperatorGauges(
            event_timers=len(self._expiry), processing_timers=0, windows_open=0, keys=self._keys
        )

    # -- checkpoint hooks -----------------------------------------------------------------
    def _pieces(self) -> Iterator[tuple[int, str]]:
        if self._cached:  # every key first: encoding one reads it into the cache
            return iter([(side, key) for side in (0, 1) for key in list(self._sides[side].keys())])
        return ((side, key) for side in (0, 1) for key in self._sides[side])

    def _entry(self, piece: tuple[int, str]) -> str:
        return side_entry(*piece)

    def _encode(self, piece: tuple[int, str]) -> list[Row] | None:
        side, key = piece
        mine = self._sides[side]
        rows = mine.get(key)
        if rows is None:
            return None
        if not rows.written:
            rows.written = True
            if self._cached:
                mine.mark_dirty(key)
        return [list(row) for row in rows.rows]

    def _clear(self) -> None:
        if self._cached:
            self._sides[0].clear()
            self._sides[1].clear()
        else:
            self._sides = ({}, {})
        self._expiry = []
        self._held = [0, 0]
        self._keys = 0

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        super().restore_changes(entries)
        if self._cached:
            self._rebuild()

    def _expires_after(self, side: int) -> int | None:
        """A row of ``side`` expires at its time plus this (None: never): its heap entry."""
        raise NotImplementedError

    def _rebuild(self) -> None:
        """The rocksdb backend, after a restore applied the changelog's entries onto the
        store (empty, or as a local checkpoint left it): the expiry heap, the rows held
        and the keys, from one walk of both maps (every key, held or stored)."""
        expiry: list[tuple[int, int, str]] = []
        held = [0, 0]
        keys: set[str] = set()
        for side in (0, 1):
            after = self._expires_after(side)
            for key, rows in self._sides[side].items():
                held[side] += len(rows.times)
                keys.add(key)
                if after is not None:
                    expiry.append((rows.times[0] + after, side, key))
        heapq.heapify(expiry)
        self._expiry = expiry
        self._held = held
        self._keys = len(keys)

    def state_maps(self) -> list[StateCache]:
        """The rocksdb backend's maps (none with memory)."""
        return list(self._sides) if self._cached else []


class IntervalJoinOperator(RowsPerSideJoin):
    """One partition's interval join (see the module docstring)."""

    kind = "interval"

    def __init__(
        self,
        pipeline: str,
        how: How,
        lower_ms: int,
        upper_ms: int,
        allowed_lateness_ms: int = 0,
        project: Projection = both_sides,
        inputs: tuple[str, str] = ("left", "right"),
        late_output: bool = True,
        state_maps: StateMaps | None = None,
    ) -> None:
        """``state_maps``: the rocksdb backend's named maps (None: memory)."""
        # Defensive only: the spec's rules refuse both first (join_how_fits_kind and
        # between_in_order, in pipeline_spec/rules/joins.py), so no spec reaches them;
        # they guard a direct construction (tests, benchmarks). The hows are kinds.py's.
        if how not in JOIN_KINDS[self.kind].hows:
            raise JoinConfigError(f"an interval join is inner, left, right or full, not {how}")
        if lower_ms > upper_ms:
            raise JoinConfigError(f"lower_ms {lower_ms} is above upper_ms {upper_ms}")
        super().__init__(pipeline, how, allowed_lateness_ms, project, inputs, late_output)
        self.lower = lower_ms
        self.upper = upper_ms
        self._pads = (how.pads(Side.LEFT), how.pads(Side.RIGHT))
        # cleanup time = ts + this, per side
        self._keep = (upper_ms + allowed_lateness_ms, -lower_ms + allowed_lateness_ms)
        self._init_rows(state_maps)

    # -- input ----------------------------------------------------------------------------
    def _process(self, side: Side, records: Sequence[InputRecord]) -> None:
        watermark = self._watermark
        lateness = self.lateness
        mine = self._sides[side]
        theirs = self._sides[1 - side]
        keep = self._keep[side]
        pads = self._pads[side]
        partner_pads = self._pads[1 - side]  # only an outer side needs its rows' matched flag
        dirty = self._dirty
        other = 1 - side
        emit = self._emit
        left_side = side is Side.LEFT
        mark_mine = mine.mark_dirty if self._cached else None
        mark_theirs = theirs.mark_dirty if self._cached else None
        added = 0
        if side is Side.LEFT:
            low_delta, high_delta = self.lower, self.upper
        else:
            low_delta, high_delta = -self.upper, -self.lower
        for key, ts, value, position, source in records:
            if is_late(ts, watermark, lateness):
                self._late(side, key, ts, source)
                continue
            matched = False
            partners = theirs.get(key)
            if partners is not None:
                for partner in partners.between(ts + low_delta, ts + high_delta):
                    matched = True
                    if partner_pads and not partner[3]:
                        partner[3] = True
                        dirty.add((other, key))
                        if mark_theirs is not None:
                            mark_theirs(key)
                    if left_side:
                        emit(key, max(ts, partner[0]), position, value, partner[1], partner[2])
                    else:
                        emit(key, max(ts, partner[0]), partner[1], partner[2], position, value)
            cleanup = ts + keep
            if cleanup <= watermark:  # allowed-late, and no partner can come any more
                if pads and not matched:
                    self._padded(side, key, [ts, position, value, matched])
                continue
            rows = mine.get(key)
            if rows is None:
                rows = self._new_rows(side, key, partners is None)
            first = rows.times[0] if rows.times else None
            rows.add([ts, position, value, matched])
            if mark_mine is not None:
                mark_mine(key)
            added += 1
            if first is None or ts < first:
                heapq.heappush(self._expiry, (cleanup, side, key))
            dirty.add((side, key))
        self._held[side] += added

    def _padded(self, side: Side, key: str, row: Row) -> None:
        ts, position, value, _ = row
        if side is Side.LEFT:
            self._emit(key, ts, position, value, None, None)
        else:
            self._emit(key, ts, None, None, position, value)

    # -- time -----------------------------------------------------------------------------
    def advance_watermark(self, watermark: int) -> None:
        """Drop every row whose cleanup time is at or below ``watermark``, emitting the
        unmatched ones of an outer side padded."""
        if watermark <= self._watermark:
            return
        self._watermark = watermark
        expiry = self._expiry
        keep = self._keep
        while expiry and expiry[0][0] <= watermark:
            cleanup, side, key = heapq.heappop(expiry)
            rows = self._sides[side].get(key)
            if rows is None or rows.times[0] + keep[side] != cleanup:
                continue  # stale: the key's oldest row changed since this entry
            self._expire(Side(side), key, rows, watermark - keep[side])

    def _expire(self, side: Side, key: str, rows: TimeSortedRows, through: int) -> None:
        """Drop ``key``'s rows of ``side`` with time at or below ``through``."""
        count = bisect_right(rows.times, through)
        if self._pads[side]:
            for row in rows.rows[:count]:
                if not row[3]:
                    self._padded(side, key, row)
        if self._drop_oldest(side, key, rows, count):
            heapq.heappush(self._expiry, (rows.times[0] + self._keep[side], side, key))

    # -- checkpoint hooks -----------------------------------------------------------------
    def _expires_after(self, side: int) -> int | None:
        return self._keep[side]

    def _restore_entry(self, name: str, value: Any) -> None:
        side, key = parse_side_entry(name)
        if value is None:
            self._put_rows(side, key, None)
            return
        rows = TimeSortedRows(written=True)
        for ts, position, row_value, matched in value:
            rows.add([int(ts), int(position), row_value, bool(matched)])
        self._put_rows(side, key, rows)
        if not self._cached:
            heapq.heappush(self._expiry, (rows.times[0] + self._keep[side], side, key))
