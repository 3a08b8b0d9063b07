"""The receiving side of a keyed shuffle: watermarks from markers, and the replay filter.

A pipeline keyed by a payload field runs in two stages (semantics.md section 8): stage 1
reads the source partitions and writes each record to the shuffle partition of its key;
stage 2 runs the keyed operator per shuffle partition. Every shuffle partition receives
records from every source partition, so its watermark must be what Flink gives a
``keyBy``'s receiving task: the minimum over its input channels, idle channels left out.

Markers: each source partition writes ``(watermark, idle)`` into every shuffle partition
whenever either changes (and ``MAX`` once bounded input ends), in order with its
records. :class:`ShuffleInput` is one shuffle partition's view:

- its watermark is ``MIN`` until every source partition (``count`` of them, carried by
  the markers) has spoken; then the minimum over the sources not idle; when all are
  idle, the maximum over all of them, as Flink's ``StatusWatermarkValve`` flushes its
  channels' watermarks when the last one goes idle: no source will hold it back, and
  the result does not depend on whether the last source spoke before or after the
  others went idle (idleness is declared upstream, never guessed from silence);
- per source the highest watermark wins (a replayed or zombie writer may repeat an
  older marker: what a marker says stays true);
- it is finished once every source said ``MAX``.

Replays: a restarted stage 1 (or a zombie owner still writing) writes records again. Each
writer writes a source partition's records in offset order, and writes each record to the
same shuffle partition (its key's), so a record at or below the highest position already
applied from its source was applied before: it is dropped. The position is the source
offset and, for records unnested from one source record, the element index
(:func:`position`).

Pure: the runtime decodes the shuffle records and calls in here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP

INDEX_BITS = 20
"""A position is ``offset << INDEX_BITS | element index``: up to 2**20 elements per record."""

MAX_INDEX = (1 << INDEX_BITS) - 1


def position(offset: int, index: int = 0) -> int:
    """One number ordering records by source offset, then element index."""
    return offset << INDEX_BITS | index


class _Source:
    __slots__ = ("applied", "idle", "markers", "spoke", "watermark")

    def __init__(self) -> None:
        self.watermark = MIN_TIMESTAMP
        self.idle = False
        self.spoke = False  # a marker of it arrived (ever: restored with the state)
        self.applied = -1
        self.markers = 0  # received since this process restored it (status only)


class ShuffleInput:
    """One shuffle partition's view of the source partitions (see the module docstring).

    It is the partition's watermark generator in stage 2: records carry no watermark of
    their own (:meth:`on_event` does nothing), markers do (:meth:`marker`).
    """

    __slots__ = ("_count", "_sources", "_spoken", "_watermark", "replays")

    def __init__(self) -> None:
        self._sources: dict[int, _Source] = {}
        self._count = 0
        self._spoken = 0  # sources that sent a marker
        self._watermark = MIN_TIMESTAMP
        self.replays = 0
        """Records dropped as replays since this object was made (status only)."""

    # -- markers ------------------------------------------------------------------------
    def marker(self, source: int, watermark: int, idle: bool, count: int) -> None:
        """Source partition ``source`` (of ``count``) says: watermark, idle or not."""
        state = self._sources.get(source)
        if state is None:
            state = self._sources[source] = _Source()
        if not state.spoke:
            state.spoke = True
            self._spoken += 1
        state.markers += 1
        if watermark > state.watermark:
            state.watermark = watermark
        state.idle = idle and state.watermark != MAX_TIMESTAMP
        if count > self._count:
            self._count = count
        self._recompute()

    def _recompute(self) -> None:
        if self._spoken < self._count or self._count == 0:
            return  # not every source has spoken: stay at the start
        low: int | None = None
        for state in self._sources.values():
            if state.idle or not state.spoke:
                continue
            if low is None or state.watermark < low:
                low = state.watermark
        if low is None:  # every source idle: flush (see the module docstring)
            low = max(state.watermark for state in self._sources.values())
        if low > self._watermark:
            self._watermark = low

    @property
    def current_watermark(self) -> int:
        """MIN until every source spoke; then the minimum over the active ones, or the
        maximum over all when all are idle (never goes back)."""
        return self._watermark

    @property
    def finished(self) -> bool:
        """Every source partition's input ended (all said MAX). Not the watermark at
        MAX alone: the flush of idle sources can raise it there while one of them may
        still send records (late ones, which must still reach the operator)."""
        if self._watermark != MAX_TIMESTAMP or self._spoken < self._count:
            return False
        return all(state.watermark == MAX_TIMESTAMP for state in self._sources.values())

    @property
    def sources(self) -> int:
        """Source partitions known (from the markers' count)."""
        return self._count

    def watermark_of(self, sources: Iterable[int]) -> int:
        """The watermark of some of the sources alone (a join's input): ``MIN`` until
        each spoke, then the minimum over the active ones, or the maximum when all are
        idle -- the rule of the whole, over the part (status only)."""
        states = [self._sources.get(source) for source in sources]
        if not states or any(state is None or not state.spoke for state in states):
            return MIN_TIMESTAMP
        active = [state.watermark for state in states if state is not None and not state.idle]
        if active:
            return min(active)
        return max(state.watermark for state in states if state is not None)

    def markers_received(self) -> dict[int, int]:
        """Markers received per source since this object was made (for status)."""
        return {source: state.markers for source, state in sorted(self._sources.items())}

    def idle_sources(self) -> list[int]:
        return sorted(s for s, state in self._sources.items() if state.idle)

    # -- the replay filter --------------------------------------------------------------
    def fresh(self, source: int, at: int) -> bool:
        """Whether the record at position ``at`` of ``source`` is new here (and now
        applied); False for a replay, which is counted."""
        state = self._sources.get(source)
        if state is None:
            state = self._sources[source] = _Source()
        if at <= state.applied:
            self.replays += 1
            return False
        state.applied = at
        return True

    def take_frame(self, source: int, last: int) -> int:
        """A frame of ``source`` whose last row is at position ``last`` arrives: returns
        the highest position applied from ``source`` before it (-1: none), at or below
        which its rows are replays, and counts every row from there on applied."""
        state = self._sources.get(source)
        if state is None:
            state = self._sources[source] = _Source()
        applied = state.applied
        if last > applied:
            state.applied = last
        return applied

    # -- the generator protocol ---------------------------------------------------------
    def on_event(self, timestamp: int, value: Any) -> None:
        """Records carry no watermark here; markers do."""

    def watermark_after(self, timestamp: int, value: Any) -> int:
        return self._watermark

    def admit(self, records: Sequence[Any], start: int, limit: int) -> int:
        """Alignment applies to the source partitions (stage 1), not here: take all."""
        return len(records) - start

    # -- snapshots ----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Plain data: the count, the watermark and per source ``[source, watermark,
        idle, spoke, applied position]``."""
        return {
            "count": self._count,
            "watermark": self._watermark,
            "sources": [
                [source, s.watermark, s.idle, s.spoke, s.applied]
                for source, s in sorted(self._sources.items())
            ],
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        self._count = int(snapshot["count"])
        self._watermark = int(snapshot["watermark"])
        self._sources = {}
        self._spoken = 0
        for source, watermark, idle, spoke, applied in snapshot["sources"]:
            state = self._sources[int(source)] = _Source()
            state.watermark = int(watermark)
            state.idle = bool(idle)
            state.spoke = bool(spoke)
            state.applied = int(applied)
            self._spoken += state.spoke
