"""Top-N over a table source (operators/table/top_n.py, ``table``): a row is its primary
key's newest version, replaced (in its partition or another) and deleted by a
tombstone; ranks it leaves are taken by the next rows or deleted; and any sequence of
upserts and deletes, across ticks, checkpoints and restores, folds to the Top-N
recomputed from the current table (Flink's ``RetractableTopNFunction``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.core.state_cache import StateMaps
from service.core.time import MAX_TIMESTAMP, ManualClock
from service.operators.base import InputRecord, Upsert
from service.operators.table import TopNOperator, build_top_n
from service.operators.table.top_n import TopNConfigError
from service.runtime.consumer_group.local_state import LocalPartition
from tests.operators.rocksdb_maps import BACKENDS, local_partition, restarted
from tests.operators.rocksdb_maps import flush as flush_maps


def build(
    clock: ManualClock,
    *,
    n: int = 2,
    desc: bool = True,
    partition_by: str | None = "p",
    interval: int = 1000,
    at_checkpoint: bool = False,
    maps: StateMaps | None = None,
) -> TopNOperator:
    spec = {
        "type": "top_n",
        "order_by": {"field": "x", "desc": desc},
        "n": n,
        "emit_interval_ms": interval,
    }
    return build_top_n(
        "t",
        spec,
        clock,
        emit_at_checkpoint=at_checkpoint,
        table=True,
        partition_by=partition_by,
        state_maps=maps,
    )


def row(pk: str, x: Any, p: str | None = "a", ts: int = 0) -> InputRecord:
    value: dict[str, Any] = {"pk": pk, "x": x}
    if p is not None:
        value["p"] = p
    return (pk, ts, value, 0, None)


def delete(pk: str, ts: int = 0) -> InputRecord:
    return (pk, ts, None, 0, None)


def emit(op: TopNOperator) -> dict[str, str | None]:
    """The ranks the dirty partitions emit: ``{"<partition>|<rank>": pk or None}``."""
    op._emit_pending()
    results, _, _ = op.collector.drain()
    out: dict[str, str | None] = {}
    for u in results:
        assert type(u) is Upsert
        out[u.key] = None if u.result is None else u.result["row"]["pk"]
    return out


def test_a_new_version_replaces_the_row_in_its_ranking() -> None:
    op = build(ManualClock(0))
    op.process_batch([row("r1", 5), row("r2", 9), row("r3", 7)])
    assert emit(op) == {"a|1": "r2", "a|2": "r3"}
    op.process_batch([row("r2", 1)])  # r2 falls out: r3 first, r1 in
    assert emit(op) == {"a|1": "r3", "a|2": "r1"}
    assert op.stats() == {"keys": 1, "rows": 3}


def test_a_tombstone_removes_the_row_and_its_last_rank_is_deleted() -> None:
    op = build(ManualClock(0))
    op.process_batch([row("r1", 5), row("r2", 9)])
    emit(op)
    op.process_batch([delete("r2")])
    assert emit(op) == {"a|1": "r1", "a|2": None}
    op.process_batch([delete("r1"), delete("never")])
    assert emit(op) == {"a|1": None}
    assert op.stats() == {"keys": 0, "rows": 0}


def test_a_row_that_changes_partition_leaves_the_old_one() -> None:
    op = build(ManualClock(0))
    op.process_batch([row("r1", 5, "a"), row("r2", 3, "a")])
    emit(op)
    op.process_batch([row("r1", 5, "b")])
    assert emit(op) == {"a|1": "r2", "a|2": None, "b|1": "r1"}


def test_a_row_naming_no_partition_or_no_number_is_deleted() -> None:
    op = build(ManualClock(0))
    op.process_batch([row("r1", 5), row("r2", 4)])
    emit(op)
    op.process_batch([row("r1", 5, None), row("r2", "high")])
    _, _, failed = op.collector.drain()
    assert [f.reason for f in failed] == ["bad_value"]
    assert emit(op) == {"a|1": None, "a|2": None}


def test_an_identical_version_changes_nothing() -> None:
    """Not even its place among ties (Flink's ChangelogNormalize drops it)."""
    op = build(ManualClock(0), n=1)
    op.process_batch([row("r1", 5), row("r2", 5)])
    assert emit(op) == {"a|1": "r1"}
    op.process_batch([row("r1", 5)])
    assert emit(op) == {}
    op.process_batch([row("r1", 5.0)])  # 5.0 is another version: r1 ranks after r2 now
    assert emit(op) == {"a|1": "r2"}


def test_without_partition_by_each_row_is_its_own_partition() -> None:
    op = build(ManualClock(0), partition_by=None)
    op.process_batch([row("r1", 5), row("r2", 4)])
    assert emit(op) == {"r1|1": "r1", "r2|1": "r2"}


def test_a_row_key_over_a_table_is_refused() -> None:
    spec = {"type": "top_n", "order_by": {"field": "x"}, "n": 1, "row_key": "pk"}
    with pytest.raises(TopNConfigError):
        build_top_n("t", spec, ManualClock(0), table=True)


# -- the property: folded output == the Top-N of the current table ----------------------

PKS = ["k1", "k2", "k3", "k4", "k5", "k6"]
versions = st.lists(
    st.tuples(
        st.sampled_from(PKS),
        st.one_of(
            st.none(),  # a tombstone
            st.tuples(
                st.sampled_from(["a", "b", None]),  # None: no partition
                st.one_of(st.integers(-3, 3), st.just("bad")),  # few values: many ties
            ),
        ),
    ),
    max_size=8,
)
steps = st.lists(
    st.tuples(
        versions,
        st.integers(0, 2500),
        st.sampled_from([None, None, "checkpoint", "crash"]),
    ),
    min_size=1,
    max_size=30,
)
"""Each step: a batch of versions, processing time moving on (the tick fires if due),
and a checkpoint, or a checkpoint and a crash right after it (a restore from the log)."""


def value_of(pk: str, version: tuple[str | None, Any]) -> dict[str, Any]:
    p, x = version
    out: dict[str, Any] = {"pk": pk, "x": x}
    if p is not None:
        out["p"] = p
    return out


def oracle(
    inputs: list[tuple[str, tuple[str | None, Any] | None]], n: int, desc: bool
) -> dict[str, dict[str, Any]]:
    """The Top-N recomputed from the table the versions leave: each primary key's newest
    version (none after a tombstone, or a version without a partition or a number),
    ranked by x in its partition, ties by the arrival of that version (an identical
    version keeps the arrival of the one it repeats)."""
    table: dict[str, tuple[int, dict[str, Any]]] = {}
    for arrival, (pk, version) in enumerate(inputs):
        if version is None or version[0] is None or type(version[1]) is not int:
            table.pop(pk, None)
            continue
        value = value_of(pk, version)
        held = table.get(pk)
        if held is not None and held[1] == value:
            continue
        table[pk] = (arrival, value)
    ranked: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for arrival, value in table.values():
        ranked.setdefault(value["p"], []).append((arrival, value))
    out: dict[str, dict[str, Any]] = {}
    for p, held in ranked.items():
        held.sort(key=lambda r: (-r[1]["x"] if desc else r[1]["x"], r[0]))
        for rank, (_, value) in enumerate(held[:n], start=1):
            out[f"{p}|{rank}"] = value
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@seed(5052)
@settings(max_examples=300, deadline=None)
@given(
    steps=steps,
    n=st.integers(1, 3),
    desc=st.booleans(),
    interval=st.integers(1, 1000),
    at_checkpoint=st.booleans(),
)
def test_upserts_and_deletes_fold_to_the_top_n_of_the_current_table(
    steps: list[tuple[Any, int, str | None]],
    n: int,
    desc: bool,
    interval: int,
    at_checkpoint: bool,
    backend: str,
) -> None:
    """Whatever the versions, tombstones, ticks and checkpoints (a checkpoint may be a
    crash and a restore from the changelog; with rocksdb, from the store as that
    checkpoint left it and that checkpoint's entries): folding the rank rows by Kafka key
    (a tombstone deletes) gives the Top-N of the current table; each rank row's seq goes
    0, 1, 2, ... (from 0 again after its delete); a flush emits a rank row at most once,
    and deletes only a rank it holds."""
    clock = ManualClock(0)
    partition = local_partition(backend)

    def make(on: LocalPartition | None) -> TopNOperator:
        return build(clock, n=n, desc=desc, interval=interval, at_checkpoint=at_checkpoint,
                     maps=None if on is None else on.state_map)  # fmt: skip

    op = make(partition)
    log: list[tuple[str, Any]] = []
    inputs: list[tuple[str, Any]] = []
    table: dict[str, dict[str, Any]] = {}
    next_seq: dict[str, int] = {}

    def take() -> None:
        results, _, _ = op.collector.drain()
        names = [u.key for u in results]
        assert len(names) == len(set(names)), "a rank row emitted twice in one flush"
        for u in results:
            assert type(u) is Upsert
            assert u.seq == next_seq.get(u.key, 0)
            if u.result is None:
                assert u.key in table
                del table[u.key]
                next_seq.pop(u.key)
                continue
            next_seq[u.key] = u.seq + 1
            p, rank = u.key.rsplit("|", 1)
            assert u.result["partition"] == p and u.result["rank"] == int(rank)
            table[u.key] = u.result["row"]

    for batch, elapse, checkpoint in steps:
        inputs.extend(batch)
        op.process_batch(
            [(pk, 0, None if v is None else value_of(pk, v), 0, None) for pk, v in batch]
        )
        take()
        clock.advance(elapse)
        due = op.next_processing_time()
        if due is not None and due <= clock.now_ms():
            op.advance_processing_time(clock.now_ms())
        take()
        if checkpoint is not None:
            op.before_checkpoint()
            take()
            tail = orjson.loads(orjson.dumps(list(op.snapshot_changes().items())))
            log.extend(tail)
            flush_maps(partition)
            if checkpoint == "crash":
                if partition is None:
                    op = make(None)
                    op.restore_changes(log)
                else:  # a restart on the same disk: the store and the changelog's tail
                    partition = restarted(partition)
                    op = make(partition)
                    op.restore_changes(tail)
    op.advance_watermark(MAX_TIMESTAMP)
    op.before_checkpoint()
    take()
    assert table == oracle(inputs, n, desc)
