"""The running aggregate over a table source (``source.changelog: "upsert"``, #50).

Its input is a table's changelog: each record is a row keyed by its primary key (the
record's key, the Kafka key); a key's new value replaces its old one, and a value of
None (a tombstone) deletes it. The aggregate takes back the old value's contribution
before it adds the new one (:mod:`.retracting`), so each group's result is always the
aggregate of the table's current rows (Flink's ``GroupAggregate`` behind a
``ChangelogNormalize``, Kafka Streams' ``KGroupedTable.aggregate``).

The operator remembers each primary key's last row (its group and the values the
aggregations read: the state a retraction needs), checkpointed beside the groups. A row
names its group with ``group_field`` (None: the group is the primary key). A row whose
group changes is taken back from the old group and added to the new one; both emit.
Within one partition that is exact for any group. Across partitions every row of a group
must come to one partition, and a row that leaves a partition must be taken back there:
grouped by the primary key nothing is shuffled (each version of a key is in its source
partition); grouped by a field, stage 1 of the retraction shuffle
(``runtime/shuffle/table_writer.py``) routes each version to its group's partition keyed
by its primary key, and sends the key's delete to the partition its last version went
to (docs/semantics.md section 11).

A group whose last row goes emits a delete (a tombstone, if it ever emitted), as Flink's
does when its row count reaches 0; a row identical to the one it replaces changes
nothing. A row with a value an aggregation cannot take is, under ``on_bad_value:
dead_letter``, dead-lettered and taken as the primary key's delete (the row is not in the
table the results describe); under ``skip`` that field is NULL.

Emission, ``seq``, mini-batch, exactly-once and the state TTL are the running
aggregate's (:mod:`.running`); a group expired by the TTL is forgotten, and a later
retraction of one of its rows finds nothing to take back (as in Flink, a TTL shorter than
the table's rows' life makes results approximate).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from service.core.paths import MISSING, PathGetter, compile_path, key_text
from service.core.state_cache import StateCache, StateMaps
from service.operators.base import InputRecord, Upsert
from service.operators.window.aggregations import encode_distinct, parse_aggregations
from service.operators.window.errors import WindowStateError

from .retracting import RetractingPlan
from .running import (
    ACC_BASE,
    SEQ_SLOT,
    TS_SLOT,
    RunningAggregateConfig,
    RunningAggregateOperator,
)

__all__ = ["TableAggregateOperator", "group_of"]

_ROWS = ACC_BASE
"""Slot: the group's rows (a group with none left is deleted)."""
ROW_PREFIX = "r"


def group_of(value: Any, path: PathGetter) -> str | None:
    """The group a table row names at ``path`` (as a payload key's text); None: it names
    none (a missing, null or structured value), and the row is in no group."""
    raw = path(value)
    if raw is MISSING:
        return None
    return key_text(raw)


class _AccCodec:
    """A group's accumulator to and from RocksDB (a
    :class:`~service.core.state_cache.StateCodec`): its checkpoint form (Fractions as
    text), :meth:`RetractingPlan.dump` and :meth:`RetractingPlan.load`."""

    __slots__ = ("_plan",)

    def __init__(self, plan: RetractingPlan) -> None:
        self._plan = plan

    def encode(self, acc: list[Any]) -> list[Any]:
        return self._plan.dump(acc)

    def decode(self, data: list[Any]) -> list[Any]:
        return self._plan.load(data)


class TableAggregateOperator(RunningAggregateOperator):
    """One partition's running aggregates over a table's changelog (module docstring).

    With the rocksdb state backend the groups' accumulators are the named map
    ``"groups"`` (in RocksDB in their checkpoint form: :class:`_AccCodec`) and the rows
    the map ``"rows"``."""

    __slots__ = ("_group_path", "_rows", "_rows_changed", "retracting")

    def __init__(self, config: RunningAggregateConfig, group_field: str | None = None) -> None:
        self.retracting = RetractingPlan(parse_aggregations(config.aggregations), ACC_BASE + 1)
        self._group_path = compile_path(group_field) if group_field is not None else None
        self._rows: dict[str, list[Any]] = (
            {} if config.state_map is None else cast(dict[str, list[Any]], config.state_map("rows"))
        )
        """Primary key -> its row: ``[group, *the values the aggregations read]`` (with the
        rocksdb backend a :class:`~service.core.state_cache.StateCache`)."""
        self._rows_changed: set[str] = set()
        super().__init__(config)

    def _key_map(self, maps: StateMaps) -> StateCache:
        return maps("groups", _AccCodec(self.retracting))

    def _from_entry(self, acc: list[Any]) -> list[Any]:
        return self.retracting.load(acc)

    def _from_decoded(self, acc: list[Any]) -> list[Any]:
        return self.retracting.load(acc)

    def state_maps(self) -> list[StateCache]:
        maps = super().state_maps()
        if maps:
            maps.append(cast(StateCache, self._rows))
        return maps

    # -- the batch loop ------------------------------------------------------------------
    def _compile(self) -> Callable[[Sequence[InputRecord]], None]:
        return self._apply

    def _apply(self, records: Sequence[InputRecord]) -> None:
        """Each version: its old row taken back from its group, the new one added to its
        own (inline: a table's rows are this operator's hot path)."""
        rows = self._rows
        keys = self._keys
        mark = None if type(keys) is dict else keys.mark_dirty
        pending = self._pending
        touched = self._touched if self._ttl is not None else None
        update = self.retracting.update
        initial = self.retracting.initial
        row_of = self.retracting.row
        has_bad = self.plan.has_bad
        path = self._group_path
        changed = self._rows_changed
        for pk, ts, value, _position, source in records:
            old = rows.get(pk)
            new: list[Any] | None = None
            if value is not None and not (
                has_bad is not None and has_bad(value) and self._reject(pk, value, source)
            ):
                group = pk if path is None else group_of(value, path)
                if group is not None:
                    new = row_of(value, group)
            if new == old and (new is None or encode_distinct(new) == encode_distinct(old)):
                continue  # the same row (as JSON: 1 is not 1.0, nor True)
            if old is not None:
                group = old[0]
                acc = keys.get(group)
                if acc is not None:  # else expired by the TTL: nothing to take back
                    if ts > acc[TS_SLOT]:
                        acc[TS_SLOT] = ts
                    acc[_ROWS] -= 1
                    update(acc, old, -1)
                    if mark is not None:
                        mark(group)
                    pending[group] = None
                    if touched is not None:
                        touched[group] = None
            if new is None:
                rows.pop(pk, None)
            else:
                group = new[0]
                acc = keys.get(group)
                if acc is None:
                    acc = keys[group] = [0, ts, 0, 0, *initial()]
                elif ts > acc[TS_SLOT]:
                    acc[TS_SLOT] = ts
                acc[_ROWS] += 1
                update(acc, new, 1)
                if mark is not None:
                    mark(group)
                pending[group] = None
                if touched is not None:
                    touched[group] = None
                rows[pk] = new
            changed.add(pk)

    def _compile_emit(self) -> Callable[[Mapping[str, None], Callable[[Upsert], None]], None]:
        return self._emit_groups

    def _emit_groups(self, pending: Mapping[str, None], append: Callable[[Upsert], None]) -> None:
        keys = self._keys
        prefix = self._prefix
        result = self.retracting.result
        for group in pending:
            acc = keys[group]
            seq = acc[SEQ_SLOT]
            if acc[_ROWS] <= 0:  # its last row went: the group is deleted
                del keys[group]
                self._touched.pop(group, None)
                if seq:
                    append(Upsert(prefix + group, group, None, seq, acc[TS_SLOT]))
                continue
            acc[SEQ_SLOT] = seq + 1
            if type(keys) is not dict:
                keys.mark_dirty(group)
            append(Upsert(prefix + group, group, result(acc), seq, acc[TS_SLOT]))

    def _row(self, acc: list[Any]) -> dict[str, Any] | None:
        """A group's row, over the table's current rows; None once its last row went
        (its delete not emitted yet)."""
        if acc[_ROWS] <= 0:
            return None
        return {
            "result": self.retracting.result(acc),
            "timestamp": acc[TS_SLOT],
            "emitted": acc[SEQ_SLOT],
        }

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out["rows"] = len(self._rows)
        return out

    # -- checkpoints ---------------------------------------------------------------------
    def _entry(self, key: str) -> dict[str, Any] | None:
        keys = self._keys
        if type(keys) is dict:
            acc = keys.get(key)
            dumped = None if acc is None else self.retracting.dump(acc)
        else:  # the store's form is the dump; an evicted key is not read back in
            dumped = keys.peek(key)
        if dumped is None:
            return None
        return {
            "acc": dumped,
            "dirty": key in self._pending,
            "touched": key in self._touched,
        }

    def snapshot(self) -> dict[str, Any]:
        out = super().snapshot()
        out["rows"] = {pk: list(row) for pk, row in self._rows.items()}
        return out

    def restore(self, snapshot: dict[str, Any]) -> None:
        super().restore(snapshot)
        self._rows.clear()
        for pk, row in snapshot.get("rows", {}).items():
            self._rows[pk] = list(row)

    def snapshot_changes(self) -> dict[str, Any]:
        changes = super().snapshot_changes()
        rows = self._rows
        for pk in self._rows_changed:
            row = rows.get(pk)
            changes[ROW_PREFIX + pk] = None if row is None else list(row)
        self._rows_changed.clear()
        return changes

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        groups: list[tuple[str, Any]] = []
        rows: dict[str, Any] = {}
        for name, value in entries:
            if name.startswith(ROW_PREFIX):
                rows[name[len(ROW_PREFIX) :]] = value
            else:
                groups.append((name, value))
        super().restore_changes(groups)
        if type(self._rows) is dict:
            self._rows.clear()
        # else (the rocksdb backend) the store holds the rows up to where the entries start
        for pk, row in rows.items():
            if row is not None:
                self._rows[pk] = list(row)
            else:
                self._rows.pop(pk, None)

    def apply_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        """The rocksdb backend's streamed restore: the rows' entries applied onto the map
        ``"rows"``, the groups' onto the map ``"groups"`` (the running aggregate's
        :meth:`~RunningAggregateOperator.apply_changes`)."""
        rows = self._rows
        if type(rows) is dict:
            raise WindowStateError("apply_changes needs the rocksdb backend's state map")
        groups: list[tuple[str, Any]] = []
        cut = len(ROW_PREFIX)
        for name, value in entries:
            if name.startswith(ROW_PREFIX):
                if value is None:
                    rows.pop(name[cut:], None)
                else:
                    rows[name[cut:]] = value
            else:
                groups.append((name, value))
        super().apply_changes(groups)

    def _load(self, meta: dict[str, Any] | None, keys: list[tuple[str, Any]]) -> None:
        super()._load(meta, keys)
        self._rows_changed.clear()
