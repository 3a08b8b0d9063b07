"""The outer regular join: Flink's unbounded LEFT, RIGHT and FULL OUTER join of two
append-only streams, emitted as an upsert stream.

``FROM a LEFT JOIN b ON a.x = b.y`` without time bounds (Flink's ``StreamingJoinOperator``
with an outer side): nothing ever says a partner can no longer come, so a row of an outer
side that finds no partner is emitted **padded at once** (NULL for the other side), and
when its first partner arrives the padded row is **deleted** and the joined rows emitted,
as Flink retracts it (``-D`` of the padded row, then ``+I`` of the joined ones). The output
is therefore not append-only but an upsert stream (docs/pipeline-spec.md, "Outer regular
joins"), made of :class:`~service.operators.base.Upsert` rows:

- each output row has a stable identity, the positions of the rows it is made of with
  ``none`` for a padded side: its name (the Upsert's ``key`` and the Kafka key)
  ``<join key>|<left position>|<right position>``, its ``id`` ``<pipeline>|<name>`` (the
  inner join's row id). A replay and a restore make the same names;
- a joined row is emitted once, with ``seq`` 0; a padded row is upserted with ``seq`` 0
  and, when its row's first partner arrives, deleted (a tombstone, ``seq`` 1). The
  ``seq`` of every row follows from the row's ``matched`` flag, which is checkpointed
  with the row, so no counter per output row is kept.

Folded (the newest value per name, a tombstone deleting it), the stream is the SQL
outer join of the whole input: every matched pair, and each row of an outer side that
never matched, padded.

**State TTL** (``state_ttl_ms``) drops rows as the inner regular join does (event time,
``ts + state_ttl_ms <= W``) and, as Flink's state TTL, **silently**: no output row is
retracted when a row it was made of expires. The output keeps the joined rows, and a
padded row whose row expired unmatched stays padded; a later row that would have
matched an expired one finds nothing and is padded itself (if its side is outer). The
folded table is then the SQL answer over the rows each row met while held (Flink's
results under a TTL: "eventually inaccurate" beyond it).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

from service.core.state_cache import StateMaps
from service.operators.base import FailedRecord, InputRecord, Upsert
from service.operators.join.checkpoint import parse_side_entry
from service.operators.join.interval import TimeSortedRows
from service.operators.join.projection import REASON_SELECT
from service.operators.join.regular import RegularJoinOperator
from service.operators.join.rows import How, Projection, Side, both_sides
from service.operators.steps.errors import EvalError

__all__ = ["MATCHED", "OuterRegularJoinOperator", "row_name"]

MATCHED = 3
"""A held row is ``[ts, position, value, matched]``: whether a partner ever arrived."""


def row_name(key: str, left: int | None, right: int | None) -> str:
    """``<key>|<left position>|<right position>``, ``none`` for a padded side: an output
    row's Kafka key (its ``id`` is ``<pipeline>|`` and this)."""
    lpos = "none" if left is None else str(left)
    rpos = "none" if right is None else str(right)
    return f"{key}|{lpos}|{rpos}"


class OuterRegularJoinOperator(RegularJoinOperator):
    """One partition's outer regular join (see the module docstring)."""

    hows = (How.LEFT, How.RIGHT, How.FULL)

    def __init__(
        self,
        pipeline: str,
        how: How,
        state_ttl_ms: int | None = None,
        project: Projection = both_sides,
        inputs: tuple[str, str] = ("left", "right"),
        late_output: bool = True,
        state_maps: StateMaps | None = None,
    ) -> None:
        super().__init__(pipeline, how, state_ttl_ms, project, inputs, late_output, state_maps)
        self._pads = (how.pads(Side.LEFT), how.pads(Side.RIGHT))
        self._prefix = f"{pipeline}|"
        self._results = self.collector.results

    # -- output ---------------------------------------------------------------------------
    def _upsert(
        self, key: str, ts: int, lpos: int | None, left: Any, rpos: int | None, right: Any
    ) -> None:
        """The row of ``left`` and ``right`` (a padded side: position and value None),
        ``seq`` 0; its ``select`` failing, a dead letter instead; nothing when the join's
        ``where`` drops it (an Upsert of None would be a tombstone)."""
        name = row_name(key, lpos, rpos)
        try:
            value = self._project(left, right, None)
        except EvalError as exc:
            self.collector.failed.append(
                FailedRecord(None, key, REASON_SELECT, f"{exc} ({self._prefix}{name})")
            )
            return
        if value is not None:  # None: the join's where drops the row, never in the table
            self._results.append(Upsert(self._prefix + name, name, value, 0, ts))

    def _delete_padded(self, side: int, key: str, position: int, ts: int) -> None:
        """The tombstone of ``side``'s row at ``position`` padded (its ``seq`` 1)."""
        left = side == Side.LEFT
        name = row_name(key, position if left else None, None if left else position)
        self._results.append(Upsert(self._prefix + name, name, None, 1, ts))

    # -- input ----------------------------------------------------------------------------
    def _process(self, side: Side, records: Sequence[InputRecord]) -> None:
        self._results = self.collector.results  # the runtime may have swapped the list
        mine = self._sides[side]
        theirs = self._sides[1 - side]
        other = 1 - side
        dirty = self._dirty
        upsert = self._upsert
        ttl = self.ttl
        watermark = self._watermark
        pads = self._pads[side]
        partner_pads = self._pads[other]
        left_side = side is Side.LEFT
        mark_mine = mine.mark_dirty if self._cached else None
        mark_theirs = theirs.mark_dirty if self._cached else None
        added = 0
        for key, ts, value, position, _source in records:
            partners = theirs.get(key)
            matched = partners is not None
            if partners is not None:
                for partner in partners.rows:
                    pts = partner[0]
                    top = ts if ts >= pts else pts
                    if partner_pads and not partner[MATCHED]:
                        partner[MATCHED] = True
                        dirty.add((other, key))
                        if mark_theirs is not None:
                            mark_theirs(key)
                        self._delete_padded(other, key, partner[1], top)
                    if left_side:
                        upsert(key, top, position, value, partner[1], partner[2])
                    else:
                        upsert(key, top, partner[1], partner[2], position, value)
            elif pads:
                if left_side:
                    upsert(key, ts, position, value, None, None)
                else:
                    upsert(key, ts, None, None, position, value)
            if ttl is not None and ts + ttl <= watermark:
                continue  # expired already: joined with what is held, not kept
            rows = mine.get(key)
            if rows is None:
                rows = self._new_rows(side, key, partners is None)
            if ttl is not None and (not rows.times or ts < rows.times[0]):
                heapq.heappush(self._expiry, (ts + ttl, side, key))
            rows.add([ts, position, value, matched])
            if mark_mine is not None:
                mark_mine(key)
            added += 1
            dirty.add((side, key))
        self._held[side] += added

    # -- checkpoint hooks -----------------------------------------------------------------
    def _restore_entry(self, name: str, value: Any) -> None:
        side, key = parse_side_entry(name)
        if value is None:
            self._put_rows(side, key, None)
            return
        rows = TimeSortedRows(written=True)
        for ts, position, row_value, matched in value:
            rows.add([int(ts), int(position), row_value, bool(matched)])
        self._put_rows(side, key, rows)
        if self.ttl is not None and rows.times and not self._cached:
            heapq.heappush(self._expiry, (rows.times[0] + self.ttl, side, key))
