"""The regular join: Flink's unbounded inner join of two append-only streams.

``FROM a JOIN b ON a.x = b.y`` without time bounds (Flink's ``StreamingJoinOperator``
for two insert-only inputs): every row is kept, per key and side, and each arriving row
is emitted at once joined with every stored row of the other side with the same key,
timestamped ``max(l.ts, r.ts)``. The output is append-only because the join is inner. An
outer join emits a padded row and later deletes it when a partner arrives: that is
:class:`~service.operators.join.regular_outer.OuterRegularJoinOperator`, this class's
subclass, whose output is an upsert stream.

Nothing is late (no time condition says a partner can no longer come): the watermark
only bounds the state, through the optional **state TTL** (Flink's
``table.exec.state.ttl``, idle-state retention). With ``state_ttl_ms`` a row is dropped
once the join's watermark ``W`` reaches ``ts + state_ttl_ms``; a row arriving when that
is already so is joined with the rows held but not kept. Flink counts the TTL in
processing time from the row's write; here it is event time from the row's timestamp,
so a replay and a restore drop exactly the same rows (every pair of rows at most
``state_ttl_ms`` apart is still joined). Without it the state grows with the input, as
in Flink without a TTL.

State per key and side is a list of rows sorted by time (:class:`TimeSortedRows`, the
interval join's), so the rows a watermark expires are a prefix; one heap entry per key
and side, at the expiry of its oldest row, finds them. With the rocksdb backend the
rows are in the partition's RocksDB and the heap stays in memory, as the interval
join's (:mod:`.interval`).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

from service.core.state_cache import StateMaps
from service.operators.base import InputRecord
from service.operators.join.checkpoint import parse_side_entry
from service.operators.join.interval import RowsPerSideJoin, TimeSortedRows
from service.operators.join.rows import How, JoinConfigError, Projection, Side, both_sides


class RegularJoinOperator(RowsPerSideJoin):
    """One partition's regular (unbounded) inner join (see the module docstring)."""

    kind = "regular"
    hows: tuple[How, ...] = (How.INNER,)
    """The ``how`` this class builds (the outer ones: :mod:`.regular_outer`)."""

    def __init__(
        self,
        pipeline: str,
        how: How = How.INNER,
        state_ttl_ms: int | None = None,
        project: Projection = both_sides,
        inputs: tuple[str, str] = ("left", "right"),
        late_output: bool = True,
        state_maps: StateMaps | None = None,
    ) -> None:
        """``state_maps``: the rocksdb backend's named maps (None: memory)."""
        # Defensive only: the spec refuses both first (the rule join_how_fits_kind, in
        # pipeline_spec/rules/joins.py; state_ttl_ms's range, the model), so no spec
        # reaches them; they guard a direct construction (tests, benchmarks). The
        # factory builds an inner join here and an outer one as OuterRegularJoinOperator.
        if how not in self.hows:
            raise JoinConfigError(f"a {type(self).__name__} is {' | '.join(self.hows)}, not {how}")
        if state_ttl_ms is not None and state_ttl_ms < 1:
            raise JoinConfigError(f"state_ttl_ms must be positive, not {state_ttl_ms}")
        super().__init__(pipeline, how, 0, project, inputs, late_output)
        self.ttl = state_ttl_ms
        self._init_rows(state_maps)  # the expiry heap is used with a TTL only

    # -- input ----------------------------------------------------------------------------
    def _process(self, side: Side, records: Sequence[InputRecord]) -> None:
        mine = self._sides[side]
        theirs = self._sides[1 - side]
        dirty = self._dirty
        emit = self._emit
        ttl = self.ttl
        watermark = self._watermark
        left_side = side is Side.LEFT
        mark_mine = mine.mark_dirty if self._cached else None
        added = 0
        for key, ts, value, position, _source in records:
            partners = theirs.get(key)
            if partners is not None:
                for pts, ppos, pvalue in partners.rows:
                    if left_side:
                        emit(key, ts if ts >= pts else pts, position, value, ppos, pvalue)
                    else:
                        emit(key, ts if ts >= pts else pts, ppos, pvalue, position, value)
            if ttl is not None and ts + ttl <= watermark:
                continue  # expired already: joined with what is held, not kept
            rows = mine.get(key)
            if rows is None:
                rows = self._new_rows(side, key, partners is None)
            if ttl is not None and (not rows.times or ts < rows.times[0]):
                heapq.heappush(self._expiry, (ts + ttl, side, key))
            rows.add([ts, position, value])
            if mark_mine is not None:
                mark_mine(key)
            added += 1
            dirty.add((side, key))
        self._held[side] += added

    # -- time -----------------------------------------------------------------------------
    def advance_watermark(self, watermark: int) -> None:
        """With a TTL: drop every row with ``ts + state_ttl_ms <= watermark``."""
        if watermark <= self._watermark:
            return
        self._watermark = watermark
        if self.ttl is None:
            return
        expiry = self._expiry
        ttl = self.ttl
        while expiry and expiry[0][0] <= watermark:
            due, side, key = heapq.heappop(expiry)
            rows = self._sides[side].get(key)
            if rows is None or rows.times[0] + ttl != due:
                continue  # stale: the key's oldest row changed since this entry
            count = bisect_right(rows.times, watermark - ttl)
            if self._drop_oldest(side, key, rows, count):
                heapq.heappush(expiry, (rows.times[0] + ttl, side, key))

    # -- checkpoint hooks -----------------------------------------------------------------
    def _expires_after(self, side: int) -> int | None:
        return self.ttl

    def _restore_entry(self, name: str, value: Any) -> None:
        side, key = parse_side_entry(name)
        if value is None:
            self._put_rows(side, key, None)
            return
        rows = TimeSortedRows(written=True)
        for ts, position, row_value in value:
            rows.add([int(ts), int(position), row_value])
        self._put_rows(side, key, rows)
        if self.ttl is not None and rows.times and not self._cached:
            heapq.heappush(self._expiry, (rows.times[0] + self.ttl, side, key))
