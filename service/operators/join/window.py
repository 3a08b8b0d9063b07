"""The window join: Flink's window join (``join().where().equalTo().window()``, and Flink
SQL's window join), with outer, semi and anti rows.

Both inputs are assigned to the same windows (tumbling or sliding assigners, as in the
window operator). When the join's watermark ``W`` reaches a window's ``max_ts``
(``end - 1``), every key's rows of that window are joined and emitted, timestamped
``max_ts``, with the window:

- ``inner``: every pair of a left and a right row; ``left``/``right``/``full`` also each
  row of an outer side that has no partner in the window, padded with NULLs;
- ``semi``: each left row that has a partner in the window, once; ``anti``: each left
  row that has none.

A row is late when every window it belongs to is past its cleanup time
(``max_ts + allowed_lateness <= W``), as the window operator judges a record
(semantics.md section 5); it goes to the late output naming its input. Without allowed
lateness a window's rows are dropped when it fires. With it (inner joins only: an outer,
semi or anti row emitted at the firing could be contradicted by a partner arriving
later, and a result once emitted is never retracted), the window keeps its rows until
its cleanup time, and an allowed-late row is joined at once with the partners already
there.

**State backends.** With ``memory`` the rows are a dict per window (key -> the two
sides' rows). With ``rocksdb`` each key's rows of a window (both sides: what one
checkpoint entry holds, and what a firing reads at once) are one entry of a named map
of the partition's RocksDB (``windows``, the entry ``<start>:<end>:<key>``) behind its
write-back cache; the windows' timers and each window's keys stay in memory (as Flink's
RocksDB backend keeps timers on the heap), so a firing finds every key of its window,
held or evicted. A restore walks the map once to rebuild them.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from service.core.state_cache import StateCache, StateMaps
from service.core.time import MIN_TIMESTAMP
from service.operators.base import InputRecord, OperatorGauges
from service.operators.join.base import JoinOperator
from service.operators.join.rows import How, JoinConfigError, Projection, Side, Window, both_sides

WINDOW_PREFIX = "w:"
"""A checkpoint entry per window and key: ``w:<start>:<end>:<key>``."""

Row = tuple[int, int, Any]
"""``(ts, position, value)``."""

_FIRE = 0
_CLEANUP = 1

WINDOWS_MAP = "windows"
"""The rows' map in the partition's RocksDB (the rocksdb backend)."""

Sides = tuple[list[Row], list[Row]]


class SidesCodec:
    """A window's rows of one key in a RocksDB map: ``[lefts, rights]``, rows as arrays."""

    __slots__ = ()

    def encode(self, value: Sides) -> list[list[Row]]:
        return [value[0], value[1]]

    def decode(self, data: Any) -> Sides:
        lefts, rights = data
        return [(ts, pos, v) for ts, pos, v in lefts], [(ts, pos, v) for ts, pos, v in rights]


SIDES_CODEC = SidesCodec()


def _map_key(window: Window, key: str) -> str:
    return f"{window[0]}:{window[1]}:{key}"


class Assigner(Protocol):
    """Tumbling or sliding (``operators/window/assigners.py``)."""

    def assign(self, timestamp: int) -> list[Window]: ...


class WindowJoinOperator(JoinOperator):
    """One partition's window join (see the module docstring)."""

    kind = "window"

    def __init__(
        self,
        pipeline: str,
        how: How,
        assigner: Assigner,
        allowed_lateness_ms: int = 0,
        project: Projection = both_sides,
        inputs: tuple[str, str] = ("left", "right"),
        late_output: bool = True,
        state_maps: StateMaps | None = None,
    ) -> None:
        """``state_maps``: the rocksdb backend's named maps (None: memory)."""
        # Defensive only: the spec refuses both first (a join's assigner is tumbling or
        # sliding in the model; the rule window_join_lateness), so no spec reaches them.
        if getattr(assigner, "merging", False):
            raise JoinConfigError("a window join takes tumbling or sliding windows")
        if allowed_lateness_ms and how is not How.INNER:
            raise JoinConfigError(
                f"a {how} window join takes no allowed lateness: what it emits for a row "
                "without partner could be contradicted by a partner arriving later"
            )
        super().__init__(pipeline, how, allowed_lateness_ms, project, inputs, late_output)
        self._assigner = assigner
        self._windows: dict[Window, dict[str, Any]] = {}
        """Window -> key -> the two sides' rows; with the rocksdb backend, key -> None
        (the window's keys: the rows are in :attr:`_rows`)."""
        self._rows: StateCache | None = (
            None if state_maps is None else state_maps(WINDOWS_MAP, SIDES_CODEC)
        )
        self._timers: list[tuple[int, int, Window]] = []  # (time, _FIRE | _CLEANUP, window)
        self._dirty: set[tuple[Window, str]] = set()
        self._held = [0, 0]
        """Rows per side, once per window they are in, counted as they change (the
        status and the metrics ask every second)."""
        self._pairs = 0
        """Key-window pairs held."""

    # -- input ----------------------------------------------------------------------------
    def _process(self, side: Side, records: Sequence[InputRecord]) -> None:
        if self._rows is not None:
            self._process_cached(side, records, self._rows)
            return
        watermark = self._watermark
        lateness = self.lateness
        assign = self._assigner.assign
        windows = self._windows
        dirty = self._dirty
        for key, ts, value, position, source in records:
            assigned = assign(ts)
            taken = not assigned  # in no window (a gap between hopping windows): dropped
            for window in assigned:
                max_ts = window[1] - 1
                if watermark != MIN_TIMESTAMP and max_ts + lateness <= watermark:
                    continue  # this window is past its cleanup time
                taken = True
                keys = windows.get(window)
                if keys is None:
                    keys = windows[window] = {}
                    self._schedule(window)
                sides: Sides | None = keys.get(key)
                if sides is None:
                    sides = keys[key] = ([], [])
                    self._pairs += 1
                row = (ts, position, value)
                sides[side].append(row)
                self._held[side] += 1
                dirty.add((window, key))
                if max_ts <= watermark:  # fired already (allowed lateness, inner only)
                    self._pairs_with(side, key, window, row, sides[1 - side])
            if not taken:
                self._late(side, key, ts, source)

    def _process_cached(
        self, side: Side, records: Sequence[InputRecord], cache: StateCache
    ) -> None:
        """:meth:`_process` with the rows in RocksDB: the window's keys say whether the
        key has rows there (no read for a new one)."""
        watermark = self._watermark
        lateness = self.lateness
        assign = self._assigner.assign
        windows = self._windows
        dirty = self._dirty
        for key, ts, value, position, source in records:
            assigned = assign(ts)
            taken = not assigned
            for window in assigned:
                max_ts = window[1] - 1
                if watermark != MIN_TIMESTAMP and max_ts + lateness <= watermark:
                    continue
                taken = True
                keys = windows.get(window)
                if keys is None:
                    keys = windows[window] = {}
                    self._schedule(window)
                name = _map_key(window, key)
                if key in keys:
                    sides = cache.get(name)
                else:
                    keys[key] = None
                    sides = cache[name] = ([], [])
                    self._pairs += 1
                row = (ts, position, value)
                sides[side].append(row)
                cache.mark_dirty(name)
                self._held[side] += 1
                dirty.add((window, key))
                if max_ts <= watermark:
                    self._pairs_with(side, key, window, row, sides[1 - side])
            if not taken:
                self._late(side, key, ts, source)

    def _schedule(self, window: Window) -> None:
        max_ts = window[1] - 1
        if max_ts > self._watermark:
            heapq.heappush(self._timers, (max_ts, _FIRE, window))
        if self.lateness:
            heapq.heappush(self._timers, (max_ts + self.lateness, _CLEANUP, window))

    # -- time -----------------------------------------------------------------------------
    def advance_watermark(self, watermark: int) -> None:
        """Fire every window whose ``max_ts`` is at or below ``watermark``, in time order,
        and drop the windows past their cleanup time."""
        if watermark <= self._watermark:
            return
        self._watermark = watermark
        timers = self._timers
        while timers and timers[0][0] <= watermark:
            _, kind, window = heapq.heappop(timers)
            keys = self._windows.get(window)
            if keys is None:
                continue
            if self._rows is not None:
                self._fire_cached(window, keys, kind, self._rows)
                continue
            if kind == _FIRE:
                for key, (lefts, rights) in keys.items():
                    self._fire(key, window, lefts, rights)
            if kind == _CLEANUP or not self.lateness:
                del self._windows[window]
                self._dirty.update((window, key) for key in keys)
                self._forget(keys)

    def _fire_cached(
        self, window: Window, keys: dict[str, None], kind: int, cache: StateCache
    ) -> None:
        """A timer of ``window`` with the rows in RocksDB: each key's rows read (and
        deleted, when the window goes)."""
        drop = kind == _CLEANUP or not self.lateness
        held = self._held
        for key in keys:
            name = _map_key(window, key)
            sides = cache.pop(name) if drop else cache.get(name)
            if kind == _FIRE:
                self._fire(key, window, *sides)
            if drop:
                held[0] -= len(sides[0])
                held[1] -= len(sides[1])
        if drop:
            del self._windows[window]
            self._dirty.update((window, key) for key in keys)
            self._pairs -= len(keys)

    def _forget(self, keys: dict[str, tuple[list[Row], list[Row]]]) -> None:
        """Uncount a window's rows and keys, dropped."""
        held = self._held
        for lefts, rights in keys.values():
            held[0] -= len(lefts)
            held[1] -= len(rights)
        self._pairs -= len(keys)

    def _fire(self, key: str, window: Window, lefts: list[Row], rights: list[Row]) -> None:
        how = self.how
        row = self._row
        if how is How.SEMI or how is How.ANTI:
            if bool(rights) == (how is How.SEMI):
                for left in lefts:
                    row(key, window, left, None)
            return
        for left in lefts:
            for right in rights:
                row(key, window, left, right)
        if not rights and how.pads(Side.LEFT):
            for left in lefts:
                row(key, window, left, None)
        if not lefts and how.pads(Side.RIGHT):
            for right in rights:
                row(key, window, None, right)

    def _pairs_with(
        self, side: Side, key: str, window: Window, row: Row, others: list[Row]
    ) -> None:
        for other in others:
            if side is Side.LEFT:
                self._row(key, window, row, other)
            else:
                self._row(key, window, other, row)

    def _row(self, key: str, window: Window, left: Row | None, right: Row | None) -> None:
        self._emit(
            key,
            window[1] - 1,
            None if left is None else left[1],
            None if left is None else left[2],
            None if right is None else right[1],
            None if right is None else right[2],
            window,
        )

    # -- numbers --------------------------------------------------------------------------
    def rows_held(self, side: Side) -> int:
        """Rows kept for ``side``, counted once per window they are in."""
        return self._held[side]

    def gauges(self) -> OperatorGauges:
        """``keys``: key-window pairs (a key in two open windows counts twice), counted
        as they change; distinct keys would mean walking every window each second."""
        return OperatorGauges(
            event_timers=len(self._timers),
            processing_timers=0,
            windows_open=len(self._windows),
            keys=self._pairs,
        )

    # -- checkpoint hooks -----------------------------------------------------------------
    def _pieces(self) -> Iterator[tuple[Window, str]]:
        return iter([(window, key) for window, keys in self._windows.items() for key in keys])

    def _entry(self, piece: tuple[Window, str]) -> str:
        (start, end), key = piece
        return f"{WINDOW_PREFIX}{start}:{end}:{key}"

    def _encode(self, piece: tuple[Window, str]) -> list[list[list[Any]]] | None:
        window, key = piece
        if self._rows is not None:
            sides = self._rows.get(_map_key(window, key))
        else:
            sides = self._windows.get(window, {}).get(key)
        if sides is None:
            return None
        return [[list(row) for row in rows] for rows in sides]

    def _clear(self) -> None:
        if self._rows is not None:
            self._rows.clear()
        self._windows = {}
        self._timers = []
        self._held = [0, 0]
        self._pairs = 0

    def _restore_entry(self, name: str, value: Any) -> None:
        if not name.startswith(WINDOW_PREFIX):
            raise JoinConfigError(f"unknown join checkpoint entry {name!r}")
        if self._rows is not None:  # onto the store; then _rebuild
            if value is None:
                self._rows.pop(name[len(WINDOW_PREFIX) :], None)
            else:
                self._rows[name[len(WINDOW_PREFIX) :]] = SIDES_CODEC.decode(value)
            return
        start, end, key = name[len(WINDOW_PREFIX) :].split(":", 2)
        window = (int(start), int(end))
        keys = self._windows.get(window)
        if keys is not None and key in keys:
            self._forget({key: keys.pop(key)})
        if value is None:
            if keys is not None and not keys:
                del self._windows[window]
            return
        if keys is None:
            keys = self._windows[window] = {}
            self._schedule(window)
        lefts, rights = value
        keys[key] = sides = (
            [(int(ts), int(pos), v) for ts, pos, v in lefts],
            [(int(ts), int(pos), v) for ts, pos, v in rights],
        )
        self._held[0] += len(sides[0])
        self._held[1] += len(sides[1])
        self._pairs += 1

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        super().restore_changes(entries)
        if self._rows is not None:
            self._rebuild(self._rows)

    def _rebuild(self, cache: StateCache) -> None:
        """The rocksdb backend, after a restore applied the changelog's entries onto the
        store (empty, or as a local checkpoint left it): every window's keys, its timers
        and the counts, from one walk of the map."""
        self._windows = {}
        self._timers = []
        self._held = [0, 0]
        self._pairs = 0
        for name, (lefts, rights) in cache.items():
            start, end, key = name.split(":", 2)
            window = (int(start), int(end))
            keys = self._windows.get(window)
            if keys is None:
                keys = self._windows[window] = {}
                self._schedule(window)
            keys[key] = None
            self._held[0] += len(lefts)
            self._held[1] += len(rights)
            self._pairs += 1

    def state_maps(self) -> list[StateCache]:
        """The rocksdb backend's map (none with memory)."""
        return [] if self._rows is None else [self._rows]
