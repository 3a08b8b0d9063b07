"""Top-N (operators/table/top_n.py): rank rows as upserts, mini-batch per interval or at
the checkpoint, ties by arrival, rows replaced by their row key, checkpoints that
restore exactly, and the folded output equal to the top N of all input."""

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
    n: int = 3,
    desc: bool = True,
    row_key: str | None = None,
    interval: int = 1000,
    at_checkpoint: bool = False,
    maps: StateMaps | None = None,
) -> TopNOperator:
    spec: dict[str, Any] = {
        "type": "top_n",
        "order_by": {"field": "x", "desc": desc},
        "n": n,
        "emit_interval_ms": interval,
    }
    if row_key is not None:
        spec["row_key"] = row_key
    return build_top_n("p", spec, clock, emit_at_checkpoint=at_checkpoint, state_maps=maps)


def rec(key: str, ts: int, x: Any, name: str | None = None) -> InputRecord:
    value: dict[str, Any] = {"x": x}
    if name is not None:
        value["name"] = name
    return (key, ts, value, 0, None)


def upserts(op: TopNOperator) -> list[Upsert]:
    results, _, _ = op.collector.drain()
    assert all(type(r) is Upsert for r in results)
    return results  # type: ignore[return-value]


def flush(op: TopNOperator, clock: ManualClock) -> list[Upsert]:
    due = op.next_processing_time()
    if due is not None:
        clock.set(max(due, clock.now_ms()))
        op.advance_processing_time(clock.now_ms())
    return upserts(op)


def shown(out: list[Upsert]) -> dict[str, Any]:
    return {u.key: (None if u.result is None else u.result["row"]["x"]) for u in out}


def test_rank_rows_are_upserts_keyed_by_key_and_rank() -> None:
    clock = ManualClock(0)
    op = build(clock)
    op.process_batch([rec("a", 1, 5), rec("a", 2, 9), rec("b", 3, 1), rec("a", 4, 7)])
    assert upserts(op) == []
    assert op.next_processing_time() == 1000
    out = flush(op, clock)
    assert [(u.id, u.key, u.seq, u.timestamp) for u in out] == [
        ("p|a|1", "a|1", 0, 2),
        ("p|a|2", "a|2", 0, 4),
        ("p|a|3", "a|3", 0, 1),
        ("p|b|1", "b|1", 0, 3),
    ]
    assert out[0].result == {"partition": "a", "rank": 1, "row": {"x": 9}}
    assert op.next_processing_time() is None


def test_only_the_ranks_whose_row_changed_are_emitted() -> None:
    clock = ManualClock(0)
    op = build(clock)
    op.process_batch([rec("a", 1, 5), rec("a", 2, 9), rec("a", 3, 7)])
    flush(op, clock)
    op.process_batch([rec("a", 4, 6)])  # between 7 and 5: ranks 3 changes only
    out = flush(op, clock)
    assert [(u.key, u.seq, u.result["row"]["x"] if u.result else None) for u in out] == [
        ("a|3", 1, 6)
    ]
    op.process_batch([rec("a", 5, 1)])  # below the third: nothing changes, no tick
    assert op.next_processing_time() is None
    assert flush(op, clock) == []
    op.process_batch([rec("a", 6, 10)])  # a new first: every rank moves
    assert shown(flush(op, clock)) == {"a|1": 10, "a|2": 9, "a|3": 7}


def test_a_tie_ranks_after_the_rows_that_came_first_and_ascending_order() -> None:
    clock = ManualClock(0)
    op = build(clock, n=2)
    op.process_batch([rec("a", 1, 5, "first"), rec("a", 2, 5, "second"), rec("a", 3, 5, "third")])
    out = flush(op, clock)
    assert [u.result["row"]["name"] for u in out if u.result] == ["first", "second"]
    asc = build(clock, desc=False, n=2)
    asc.process_batch([rec("a", 1, 5), rec("a", 2, -1.5), rec("a", 3, 2)])
    assert shown(flush(asc, clock)) == {"a|1": -1.5, "a|2": 2}


def test_append_only_keeps_only_the_top_n_rows() -> None:
    clock = ManualClock(0)
    op = build(clock, n=3)
    op.process_batch([rec("a", i, i % 17) for i in range(1000)])
    assert op.stats() == {"keys": 1, "rows": 3}
    assert shown(flush(op, clock)) == {"a|1": 16, "a|2": 16, "a|3": 16}


def test_a_key_emits_at_most_once_per_interval() -> None:
    clock = ManualClock(0)
    op = build(clock, n=1, interval=500)
    op.process_batch([rec("a", 1, 1)])
    clock.set(100)
    op.process_batch([rec("a", 2, 2)])
    assert op.next_processing_time() == 500
    op.advance_processing_time(499)
    assert upserts(op) == []
    op.advance_processing_time(500)
    assert shown(upserts(op)) == {"a|1": 2}


def test_with_a_row_key_a_newer_record_replaces_the_row_and_may_let_another_in() -> None:
    clock = ManualClock(0)
    op = build(clock, n=2, row_key="name")
    op.process_batch([rec("a", 1, 5, "x"), rec("a", 2, 9, "y"), rec("a", 3, 7, "z")])
    out = flush(op, clock)
    assert [(u.key, u.result["row"]["name"]) for u in out if u.result] == [
        ("a|1", "y"),
        ("a|2", "z"),
    ]
    op.process_batch([rec("a", 4, 1, "y")])  # y falls out: z first, x second
    out = flush(op, clock)
    assert [(u.key, u.seq, u.result["row"]["name"]) for u in out if u.result] == [
        ("a|1", 1, "z"),
        ("a|2", 1, "x"),
    ]
    op.process_batch([rec("a", 5, 0, "q")])  # below the top 2: kept, not emitted
    assert op.next_processing_time() is None
    assert op.stats()["rows"] == 4
    op.process_batch([rec("a", 6, 8, "x")])  # x updated: moves to first
    assert shown(flush(op, clock)) == {"a|1": 8, "a|2": 7}


def test_a_record_without_a_number_to_rank_by_is_dead_lettered() -> None:
    clock = ManualClock(0)
    op = build(clock, row_key="name")
    op.process_batch(
        [
            ("a", 1, {"x": "high", "name": "n"}, 0, "s1"),
            ("a", 2, {"name": "n"}, 1, "s2"),
            ("a", 3, {"x": True, "name": "n"}, 2, "s3"),
            ("a", 4, {"x": float("nan"), "name": "n"}, 3, "s4"),
            ("a", 5, {"x": 1}, 4, "s5"),
            ("a", 6, {"x": 2, "name": 7}, 5, "s6"),
        ]
    )
    _, _, failed = op.collector.drain()
    assert [(f.source, f.reason) for f in failed] == [
        ("s1", "bad_value"),
        ("s2", "bad_value"),
        ("s3", "bad_value"),
        ("s4", "bad_value"),
        ("s5", "bad_value"),
    ]
    assert dict(failed[4].headers)["clockwork.field"] == b"name"
    assert [f.detail.split(": ", 1)[1] for f in failed] == [
        "a string ('high')",
        "missing",
        "a boolean",
        "NaN",
        "missing",
    ]
    assert op.collector.bad_values == {("x", "not_a_number"): 4, ("name", "missing"): 1}
    out = flush(op, clock)
    assert [u.result["row"] for u in out if u.result] == [{"x": 2, "name": 7}]


def test_under_exactly_once_the_ranks_are_emitted_at_the_checkpoint() -> None:
    clock = ManualClock(0)
    op = build(clock, at_checkpoint=True)
    op.process_batch([rec("a", 1, 5)])
    assert op.next_processing_time() is None
    op.before_checkpoint()
    assert shown(upserts(op)) == {"a|1": 5}
    op.before_checkpoint()
    assert upserts(op) == []


def test_the_end_of_input_emits_every_dirty_key() -> None:
    clock = ManualClock(0)
    op = build(clock)
    op.process_batch([rec("a", 1, 5), rec("b", 1, 6)])
    op.advance_watermark(MAX_TIMESTAMP)
    assert shown(upserts(op)) == {"a|1": 5, "b|1": 6}


def test_a_rank_no_longer_held_is_deleted_with_a_tombstone() -> None:
    """Rows leave only by a restore of fewer (nothing else removes a row yet); the
    emission deletes every rank past the rows held, with its next seq."""
    clock = ManualClock(0)
    op = build(clock, n=3)
    op.process_batch([rec("a", 1, 5), rec("a", 2, 6)])
    flush(op, clock)
    snap = op.snapshot()
    snap["keys"]["a"]["rows"] = snap["keys"]["a"]["rows"][:1]
    snap["keys"]["a"]["dirty"] = True
    op.restore(snap)
    out = flush(op, clock)  # rank 1 again too: the first emission after a restore
    assert [(u.key, u.result is None, u.seq) for u in out] == [("a|1", False, 1), ("a|2", True, 1)]


def test_snapshot_and_restore_go_on_exactly() -> None:
    """Under exactly-once (nothing emitted after the checkpoint was seen), a restored
    operator goes on exactly as the one that took the snapshot."""
    clock = ManualClock(0)

    def make() -> TopNOperator:
        return build(clock, row_key="name", at_checkpoint=True)

    op = make()
    op.process_batch([rec("a", 1, 5, "x"), rec("a", 2, 9, "y")])
    op.before_checkpoint()
    upserts(op)
    op.process_batch([rec("a", 3, 1, "y")])
    again = make()
    again.restore(orjson.loads(orjson.dumps(op.snapshot())))
    log = orjson.loads(orjson.dumps(list(op.snapshot_changes().items())))
    third = make()
    third.restore_changes(log)
    for each in (op, again, third):
        each.process_batch([rec("a", 4, 7, "z")])
        each.before_checkpoint()
        out = upserts(each)
        assert [(u.key, u.seq, u.result["row"]["name"]) for u in out if u.result] == [
            ("a|1", 1, "z"),  # x stays second: not emitted again
            ("a|3", 0, "y"),
        ]


def test_after_a_restore_at_least_once_a_key_first_writes_every_rank() -> None:
    """The checkpoint knew rank 1 as row a; after it, b took rank 1 (emitted) and fell
    back, a first again (not emitted yet), and the process crashed. The replay ends on a,
    which the checkpoint says was shown: the rank is written again all the same, so the
    topic does not end on b."""
    clock = ManualClock(0)
    op = build(clock, n=1, row_key="name")
    op.process_batch([rec("a", 1, 5, "a")])
    flush(op, clock)
    log = orjson.loads(orjson.dumps(list(op.snapshot_changes().items())))
    lost = [[rec("a", 2, 9, "b")], [rec("a", 3, 1, "b")]]
    op.process_batch(lost[0])
    assert [u.result["row"]["name"] for u in flush(op, clock) if u.result] == ["b"]
    op.process_batch(lost[1])  # a is first again; the crash comes before the tick
    again = build(clock, n=1, row_key="name")
    again.restore_changes(log)
    for batch in lost:
        again.process_batch(batch)
    out = flush(again, clock)
    assert [(u.key, u.seq, u.result["row"]["name"]) for u in out if u.result] == [("a|1", 1, "a")]
    exactly = build(clock, n=1, row_key="name", at_checkpoint=True)
    exactly.restore_changes(log)  # exactly once: nothing after the checkpoint was seen
    for batch in lost:
        exactly.process_batch(batch)
    exactly.before_checkpoint()
    assert upserts(exactly) == []


def test_after_a_restart_on_the_same_store_a_key_read_back_first_writes_every_rank() -> None:
    """The rocksdb backend: the case above, the key's state read back from the store (the
    changelog's tail since the last checkpoint does not hold it): the store's restore
    epoch makes it stale all the same."""
    clock = ManualClock(0)
    partition = local_partition("rocksdb", cache_bytes=1 << 20)  # no eviction: no write ahead
    assert partition is not None
    op = build(clock, n=1, row_key="name", maps=partition.state_map)
    op.process_batch([rec("a", 1, 5, "a")])
    flush(op, clock)
    op.snapshot_changes()
    flush_maps(partition)
    op.process_batch([rec("z", 1, 1, "z")])
    flush(op, clock)
    tail = orjson.loads(orjson.dumps(list(op.snapshot_changes().items())))
    assert "pa" not in dict(tail)
    flush_maps(partition)
    lost = [[rec("a", 2, 9, "b")], [rec("a", 3, 1, "b")]]
    op.process_batch(lost[0])
    assert [u.result["row"]["name"] for u in flush(op, clock) if u.result] == ["b"]
    op.process_batch(lost[1])  # a is first again; the crash comes before the tick
    partition = restarted(partition)
    again = build(clock, n=1, row_key="name", maps=partition.state_map)
    again.restore_changes(tail)
    for batch in lost:
        again.process_batch(batch)
    out = flush(again, clock)
    assert [(u.key, u.seq, u.result["row"]["name"]) for u in out if u.result] == [("a|1", 1, "a")]


@pytest.mark.parametrize(
    "change",
    [{"n": 0}, {"n": 10_001}, {"order_by": {"field": ""}}, {"emit_interval_ms": 0}],
)
def test_a_bad_config_is_refused(change: dict[str, Any]) -> None:
    spec: dict[str, Any] = {"type": "top_n", "order_by": {"field": "x"}, "n": 3, **change}
    with pytest.raises(TopNConfigError):
        build_top_n("p", spec, ManualClock(0))


# -- the property: folded output == the top N of all input ------------------------------

KEYS = ["a", "b", "c"]
NAMES = ["r1", "r2", "r3", "r4", "r5"]
records = st.lists(
    st.tuples(
        st.sampled_from(KEYS),
        st.integers(0, 1000),
        st.integers(-5, 5),  # few values: many ties
        st.sampled_from(NAMES),
    ),
    max_size=8,
)
steps = st.lists(
    st.tuples(
        records,
        st.integers(0, 2500),
        st.sampled_from([None, None, "checkpoint", "crash"]),
    ),
    min_size=1,
    max_size=30,
)
"""Each step: a batch of records, processing time moving on (the tick fires if due),
and a checkpoint, or a checkpoint and a crash right after it (a restore from the log)."""


def oracle(
    inputs: list[tuple[str, int, int, str]], n: int, desc: bool, keyed: bool
) -> dict[str, dict[str, Any]]:
    """The top n of all input per key, ranked by x (desc or asc), ties by arrival (of a
    row's newest version, with a row key): ``{"<key>|<rank>": row}``."""
    rows: dict[str, list[tuple[int, dict[str, Any], str]]] = {}
    for arrival, (key, _ts, x, name) in enumerate(inputs):
        held = rows.setdefault(key, [])
        if keyed:
            held[:] = [r for r in held if r[2] != name]
        held.append((arrival, {"x": x, "name": name}, name))
    table: dict[str, dict[str, Any]] = {}
    for key, held in rows.items():
        ranked = sorted(held, key=lambda r: (-r[1]["x"] if desc else r[1]["x"], r[0]))
        for rank, (_, row, _) in enumerate(ranked[:n], start=1):
            table[f"{key}|{rank}"] = row
    return table


@pytest.mark.parametrize("backend", BACKENDS)
@seed(5050)
@settings(max_examples=300, deadline=None)
@given(
    steps=steps,
    n=st.integers(1, 4),
    desc=st.booleans(),
    keyed=st.booleans(),
    interval=st.integers(1, 1000),
    at_checkpoint=st.booleans(),
)
def test_folded_rank_rows_equal_the_top_n_of_all_input(
    steps: list[tuple[Any, int, str | None]],
    n: int,
    desc: bool,
    keyed: bool,
    interval: int,
    at_checkpoint: bool,
    backend: str,
) -> None:
    """Whatever the records, ticks and checkpoints (a checkpoint may be a crash and a
    restore from the changelog; with rocksdb, from the store as that checkpoint left it
    and that checkpoint's entries): folding the upserts by Kafka key (a tombstone deletes)
    gives the top n of all input per key, ties broken by arrival; each rank row's seq goes
    0, 1, 2, ... (from 0 again after its delete); a flush emits a rank row at most once;
    a rank row whose row did not change is not emitted again."""
    clock = ManualClock(0)
    row_key = "name" if keyed else None
    partition = local_partition(backend)

    def make(on: LocalPartition | None) -> TopNOperator:
        return build(clock, n=n, desc=desc, row_key=row_key, interval=interval,
                     at_checkpoint=at_checkpoint,
                     maps=None if on is None else on.state_map)  # fmt: skip

    op = make(partition)
    log: list[tuple[str, Any]] = []
    inputs: list[tuple[str, int, int, str]] = []
    table: dict[str, dict[str, Any]] = {}
    next_seq: dict[str, int] = {}

    def take() -> None:
        out = upserts(op)
        names = [u.key for u in out]
        assert len(names) == len(set(names)), "a rank row emitted twice in one flush"
        for u in out:
            assert u.seq == next_seq.get(u.key, 0)
            if u.result is None:
                assert u.key in table
                del table[u.key]
                next_seq.pop(u.key)
                continue
            assert table.get(u.key) is not u.result["row"], "an unchanged rank emitted"
            next_seq[u.key] = u.seq + 1
            key, rank = u.key.rsplit("|", 1)
            assert u.result["partition"] == key and u.result["rank"] == int(rank)
            table[u.key] = u.result["row"]

    for batch, elapse, checkpoint in steps:
        inputs.extend(batch)
        op.process_batch([rec(k, ts, x, name) for k, ts, x, name in batch])
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
    assert table == oracle(inputs, n, desc, keyed)
    if not keyed:
        assert op.stats()["rows"] <= n * len({k for k, *_ in inputs})


@pytest.mark.parametrize("backend", BACKENDS)
@seed(5051)
@settings(max_examples=200, deadline=None)
@given(
    steps=steps,
    n=st.integers(1, 4),
    desc=st.booleans(),
    keyed=st.booleans(),
    interval=st.integers(1, 1000),
)
def test_a_replay_after_a_crash_ranks_as_the_first_run_did(
    steps: list[tuple[Any, int, str | None]],
    n: int,
    desc: bool,
    keyed: bool,
    interval: int,
    backend: str,
) -> None:
    """At least once: a crash anywhere (here: a step marked ``crash``, before its
    checkpoint) loses what came after the last checkpoint, and the restored operator
    takes that input again (with rocksdb: into a new, empty store, as the runtime wipes
    one that evictions took past its checkpoint). The replay numbers the rows as the
    first run did (the counter is checkpointed), so ties rank the same and the folded
    output, repeats and all, is still the top n of all input."""
    clock = ManualClock(0)
    row_key = "name" if keyed else None

    def make() -> TopNOperator:
        partition = local_partition(backend)
        maps = None if partition is None else partition.state_map
        return build(clock, n=n, desc=desc, row_key=row_key, interval=interval, maps=maps)

    op = make()
    log: list[tuple[str, Any]] = []
    inputs: list[tuple[str, int, int, str]] = []
    since: list[list[InputRecord]] = []
    table: dict[str, dict[str, Any]] = {}

    def take() -> None:
        for u in upserts(op):
            if u.result is None:
                table.pop(u.key, None)
            else:
                table[u.key] = u.result["row"]

    def run(batch: list[InputRecord], elapse: int) -> None:
        op.process_batch(batch)
        take()
        clock.advance(elapse)
        due = op.next_processing_time()
        if due is not None and due <= clock.now_ms():
            op.advance_processing_time(clock.now_ms())
        take()

    for batch, elapse, event in steps:
        inputs.extend(batch)
        records = [rec(k, ts, x, name) for k, ts, x, name in batch]
        since.append(records)
        run(records, elapse)
        if event == "crash":  # lost since the last checkpoint: restore, take it again
            op = make()
            op.restore_changes(log)
            for again in since:
                run(again, 0)
        elif event == "checkpoint":
            log.extend(orjson.loads(orjson.dumps(list(op.snapshot_changes().items()))))
            since.clear()
    op.advance_watermark(MAX_TIMESTAMP)
    take()
    assert table == oracle(inputs, n, desc, keyed)
