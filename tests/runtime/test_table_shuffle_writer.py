"""Stage 1 of a table grouped by a field (runtime/shuffle/table_writer.py): each version
goes to its group's partition keyed by its primary key; a version that moves to another
partition, a tombstone and a row naming no group first send the primary key's delete to
where its last version went; the map is checkpointed. With stage 2's table aggregate per
shuffle partition, any sequence of versions folds to the aggregate of the final table."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.core.frames import FrameRow
from service.core.partitioner import KeyPartitioner
from service.core.time import ManualClock
from service.operators.base import Upsert
from service.operators.table import TableAggregateOperator
from service.operators.table.running import RunningAggregateConfig
from service.runtime.shuffle.table_writer import TableShuffleWriter

PARTITIONS = 4


class Fetched(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes], ...] = ()


class Captured(TableShuffleWriter):
    """The writer with its frames kept as rows per target partition."""

    __slots__ = ("written",)

    def __init__(self) -> None:
        super().__init__(
            lambda: None,  # type: ignore[arg-type,return-value]
            "shuffle",
            KeyPartitioner(PARTITIONS),
            0,
            1,
            group_field="customer",
            reencode=True,
        )
        self.written: list[list[FrameRow]] = [[] for _ in range(PARTITIONS)]

    def _write(self, buckets: list[list[FrameRow]]) -> None:
        for target, rows in enumerate(buckets):
            self.written[target].extend(rows)

    def take(self) -> list[list[FrameRow]]:
        out, self.written = self.written, [[] for _ in range(PARTITIONS)]
        return out


def version(offset: int, pk: str, customer: str | None, amount: int = 1) -> Any:
    value = None if customer is None and amount < 0 else {"customer": customer, "amount": amount}
    return (pk, offset, value, offset, Fetched(offset, pk.encode(), orjson.dumps(value), offset))


def tombstone(offset: int, pk: str) -> Any:
    return (pk, offset, None, offset, Fetched(offset, pk.encode(), None, offset))


def partition_of(group: str) -> int:
    return KeyPartitioner(PARTITIONS)(group)


def two_groups_apart() -> tuple[str, str]:
    names = [f"c{i}" for i in range(50)]
    first = names[0]
    second = next(n for n in names if partition_of(n) != partition_of(first))
    return first, second


def test_a_moved_row_sends_its_delete_to_the_old_partition() -> None:
    a, b = two_groups_apart()
    writer = Captured()
    writer.process_batch([version(0, "o1", a)])
    first = writer.take()
    assert [(r[0], r[3]) for r in first[partition_of(a)]] == [("o1", {"customer": a, "amount": 1})]
    writer.process_batch([version(1, "o1", b)])
    moved = writer.take()
    assert [(r[0], r[3]) for r in moved[partition_of(a)]] == [("o1", None)]
    assert [r[0] for r in moved[partition_of(b)]] == ["o1"]


def test_a_version_in_the_same_partition_sends_no_delete() -> None:
    a, _ = two_groups_apart()
    writer = Captured()
    writer.process_batch([version(0, "o1", a), version(1, "o1", a, amount=5)])
    rows = writer.take()[partition_of(a)]
    assert [r[3] for r in rows] == [{"customer": a, "amount": 1}, {"customer": a, "amount": 5}]


def test_a_tombstone_goes_where_the_last_version_went_and_an_unknown_one_nowhere() -> None:
    a, _ = two_groups_apart()
    writer = Captured()
    writer.process_batch([tombstone(0, "never"), version(1, "o1", a), tombstone(2, "o1")])
    written = writer.take()
    assert sum(len(rows) for rows in written) == 2
    assert [(r[0], r[3]) for r in written[partition_of(a)]][-1] == ("o1", None)
    writer.process_batch([tombstone(3, "o1")])
    assert sum(len(rows) for rows in writer.take()) == 0


def test_the_map_is_checkpointed() -> None:
    a, b = two_groups_apart()
    writer = Captured()
    writer.process_batch([version(0, "o1", a), version(1, "o2", b), tombstone(2, "o2")])
    changes = orjson.loads(orjson.dumps(writer.snapshot_changes()))
    restored = Captured()
    restored.restore_changes(changes.items())
    restored.process_batch([version(3, "o1", b)])
    assert [(r[0], r[3]) for r in restored.take()[partition_of(a)]] == [("o1", None)]
    assert writer.snapshot_changes() == {}


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["o1", "o2", "o3", "o4"]),
        st.one_of(st.none(), st.sampled_from([f"c{i}" for i in range(6)])),
        st.integers(-3, 9),
        st.sampled_from(["upsert", "upsert", "delete", "restore"]),
    ),
    max_size=40,
)


@seed(50)
@settings(max_examples=200, deadline=None)
@given(STEPS)
def test_stage_one_and_two_fold_to_the_final_tables_aggregate(steps: list[Any]) -> None:
    """Versions by primary key through the writer (rebuilt from its checkpoints now and
    then), each partition's rows into its own table aggregate grouped by the field (in
    any order between partitions): the folded upserts equal the totals per customer over
    the final table."""
    writer = Captured()
    config = RunningAggregateConfig(
        pipeline="p",
        aggregations={"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
        clock=ManualClock(0),
    )
    stage2 = [TableAggregateOperator(config, group_field="customer") for _ in range(PARTITIONS)]
    table: dict[str, tuple[str, int]] = {}
    checkpoint: dict[str, Any] = {}
    for offset, (pk, customer, amount, kind) in enumerate(steps):
        if kind == "restore":  # stage 1 checkpointed, then rebuilt from its changelog
            routed = writer.take()
            checkpoint.update(orjson.loads(orjson.dumps(writer.snapshot_changes())))
            writer = Captured()
            writer.restore_changes(checkpoint.items())
            writer.written = routed
            continue
        if kind == "delete" or customer is None:
            writer.process_batch([tombstone(offset, pk)])
            table.pop(pk, None)
        else:
            writer.process_batch([version(offset, pk, customer, amount)])
            table[pk] = (customer, amount)
    for target, rows in enumerate(writer.take()):
        stage2[target].process_batch([(pk, ts, value, at, None) for pk, ts, at, value, *_ in rows])
    folded: dict[str, Any] = {}
    for op in reversed(stage2):  # partitions settle in any order
        op._emit_pending()
        results, _, failed = op.collector.drain()
        assert not failed
        for u in results:
            assert isinstance(u, Upsert)
            if u.result is None:
                folded.pop(u.key, None)
            else:
                folded[u.key] = u.result
    want: dict[str, dict[str, int]] = {}
    for customer, amount in table.values():
        got = want.setdefault(customer, {"n": 0, "total": 0})
        got["n"] += 1
        got["total"] += amount
    assert folded == want
