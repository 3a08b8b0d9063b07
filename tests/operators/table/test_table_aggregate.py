"""The running aggregate over a table source (operators/table/table_aggregate.py): rows
replaced and deleted are taken back, groups whose rows all went are deleted, a row that
changes group moves, and any sequence of upserts and deletes (across checkpoints) folds
to the aggregate recomputed from the current table."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import orjson
import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.core.state_cache import StateMaps
from service.core.time import MAX_TIMESTAMP, ManualClock
from service.operators.base import InputRecord, Upsert
from service.operators.table import TableAggregateOperator, build_running_aggregate
from service.operators.table.running import RunningAggregateConfig
from service.operators.window.aggregations import encode_distinct, order_key
from service.operators.window.errors import WindowConfigError
from tests.operators.rocksdb_maps import RESTORES, flush, local_partition, restarted, restore

AGGS = {
    "n": {"fn": "count"},
    "total": {"fn": "sum", "field": "amount"},
    "mean": {"fn": "avg", "field": "amount"},
    "lo": {"fn": "min", "field": "amount"},
    "hi": {"fn": "max", "field": "amount"},
    "distinct": {"fn": "count_distinct", "field": "amount"},
    "all": {"fn": "collect", "field": "amount"},
}


def build(
    clock: ManualClock,
    *,
    group: str | None = None,
    on_bad_value: str = "skip",
    maps: StateMaps | None = None,
) -> TableAggregateOperator:
    config = RunningAggregateConfig(
        pipeline="p",
        aggregations=AGGS,
        emit_interval_ms=1000,
        on_bad_value=on_bad_value,
        clock=clock,
        state_map=maps,
    )
    return TableAggregateOperator(config, group_field=group)


def row(pk: str, amount: Any, ts: int = 0, group: str | None = None) -> InputRecord:
    value: dict[str, Any] = {} if amount is None else {"amount": amount}
    if group is not None:
        value["g"] = group
    return (pk, ts, value, 0, None)


def delete(pk: str, ts: int = 0) -> InputRecord:
    return (pk, ts, None, 0, None)


def drain(op: TableAggregateOperator) -> list[Upsert]:
    results, _, _ = op.collector.drain()
    assert all(type(r) is Upsert for r in results)
    return results  # type: ignore[return-value]


def emit(op: TableAggregateOperator) -> dict[str, dict[str, Any] | None]:
    op.advance_watermark(MAX_TIMESTAMP - 1)
    op.before_checkpoint()
    op._emit_pending()
    return {u.key: u.result for u in drain(op)}


def test_an_update_takes_the_old_value_back() -> None:
    op = build(ManualClock(0))
    op.process_batch([row("a", 5), row("a", 7)])
    assert emit(op)["a"] == {
        "n": 1, "total": 7, "mean": 7.0, "lo": 7, "hi": 7, "distinct": 1, "all": [7],
    }  # fmt: skip


def test_a_tombstone_deletes_the_group_it_emitted() -> None:
    op = build(ManualClock(0))
    op.process_batch([row("a", 5)])
    assert emit(op)["a"] is not None
    op.process_batch([delete("a")])
    results = drain(op) or []
    op._emit_pending()
    out = drain(op)
    assert results == [] and [(u.key, u.result, u.seq) for u in out] == [("a", None, 1)]


def test_a_group_never_emitted_is_dropped_without_a_tombstone() -> None:
    op = build(ManualClock(0))
    op.process_batch([row("a", 5), delete("a")])
    assert emit(op) == {}
    assert op.gauges().keys == 0


def test_min_and_max_fall_back_to_the_next_value() -> None:
    op = build(ManualClock(0), group="g")
    op.process_batch([row("x", 1, group="G"), row("y", 9, group="G"), row("z", 5, group="G")])
    assert emit(op)["G"] == {
        "n": 3, "total": 15, "mean": 5.0, "lo": 1, "hi": 9, "distinct": 3, "all": [1, 9, 5],
    }  # fmt: skip
    op.process_batch([delete("y"), row("x", 4, group="G")])
    got = emit(op)["G"]
    assert got is not None and (got["lo"], got["hi"], got["all"]) == (4, 5, [5, 4])


def test_a_row_that_changes_group_moves_and_both_groups_emit() -> None:
    op = build(ManualClock(0), group="g")
    op.process_batch([row("o1", 10, group="alice"), row("o2", 3, group="alice")])
    emit(op)
    op.process_batch([row("o1", 10, group="bob")])
    out = emit(op)
    assert out["alice"] is not None and out["alice"]["total"] == 3
    assert out["bob"] is not None and out["bob"]["total"] == 10
    op.process_batch([row("o2", 3, group="bob")])
    out = emit(op)
    assert out == {"alice": None, "bob": out["bob"]}
    assert out["bob"] is not None and out["bob"]["n"] == 2


def test_floats_are_taken_back_exactly() -> None:
    op = build(ManualClock(0))
    op.process_batch([row("a", 0.1), row("b", 0.2)])
    op.process_batch([row("a", 1)])
    op2 = build(ManualClock(0), group="g")
    op2.process_batch([row("a", 0.1, group="G"), row("b", 0.2, group="G"), row("a", 1, group="G")])
    got = emit(op2)["G"]
    assert got is not None and got["total"] == 1.2 and got["mean"] == 0.6


def test_an_identical_row_changes_nothing() -> None:
    op = build(ManualClock(0))
    op.process_batch([row("a", 5)])
    emit(op)
    op.process_batch([row("a", 5)])
    assert emit(op) == {}


def test_a_bad_value_dead_letters_the_row_and_deletes_its_key() -> None:
    op = build(ManualClock(0), on_bad_value="dead_letter")
    op.process_batch([row("a", 5), row("b", 1)])
    emit(op)
    op.process_batch([row("a", "five")])
    op._emit_pending()
    results, _, failed = op.collector.drain()
    assert [(u.key, u.result) for u in results] == [("a", None)]  # type: ignore[union-attr]
    assert len(failed) == 1


@pytest.mark.parametrize("fn", ["first", "last"])
def test_functions_that_cannot_retract_are_refused(fn: str) -> None:
    spec = {"type": "aggregate", "aggregations": {"x": {"fn": fn, "field": "a"}}}
    with pytest.raises(WindowConfigError, match="cannot take a row back"):
        build_running_aggregate("p", spec, ManualClock(0), table=True)


def test_the_spec_builds_the_table_aggregate() -> None:
    spec = {"type": "aggregate", "aggregations": {"n": {"fn": "count"}}}
    op = build_running_aggregate("p", spec, ManualClock(0), table=True)
    assert isinstance(op, TableAggregateOperator)


# -- the property: any sequence folds to the aggregate of the current table -------------


def oracle(table: dict[str, tuple[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each group's aggregations recomputed from the current rows (pk -> (group, amount))."""
    groups: dict[str, list[Any]] = {}
    for group, amount in table.values():
        groups.setdefault(group, []).append(amount)
    out: dict[str, dict[str, Any]] = {}
    for group, amounts in groups.items():
        numbers = [a for a in amounts if type(a) in (int, float)]
        ordered = [a for a in amounts if type(a) in (int, float, str)]
        ints = sum(a for a in numbers if type(a) is int)
        floats = [a for a in numbers if type(a) is float]
        exact = ints + sum((Fraction(a) for a in floats), Fraction(0))
        out[group] = {
            "n": len(amounts),
            "total": float(exact) if floats else ints,
            "mean": float(exact / len(numbers)) if numbers else None,
            "lo": min(ordered, key=order_key) if ordered else None,
            "hi": max(ordered, key=order_key) if ordered else None,
            "distinct": len({encode_distinct(a) for a in amounts if a is not None}),
            "all": sorted(encode_distinct(a) for a in amounts if a is not None),
        }
    return out


AMOUNTS = st.one_of(
    st.none(),
    st.integers(-5, 5),
    st.sampled_from([0.1, 0.2, 0.3, 1.5, -2.25, 1.0]),
    st.sampled_from(["a", "b"]),
    st.just(True),
)
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.sampled_from("pqrstu"), st.sampled_from("GHK"), AMOUNTS),
        st.tuples(st.just("delete"), st.sampled_from("pqrstu"), st.none(), st.none()),
        st.tuples(st.just("emit"), st.none(), st.none(), st.none()),
        st.tuples(st.just("restore"), st.none(), st.none(), st.none()),
    ),
    max_size=60,
)


@pytest.mark.parametrize("backend", RESTORES)
@seed(50)
@settings(max_examples=300, deadline=None)
@given(steps=STEPS)
def test_upserts_and_deletes_fold_to_the_current_tables_aggregate(
    steps: list[Any], backend: str
) -> None:
    """With rocksdb, a restore is from the store as the last checkpoint's flush left it
    and that checkpoint's entries (a restart on the same disk), streamed onto it in
    batches as the runtime does, or restored from a dict."""
    clock = ManualClock(0)
    partition = local_partition(backend)
    op = build(clock, group="g", maps=None if partition is None else partition.state_map)
    table: dict[str, tuple[str, Any]] = {}
    folded: dict[str, dict[str, Any]] = {}
    seqs: dict[str, int] = {}
    checkpoint: dict[str, Any] = {}

    def take(results: list[Upsert]) -> None:
        for u in results:
            if u.result is None:
                folded.pop(u.key, None)
                seqs.pop(u.key, None)
            else:
                assert u.seq == seqs.get(u.key, -1) + 1
                seqs[u.key] = u.seq
                folded[u.key] = u.result

    for ts, (kind, pk, group, amount) in enumerate(steps):
        if kind == "upsert":
            op.process_batch([row(pk, amount, ts, group)])
            table[pk] = (group, amount)
        elif kind == "delete":
            op.process_batch([delete(pk, ts)])
            table.pop(pk, None)
        elif kind == "emit":
            op._emit_pending()
            take(drain(op))
        else:  # a checkpoint (its outputs drained), then a restore from the changelog
            op._emit_pending()
            take(drain(op))
            tail = orjson.loads(orjson.dumps(op.snapshot_changes()))
            checkpoint.update(tail)
            if partition is None:
                op = build(clock, group="g")
                op.restore_changes(list(checkpoint.items()))
            else:
                flush(partition)
                partition = restarted(partition)
                op = build(clock, group="g", maps=partition.state_map)
                restore(op, list(tail.items()), backend)
    op._emit_pending()
    take(drain(op))
    want = oracle(table)
    got = {g: {**r, "all": sorted(encode_distinct(a) for a in r["all"])} for g, r in folded.items()}
    assert got == want
