"""The lookup join: Kafka Streams' stream/global-table join (Flink's lookup join).

The right input is a table: a compacted topic that every replica reads whole into
memory (:class:`LookupTable`) before the left input starts, and then follows live. It
is never shuffled and needs no co-partitioning: every replica holds every row. A left
row is joined **at once**, with the table row of its key present at that moment:
``inner`` emits only the rows that found one, ``left`` also the others padded with
NULLs; every output row is timestamped with its left row's time.

The moment is **processing time**: which version of a table row a left row meets
depends on how far the replica has read the table, not on event time (what the
``temporal`` join is for). A replay of the left input can meet a newer version, so a
row's id names its left row alone (the right position is ``none``): de-duplication by
id keeps one row per left row. Nothing is late and nothing waits for the watermark.

A table row is the newest record of its key (the right input's key); a tombstone (the
value None, :class:`~service.runtime.partition.decoding.TableDecoder`) deletes it. The
table holds at most ``max_rows`` keys: one more raises :class:`LookupTableFull`, and the
pipeline fails with that reason rather than miss rows silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.operators.base import InputRecord, OperatorGauges
from service.operators.join.base import JoinOperator
from service.operators.join.kinds import JOIN_KINDS
from service.operators.join.rows import How, JoinConfigError, Projection, Side, both_sides

SOURCE_BITS = 16
"""A left row's position in an id: ``position << 16 | source partition number``, as a
shuffled join's rows carry it, so ids stay unique across the left's partitions."""


class LookupTableFull(RuntimeError):
    """The table has more keys than its ``max_rows``."""


class LookupTable:
    """One replica's copy of a lookup join's table: the newest value of every key.

    Shared by every partition's operator of the pipeline on this replica; written only
    by the runtime's table reader, between the loop's batches."""

    __slots__ = ("input", "loaded", "max_rows", "rows", "updates")

    def __init__(self, input_name: str, max_rows: int) -> None:
        if max_rows < 1:
            raise JoinConfigError("max_rows must be at least 1")
        self.input = input_name
        self.max_rows = max_rows
        self.rows: dict[str, Any] = {}
        self.loaded = False
        """The whole topic, as it was when reading started, has been read."""
        self.updates = 0
        """Records applied (upserts and tombstones), for metrics."""

    def __len__(self) -> int:
        return len(self.rows)

    def apply(self, records: Sequence[InputRecord]) -> None:
        """Upsert each record's value under its key; a None value deletes the key.

        Raises :class:`LookupTableFull` at the first record that makes the table hold
        more than ``max_rows`` keys (the records before it are applied)."""
        rows = self.rows
        limit = self.max_rows
        for key, _, value, _, _ in records:
            self.updates += 1
            if value is None:
                rows.pop(key, None)
                continue
            rows[key] = value
            if len(rows) > limit:
                raise LookupTableFull(
                    f"lookup table {self.input!r} has more than max_rows={limit} keys "
                    f"(key {key!r} is one too many): raise max_rows, or compact the topic"
                )


class LookupJoinOperator(JoinOperator):
    """One source partition's lookup join over the replica's table (see the module
    docstring). Its input is the left input alone, through :meth:`process_batch`."""

    kind = "lookup"

    def __init__(
        self,
        pipeline: str,
        how: How,
        table: LookupTable,
        project: Projection = both_sides,
        inputs: tuple[str, str] = ("left", "right"),
        source: int = 0,
    ) -> None:
        """``source``: the number of the left partition this instance reads (ids)."""
        # Defensive only: the spec's rules refuse this first (join_how_fits_kind, in
        # pipeline_spec/rules/joins.py), so no spec reaches it; it guards a direct
        # construction (tests, benchmarks). The hows are kinds.py's list.
        if how not in JOIN_KINDS[self.kind].hows:
            raise JoinConfigError(f"a lookup join is inner or left, not {how}")
        super().__init__(pipeline, how, 0, project, inputs, late_output=False)
        self.table = table
        self._source = source

    def process_batch(self, records: Sequence[InputRecord]) -> None:
        """Left rows: the stage reads only the left input (the table has a reader)."""
        self._process(Side.LEFT, records)

    def _process(self, side: Side, records: Sequence[InputRecord]) -> None:
        if side is Side.RIGHT:  # table updates, as the table reader applies them
            self.table.apply(records)
            return
        rows = self.table.rows
        emit = self._emit
        pad = self.how is How.LEFT
        source = self._source
        for key, ts, value, position, _ in records:
            found = rows.get(key)
            if found is not None:
                emit(key, ts, position << SOURCE_BITS | source, value, None, found)
            elif pad:
                emit(key, ts, position << SOURCE_BITS | source, value, None, None)

    def advance_watermark(self, watermark: int) -> None:
        """Recorded for status; a lookup join waits for nothing."""
        if watermark > self._watermark:
            self._watermark = watermark

    def rows_held(self, side: Side) -> int:
        """None per partition: the table is the replica's (its reader counts it)."""
        return 0

    def gauges(self) -> OperatorGauges:
        return OperatorGauges(event_timers=0, processing_timers=0, windows_open=0, keys=0)

    # -- checkpoint hooks: only the watermark (``meta``); the table is read again -------
    def _pieces(self) -> tuple[()]:
        return ()

    def _clear(self) -> None:
        return None

    def _restore_entry(self, name: str, value: Any) -> None:
        raise JoinConfigError(f"unknown lookup join checkpoint entry {name!r}")
