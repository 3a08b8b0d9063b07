"""Stage 1 of a running aggregate over a table grouped by another field: the retraction
shuffle (#50; docs/semantics.md section 11, "Tables as sources").

A table's rows come keyed by their primary key (the Kafka key), each primary key's
versions in one source partition (upsert-kafka's contract), but the aggregate groups
them by a field: stage 2 keeps each group in one shuffle partition. A row whose group
changes must leave the old group's partition, which never sees the new version. So this
writer, per source partition, remembers the shuffle partition each primary key's last
version went to (its state, checkpointed with the source offset), and:

- routes each version to its group's partition, with the primary key as the row's key
  (stage 2's :class:`~service.operators.table.TableAggregateOperator` keeps rows by
  primary key and finds the group in the value, as this writer does);
- when the version goes to another partition than the last one did, first writes the
  primary key's delete (a row without a value, Flink's ``-U``) to the old partition,
  whose operator takes the old version back;
- routes a tombstone (or a row naming no group) to the last partition only, and forgets
  the primary key; a tombstone for a key it never routed goes nowhere.

Within a partition, the operator takes a version that replaces one it holds back itself,
so the delete is needed only across partitions. The delete and the new version travel
in two partitions, so for a moment both groups may count the row (as in Flink); each
settles once both are applied. A replay from the checkpoint restores the map as it was
at that offset, and stage 2 drops the replayed frames it applied.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from service.core.frames import FrameRow
from service.core.paths import compile_path
from service.core.shuffle import INDEX_BITS
from service.operators.base import InputRecord, OperatorGauges
from service.operators.table.table_aggregate import group_of
from service.runtime.shuffle.writer import ShuffleWriter

__all__ = ["TableShuffleWriter"]

ENTRY_PREFIX = "p"


class TableShuffleWriter(ShuffleWriter):
    """Routes a table's versions by group, with the deletes a moved row needs."""

    __slots__ = ("_changed", "_group", "_last")

    def __init__(self, *args: Any, group_field: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._group = compile_path(group_field)
        self._last: dict[str, int] = {}
        """Primary key -> the shuffle partition its last version went to."""
        self._changed: set[str] = set()

    def process_batch(self, records: Sequence[InputRecord]) -> None:
        announced = self._announced
        if announced is not None and announced[1]:  # idle until now: active first
            self._mark(announced[0], False)
        partitioner = self._partitioner
        known = partitioner.known
        reencode = self._reencode
        shift = 0 if self._positioned else INDEX_BITS
        buckets: list[list[FrameRow]] = [[] for _ in range(partitioner.partitions)]
        last = self._last
        changed = self._changed
        group = self._group
        for pk, timestamp, value, at, record in records:
            before = last.get(pk)
            target: int | None = None
            if value is not None:
                name = group_of(value, group)
                if name is not None:
                    target = known.get(name)
                    if target is None:
                        target = partitioner(name)
            kafka = (record.key, record.timestamp, record.headers or ())
            if before is not None and before != target:
                # the old partition takes the old version back: the key's delete
                buckets[before].append((pk, timestamp, at << shift, None, *kafka))
            if target is None:
                if before is not None:
                    del last[pk]
                    changed.add(pk)
                continue
            buckets[target].append(
                (pk, timestamp, at << shift, value if reencode else record.value, *kafka)
            )
            if before != target:
                last[pk] = target
                changed.add(pk)
        self.routed += len(records)
        self._write(buckets)

    def gauges(self) -> OperatorGauges:
        """``keys``: the primary keys whose last partition this writer remembers."""
        return OperatorGauges(
            event_timers=0, processing_timers=0, windows_open=0, keys=len(self._last)
        )

    def snapshot(self) -> dict[str, Any]:
        out = super().snapshot()
        out["last"] = dict(self._last)
        return out

    def restore(self, snapshot: dict[str, Any]) -> None:
        super().restore(snapshot)
        self._last = {pk: int(p) for pk, p in snapshot.get("last", {}).items()}
        self._changed.clear()

    def snapshot_changes(self) -> dict[str, Any]:
        last = self._last
        changes = {ENTRY_PREFIX + pk: last.get(pk) for pk in self._changed}
        self._changed.clear()
        return changes

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        last: dict[str, int] = {}
        for name, value in entries:
            if not name.startswith(ENTRY_PREFIX):
                continue
            pk = name[len(ENTRY_PREFIX) :]
            if value is None:
                last.pop(pk, None)
            else:
                last[pk] = int(value)
        self._last = last
        self._changed.clear()
