"""Straightforward joins over whole inputs (no state, no watermark, no pruning), a
driver that feeds a join operator two inputs in a given interleaving, and the state
backends a join's tests run on.

A reference join returns the set of ``(id, key, timestamp, value, window)`` rows the
operator must emit for inputs in which no row is late.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

import orjson

from service.core.state_cache import NamespacedStore, StateCache, StateCodec, StateMaps
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from service.operators.base import InputRecord, JoinRow
from service.operators.join.rows import How, Side, both_sides, row_id
from service.operators.join.window import WINDOW_PREFIX
from service.runtime.partition.rocksdb_store import RocksMemory, RocksStore, open_store

PIPELINE = "p"

BACKENDS = ("memory", "rocksdb", "rocksdb-local")
"""The state backends a join's property tests run on: ``memory``; ``rocksdb`` (a cache of
about one entry per map, so most rows are evicted and read back; a restore is a new,
empty store and the whole changelog); ``rocksdb-local`` (the same, but a restore finds
the store as the last checkpoint left it and replays only that checkpoint's entries, as
a restart on the same disk does)."""
MAP_BYTES = 600
"""Each map's cache: one entry (a new one counts 400 B, a read one its size + 300 B)."""

_DIRECTORY = tempfile.TemporaryDirectory(prefix="join-rocksdb-")
_STORE: list[RocksStore] = []
_SPACES = count()


def _store() -> RocksStore:
    """One RocksDB for every test of the session: each operator's maps in their own
    namespace of it (opening a RocksDB per example would cost more than the example)."""
    if not _STORE:
        memory = RocksMemory(cache_bytes=8 * 1024 * 1024, write_buffer_bytes=1024 * 1024)
        _STORE.append(open_store(Path(_DIRECTORY.name), memory)[0])
    return _STORE[0]


class Maps:
    """One operator's named maps (a :class:`~service.core.state_cache.StateMaps`), each a
    small cache over its namespace of the shared RocksDB."""

    def __init__(self, space: str | None = None, counts: dict[str, int] | None = None) -> None:
        self.space = f"op{next(_SPACES)}" if space is None else space
        self.counts = counts or {}
        self.caches: dict[str, StateCache] = {}

    def __call__(self, name: str = "", codec: StateCodec | None = None) -> StateCache:
        assert name not in self.caches
        store = NamespacedStore(_store(), f"{self.space}/{name}")
        cache = StateCache(store, MAP_BYTES, self.counts.get(name, 0), codec=codec)
        self.caches[name] = cache
        return cache

    def flush(self) -> None:
        for cache in self.caches.values():
            cache.flush()

    def reopened(self) -> Maps:
        """New caches over the same stored maps (a restart on the same disk)."""
        return Maps(self.space, {name: len(cache) for name, cache in self.caches.items()})


@dataclass
class Backend:
    """Which state backend a test's operators keep their rows in (:data:`BACKENDS`)."""

    name: str = "memory"
    maps: Maps | None = None

    @property
    def local(self) -> bool:
        return self.name == "rocksdb-local"

    def state_maps(self) -> StateMaps | None:
        """For a new operator: None (memory), new empty maps (rocksdb), or with
        rocksdb-local the last operator's maps as its last checkpoint left them."""
        if self.name == "memory":
            return None
        if self.local and self.maps is not None:
            self.maps = self.maps.reopened()
        else:
            self.maps = Maps()
        return self.maps

    def checkpoint(self, operator: Any) -> list[tuple[str, Any]]:
        """The operator's checkpoint entries, its maps flushed with them (the runtime's
        one synchronous step)."""
        entries = list(operator.snapshot_changes().items())
        if self.maps is not None:
            self.maps.flush()
        return entries

    def restore(self, make: Any, log: list[tuple[str, Any]], last: list[tuple[str, Any]]) -> Any:
        """A new operator restored: from the whole ``log``, or (rocksdb-local) from the
        store and the ``last`` checkpoint's entries (the changelog's tail)."""
        operator = make()
        operator.restore_changes(last if self.local else log)
        return operator


Event = tuple[str, int, Any]
"""``(key, timestamp, value)`` of one input row."""

Out = tuple[str, str, int, str, tuple[int, int] | None]
"""A row as compared: id, key, timestamp, JSON of the value, window."""


def out(row: JoinRow) -> Out:
    return (row.id, row.key, row.timestamp, orjson.dumps(row.value).decode(), row.window)


def _out(
    key: str,
    ts: int,
    lpos: int | None,
    rpos: int | None,
    left: Any,
    right: Any,
    window: tuple[int, int] | None = None,
) -> Out:
    value = orjson.dumps(both_sides(left, right)).decode()
    return (row_id(PIPELINE, key, lpos, rpos, window), key, ts, value, window)


def reference_interval(
    left: Sequence[Event], right: Sequence[Event], how: How, lower: int, upper: int
) -> set[Out]:
    """Positions are the rows' indexes in their inputs, as :func:`records` numbers them."""
    rows: set[Out] = set()
    left_matched = [False] * len(left)
    right_matched = [False] * len(right)
    for i, (lkey, lts, lvalue) in enumerate(left):
        for j, (rkey, rts, rvalue) in enumerate(right):
            if lkey == rkey and lts + lower <= rts <= lts + upper:
                left_matched[i] = right_matched[j] = True
                rows.add(_out(lkey, max(lts, rts), i, j, lvalue, rvalue))
    if how.pads(Side.LEFT):
        rows |= {
            _out(k, ts, i, None, v, None)
            for i, (k, ts, v) in enumerate(left)
            if not left_matched[i]
        }
    if how.pads(Side.RIGHT):
        rows |= {
            _out(k, ts, None, j, None, v)
            for j, (k, ts, v) in enumerate(right)
            if not right_matched[j]
        }
    return rows


def records(events: Sequence[Event]) -> list[InputRecord]:
    """Input records whose position is the row's index (the source is the index too)."""
    return [(key, ts, value, i, i) for i, (key, ts, value) in enumerate(events)]


@dataclass
class BoundedGenerator:
    """A side's bounded-out-of-orderness watermark: ``max_ts - bound - 1``."""

    bound: int
    max_ts: int | None = None

    def see(self, ts: int) -> None:
        self.max_ts = ts if self.max_ts is None else max(self.max_ts, ts)

    @property
    def watermark(self) -> int:
        return MIN_TIMESTAMP if self.max_ts is None else self.max_ts - self.bound - 1


def held(operator: Any) -> tuple[int, int, int]:
    """Rows held per side and keys held, as the operator counts them."""
    return operator.rows_held(Side.LEFT), operator.rows_held(Side.RIGHT), operator.gauges().keys


def held_by_snapshot(operator: Any) -> tuple[int, int, int]:
    """The same, counted from a whole snapshot: rows per side of every ``l:``/``r:``
    entry (keys: distinct keys), or of every window entry (keys: key-window pairs)."""
    entries = {name: rows for name, rows in operator.snapshot().items() if name != "meta"}
    if any(name.startswith(WINDOW_PREFIX) for name in entries):
        lefts = sum(len(value[0]) for value in entries.values())
        rights = sum(len(value[1]) for value in entries.values())
        return lefts, rights, len(entries)
    lefts = sum(len(rows) for name, rows in entries.items() if name.startswith("l:"))
    rights = sum(len(rows) for name, rows in entries.items() if name.startswith("r:"))
    return lefts, rights, len({name[2:] for name in entries})


@dataclass
class Driver:
    """Feeds a join the two inputs in the order ``schedule`` says (a list of sides), the
    join's watermark (the minimum of the sides') after every ``every`` rows."""

    operator: Any
    bound: int
    backend: Backend = field(default_factory=Backend)
    emitted: list[JoinRow] = field(default_factory=list)
    late: int = 0

    def run(
        self,
        left: Sequence[Event],
        right: Sequence[Event],
        schedule: Sequence[int],
        every: int = 1,
        restore_at: int | None = None,
        make: Any = None,
    ) -> None:
        inputs = (records(left), records(right))
        generators = (BoundedGenerator(self.bound), BoundedGenerator(self.bound))
        taken = [0, 0]
        changes: list[tuple[str, Any]] = []
        for step, side in enumerate(schedule):
            if taken[side] >= len(inputs[side]):
                continue
            record = inputs[side][taken[side]]
            taken[side] += 1
            generators[side].see(record[1])
            if side == Side.LEFT:
                self.operator.process_left([record])
            else:
                self.operator.process_right([record])
            if step % every == 0:
                self.operator.advance_watermark(
                    min(generators[0].watermark, generators[1].watermark)
                )
            self.drain()
            if restore_at is not None:
                last = self.backend.checkpoint(self.operator)
                changes.extend(last)
                if step == restore_at:
                    self.operator = self.backend.restore(make, changes, last)
        for side in (0, 1):  # what the schedule did not reach, in order
            rest = inputs[side][taken[side] :]
            for record in rest:
                generators[side].see(record[1])
                if side == Side.LEFT:
                    self.operator.process_left([record])
                else:
                    self.operator.process_right([record])
                self.drain()
        self.operator.advance_watermark(MAX_TIMESTAMP)
        self.drain()

    def drain(self) -> None:
        assert held(self.operator) == held_by_snapshot(self.operator)
        collector = self.operator.collector
        self.emitted.extend(collector.results)
        self.late += len(collector.late) + collector.dropped_late
        collector.results.clear()
        collector.late.clear()
        collector.dropped_late = 0


def in_bound(steps: Sequence[tuple[str, int, int]], bound: int) -> list[Event]:
    """Events whose times are ``running sum of steps - jitter``, jitter in
    ``[0, bound]``: each at most ``bound`` behind the largest time before it, so no row
    is ever late against its own side's bounded watermark."""
    events: list[Event] = []
    now = 0
    for key, step, jitter in steps:
        now += step
        events.append((key, now - min(jitter, bound), {"k": key, "n": len(events)}))
    return events


def reference_window(
    left: Sequence[Event], right: Sequence[Event], how: How, assign: Any
) -> set[Out]:
    """Every key's rows of every window, joined as ``how`` says."""
    groups: dict[tuple[tuple[int, int], str], tuple[list[int], list[int]]] = {}
    for side, events in enumerate((left, right)):
        for i, (key, ts, _) in enumerate(events):
            for window in assign(ts):
                groups.setdefault((window, key), ([], []))[side].append(i)
    rows: set[Out] = set()
    for (window, key), (lefts, rights) in groups.items():
        ts = window[1] - 1
        if how in (How.SEMI, How.ANTI):
            if bool(rights) == (how is How.SEMI):
                rows |= {_out(key, ts, i, None, left[i][2], None, window) for i in lefts}
            continue
        rows |= {
            _out(key, ts, i, j, left[i][2], right[j][2], window) for i in lefts for j in rights
        }
        if not rights and how.pads(Side.LEFT):
            rows |= {_out(key, ts, i, None, left[i][2], None, window) for i in lefts}
        if not lefts and how.pads(Side.RIGHT):
            rows |= {_out(key, ts, None, j, None, right[j][2], window) for j in rights}
    return rows


def reference_temporal(left: Sequence[Event], right: Sequence[Event], how: How) -> set[Out]:
    """Each left row with the newest right version of its key at or below its time (the
    later arrival among versions of one time), a None value being a tombstone."""
    rows: set[Out] = set()
    for i, (key, ts, value) in enumerate(left):
        best: tuple[int, int] | None = None  # (version time, index)
        for j, (rkey, rts, _) in enumerate(right):
            if rkey == key and rts <= ts and (best is None or (rts, j) >= best):
                best = (rts, j)
        if best is not None and right[best[1]][2] is not None:
            rows.add(_out(key, ts, i, best[1], value, right[best[1]][2]))
        elif how is How.LEFT:
            rows.add(_out(key, ts, i, None, value, None))
    return rows
