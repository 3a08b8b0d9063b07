"""The regular join of tables: one or both inputs are tables (``source.changelog:
"upsert"``), and the output is the joined table, as an upsert stream.

A table input is keyed by its primary key (the Kafka key), which is also the join key
(the spec's rule ``table_input_keyed_by_its_primary_key``): every version of a row comes
to the same partition, and a key holds at most one row of a table side. A record with a
value is the key's row now; a record with a null value (a tombstone) deletes it. A
stream input appends as in :mod:`.regular_outer`.

Output rows are :class:`~service.operators.base.Upsert` rows named
``<join key>|<left row>|<right row>``: a stream row by its position, a table row by
``table`` (the key's row, whatever its version), a padded side ``none``. So:

- a new version of a table row re-upserts its joined rows under the same names (or its
  padded row, on an outer side without partner): the old values are replaced;
- a tombstone deletes the joined rows of the old version (tombstones) and, for a partner
  on an outer side, upserts that partner padded again; the deleted row's own padded row
  (it had no partner) is deleted;
- a row's first partner deletes its padded row, as in the outer stream join.

``seq``: the join key's emissions so far (0, 1, 2, ...), one counter per join key shared
by all its output rows, checkpointed (``s:<key>``): each row's ``seq`` increases with
every change of it (not one by one), so the newest ``seq`` per name is its value. The
counter is dropped when the key holds no row on either side (every table row of it was
deleted): a row seen again then starts at 0, as a running aggregate's key does after
its delete.

**State TTL** drops stream rows only, silently (as :mod:`.regular_outer`); a table row
lives until its tombstone (a table is bounded by its primary keys).

With the rocksdb backend the counters are a third named map of the partition's
RocksDB (``seq``), beside the sides' (:mod:`.interval`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from typing import Any

from service.core.state_cache import StateCache, StateMaps
from service.operators.base import FailedRecord, InputRecord, Upsert
from service.operators.join.checkpoint import parse_side_entry, side_entry
from service.operators.join.interval import Row, TimeSortedRows
from service.operators.join.projection import REASON_SELECT
from service.operators.join.regular import RegularJoinOperator
from service.operators.join.regular_outer import MATCHED
from service.operators.join.rows import How, JoinConfigError, Projection, Side, both_sides
from service.operators.steps.errors import EvalError

__all__ = ["SEQ_PREFIX", "TABLE_ROW", "TableJoinOperator"]

TABLE_ROW = "table"
"""A table row's name in an output row's name: the key's row, whatever its version."""
SEQ_PREFIX = "s:"
"""The checkpoint entry of a join key's ``seq`` counter: ``s:<key>``."""
_SEQ = 2
"""The piece of state (``_dirty``) of a key's counter: ``(2, key)``."""
SEQ_MAP = "seq"
"""The counters' map in the partition's RocksDB (the rocksdb backend)."""


class TableJoinOperator(RegularJoinOperator):
    """One partition's regular join with a table input (see the module docstring)."""

    hows = (How.INNER, How.LEFT, How.RIGHT, How.FULL)

    def __init__(
        self,
        pipeline: str,
        how: How,
        tables: tuple[bool, bool],
        state_ttl_ms: int | None = None,
        project: Projection = both_sides,
        inputs: tuple[str, str] = ("left", "right"),
        late_output: bool = True,
        state_maps: StateMaps | None = None,
    ) -> None:
        if not any(tables):
            raise JoinConfigError("a join of tables has a table input")
        super().__init__(pipeline, how, state_ttl_ms, project, inputs, late_output, state_maps)
        self.tables = tables
        self._pads = (how.pads(Side.LEFT), how.pads(Side.RIGHT))
        self._prefix = f"{pipeline}|"
        self._seqs: Any = {} if state_maps is None else state_maps(SEQ_MAP)
        """Join key -> its next ``seq`` (a dict, or the rocksdb backend's cache)."""

    # -- output ---------------------------------------------------------------------------
    def _name(self, side: int, row: Row | None) -> str:
        if row is None:
            return "none"
        return TABLE_ROW if self.tables[side] else str(row[1])

    def _emit_row(
        self, key: str, ts: int, side: int, row: Row | None, partner: Row | None, delete: bool
    ) -> None:
        """The output row of ``row`` (of ``side``) and ``partner`` (the other side's; None:
        padded) upserted, or deleted; its ``seq`` the key's next."""
        left, right = (row, partner) if side == Side.LEFT else (partner, row)
        name = f"{key}|{self._name(0, left)}|{self._name(1, right)}"
        value: dict[str, Any] | None = None
        if not delete:
            try:
                value = self._project(
                    None if left is None else left[2], None if right is None else right[2], None
                )
            except EvalError as exc:
                self.collector.failed.append(
                    FailedRecord(None, key, REASON_SELECT, f"{exc} ({self._prefix}{name})")
                )
                return
        seq = self._seqs.get(key, 0)
        self._seqs[key] = seq + 1
        self._dirty.add((_SEQ, key))
        self.collector.results.append(Upsert(self._prefix + name, name, value, seq, ts))

    # -- input ----------------------------------------------------------------------------
    def _process(self, side: Side, records: Sequence[InputRecord]) -> None:
        table = self.tables[side]
        for key, ts, value, position, _source in records:
            if table:
                self._table_row(side, key, ts, value, position)
            else:
                self._stream_row(side, key, ts, value, position)

    def _meet(self, side: int, key: str, row: Row) -> bool:
        """A new row of ``side`` meets the other side's rows of ``key``: each partner's
        padded row deleted if it was padded, the joined rows upserted; ``row`` padded
        when it has no partner. Whether it had one."""
        other = 1 - side
        theirs = self._sides[other]
        partners = theirs.get(key)
        if partners is None:
            if self._pads[side]:
                self._emit_row(key, row[0], side, row, None, False)
            return False
        ts = row[0]
        for partner in partners.rows:
            top = ts if ts >= partner[0] else partner[0]
            if not partner[MATCHED]:
                partner[MATCHED] = True
                self._dirty.add((other, key))
                if self._cached:
                    theirs.mark_dirty(key)
                if self._pads[other]:
                    self._emit_row(key, top, other, partner, None, True)
            self._emit_row(key, top, side, row, partner, False)
        row[MATCHED] = True
        return True

    def _stream_row(self, side: Side, key: str, ts: int, value: Any, position: int) -> None:
        row: Row = [ts, position, value, False]
        partnered = self._meet(side, key, row)
        ttl = self.ttl
        if ttl is not None and ts + ttl <= self._watermark:
            self._forget_if_empty(key)  # expired already: met what is held, not kept
            return
        mine = self._sides[side]
        rows = mine.get(key)
        if rows is None:
            rows = self._new_rows(side, key, not partnered)
        if ttl is not None and (not rows.times or ts < rows.times[0]):
            heapq.heappush(self._expiry, (ts + ttl, side, key))
        rows.add(row)
        if self._cached:
            mine.mark_dirty(key)
        self._held[side] += 1
        self._dirty.add((side, key))

    def _table_row(self, side: Side, key: str, ts: int, value: Any, position: int) -> None:
        cached = self._cached
        mine = self._sides[side].get(key)
        old = mine.rows[0] if mine is not None else None
        other = 1 - side
        theirs = self._sides[other]
        partners = theirs.get(key)
        if value is None:  # a tombstone: the key's row deleted
            if mine is None or old is None:
                return
            if partners is not None:
                for partner in partners.rows:
                    top = ts if ts >= partner[0] else partner[0]
                    self._emit_row(key, top, side, old, partner, True)
                    partner[MATCHED] = False  # a table side holds one row: it was the one
                    if cached:
                        theirs.mark_dirty(key)
                    if self._pads[other]:
                        self._emit_row(key, partner[0], other, partner, None, False)
                self._dirty.add((other, key))
            elif self._pads[side] and not old[MATCHED]:
                self._emit_row(key, ts, side, old, None, True)
            self._drop_oldest(side, key, mine, 1)
            self._forget_if_empty(key)
            return
        if mine is None or old is None:  # a new row
            row: Row = [ts, position, value, False]
            self._meet(side, key, row)
            rows = self._new_rows(side, key, partners is None)
            rows.add(row)
            if cached:
                self._sides[side].mark_dirty(key)
            self._held[side] += 1
            self._dirty.add((side, key))
            return
        old[0], old[1], old[2] = ts, position, value  # a new version of the key's row
        mine.times[0] = ts
        if cached:  # got above; only the other side's map was used since
            self._sides[side].mark_dirty(key)
        self._dirty.add((side, key))
        if partners is not None:
            for partner in partners.rows:
                top = ts if ts >= partner[0] else partner[0]
                self._emit_row(key, top, side, old, partner, False)
        elif self._pads[side] and not old[MATCHED]:
            self._emit_row(key, ts, side, old, None, False)

    # -- state ----------------------------------------------------------------------------
    def _forget_if_empty(self, key: str) -> None:
        """Drop ``key``'s counter once neither side holds a row of it."""
        if key not in self._sides[0] and key not in self._sides[1] and key in self._seqs:
            del self._seqs[key]
            self._dirty.add((_SEQ, key))

    def _drop_oldest(self, side: int, key: str, rows: TimeSortedRows, count: int) -> bool:
        left = super()._drop_oldest(side, key, rows, count)
        if not left:
            self._forget_if_empty(key)
        return left

    # -- checkpoint hooks -----------------------------------------------------------------
    def _pieces(self) -> Iterator[tuple[int, str]]:
        yield from super()._pieces()
        for key in list(self._seqs.keys()):
            yield (_SEQ, key)

    def _entry(self, piece: tuple[int, str]) -> str:
        side, key = piece
        return SEQ_PREFIX + key if side == _SEQ else side_entry(side, key)

    def _encode(self, piece: tuple[int, str]) -> Any:
        side, key = piece
        if side == _SEQ:
            return self._seqs.get(key)
        return super()._encode(piece)

    def _clear(self) -> None:
        super()._clear()
        if self._cached:
            self._seqs.clear()
        else:
            self._seqs = {}

    def _expires_after(self, side: int) -> int | None:
        return None if self.tables[side] else self.ttl

    def state_maps(self) -> list[StateCache]:
        return [*super().state_maps(), self._seqs] if self._cached else []

    def _restore_entry(self, name: str, value: Any) -> None:
        if name.startswith(SEQ_PREFIX):
            key = name[len(SEQ_PREFIX) :]
            if value is None:
                self._seqs.pop(key, None)
            else:
                self._seqs[key] = int(value)
            return
        side, key = parse_side_entry(name)
        if value is None:
            self._put_rows(side, key, None)
            return
        rows = TimeSortedRows(written=True)
        for ts, position, row_value, matched in value:
            rows.add([int(ts), int(position), row_value, bool(matched)])
        self._put_rows(side, key, rows)
        if self.ttl is not None and rows.times and not self.tables[side] and not self._cached:
            heapq.heappush(self._expiry, (rows.times[0] + self.ttl, side, key))
