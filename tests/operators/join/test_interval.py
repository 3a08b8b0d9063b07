"""The interval join (semantics.md section 10): each rule, then the property that any
in-bound interleaving of the two inputs gives the reference's rows."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.state_cache import StateMaps
from service.core.time import MAX_TIMESTAMP
from service.operators.join.interval import IntervalJoinOperator
from service.operators.join.rows import How, JoinConfigError, Side

from .reference import (
    BACKENDS,
    PIPELINE,
    Backend,
    Driver,
    in_bound,
    out,
    records,
    reference_interval,
)


def join(
    how: How = How.INNER,
    lower: int = 0,
    upper: int = 10,
    lateness: int = 0,
    state_maps: StateMaps | None = None,
) -> IntervalJoinOperator:
    return IntervalJoinOperator(
        PIPELINE, how, lower, upper, lateness, inputs=("orders", "payments"), state_maps=state_maps
    )


def rows(op: IntervalJoinOperator) -> list[tuple[str, int, Any]]:
    emitted = [(r.id, r.timestamp, r.value) for r in op.collector.results]
    op.collector.results.clear()
    return emitted


def test_a_match_is_emitted_when_its_second_row_arrives_at_the_later_time() -> None:
    op = join()
    op.process_left([("k", 100, "l", 7, None)])
    assert rows(op) == []
    op.process_right([("k", 104, "r", 3, None)])
    assert rows(op) == [("p|k|7|3", 104, {"left": "l", "right": "r"})]


def test_bounds_are_inclusive_and_the_lower_one_may_be_negative() -> None:
    op = join(lower=-5, upper=5)
    op.process_left([("k", 100, "l", 0, None)])
    op.process_right([(("k", ts, ts, ts, None)) for ts in (94, 95, 100, 105, 106)])
    assert [r[0] for r in rows(op)] == ["p|k|0|95", "p|k|0|100", "p|k|0|105"]


def test_a_partner_arriving_at_the_last_possible_moment_still_matches() -> None:
    """The left row (10) can match a right row up to 10 + upper; with both inputs one
    behind, W reaches 9 before the right row at 10 arrives: the left row must still be
    there."""
    left = [("a", 10, "l"), ("x", 11, "-")]
    right = [("y", 11, "-"), ("a", 10, "r")]
    driver = Driver(join(lower=0, upper=0), bound=1)
    driver.run(left, right, schedule=[0, 0, 1, 1])
    assert [r.id for r in driver.emitted] == ["p|a|0|1"]


def test_rows_of_other_keys_never_match() -> None:
    op = join()
    op.process_left([("a", 100, "l", 0, None)])
    op.process_right([("b", 100, "r", 0, None)])
    assert rows(op) == []


def test_an_unmatched_outer_row_is_emitted_padded_at_its_cleanup_time_never_at_arrival() -> None:
    op = join(How.FULL, lower=0, upper=10)
    op.process_left([("k", 100, "l", 1, None)])
    op.process_right([("k", 200, "r", 2, None)])
    assert rows(op) == []
    op.advance_watermark(109)  # the left row's cleanup time is 110
    assert rows(op) == []
    op.advance_watermark(110)
    assert rows(op) == [("p|k|1|none", 100, {"left": "l", "right": None})]
    op.advance_watermark(199)  # the right row's is 200 - 0
    assert rows(op) == []
    op.advance_watermark(200)
    assert rows(op) == [("p|k|none|2", 200, {"left": None, "right": "r"})]


def test_a_matched_row_is_never_emitted_padded() -> None:
    op = join(How.FULL)
    op.process_left([("k", 100, "l", 1, None)])
    op.process_right([("k", 105, "r", 2, None)])
    assert len(rows(op)) == 1
    op.advance_watermark(MAX_TIMESTAMP)
    assert rows(op) == []


def test_a_row_at_or_below_the_watermark_is_late_and_names_its_input() -> None:
    op = join()
    op.process_left([("k", 100, "l", 1, "source")])
    op.advance_watermark(100)
    op.process_right([("k", 100, "r", 2, "late one")])
    assert rows(op) == []
    (late,) = op.collector.late
    assert (late.source, late.key, late.timestamp, late.watermark, late.input) == (
        "late one",
        "k",
        100,
        100,
        "payments",
    )


def test_allowed_lateness_admits_rows_and_keeps_partners_that_long() -> None:
    op = join(lower=0, upper=10, lateness=50)
    op.process_left([("k", 100, "l", 1, None)])
    op.advance_watermark(140)  # cleanup at 100 + 10 + 50 = 160
    op.process_right([("k", 110, "r", 2, None)])  # 110 + 50 > 140: allowed
    assert [r[0] for r in rows(op)] == ["p|k|1|2"]
    assert op.collector.late == []
    op.advance_watermark(160)
    assert op.rows_held(0) == 0


def test_an_allowed_late_row_with_no_partner_to_come_is_padded_at_once() -> None:
    op = join(How.LEFT, lower=-20, upper=-10, lateness=5)
    op.advance_watermark(100)
    op.process_left([("k", 98, "l", 1, None)])  # cleanup 98 - 10 + 5 = 93 <= 100
    assert rows(op) == [("p|k|1|none", 98, {"left": "l", "right": None})]
    assert op.rows_held(0) == 0


def test_the_state_is_empty_after_the_final_watermark() -> None:
    op = join(How.FULL)
    op.process_left([("k", ts, ts, ts, None) for ts in range(0, 100, 7)])
    op.process_right([("k", ts, ts, ts, None) for ts in range(0, 100, 11)])
    op.advance_watermark(MAX_TIMESTAMP)
    assert (op.rows_held(0), op.rows_held(1), op.gauges().keys) == (0, 0, 0)


def test_a_restored_join_goes_on_as_if_it_had_never_stopped() -> None:
    op = join(How.FULL)
    op.process_left([("k", 100, "l", 1, None), ("j", 100, "l2", 2, None)])
    op.process_right([("k", 105, "r", 3, None)])
    rows(op)
    restored = join(How.FULL)
    restored.restore_changes(op.snapshot_changes().items())
    for each in (op, restored):
        each.process_right([("k", 108, "r2", 4, None)])
        each.advance_watermark(MAX_TIMESTAMP)
    assert sorted(rows(restored)) == sorted(rows(op))


def test_only_the_keys_changed_since_the_last_checkpoint_are_written() -> None:
    op = join()
    op.process_left([("a", 100, "l", 1, None), ("b", 100, "l", 2, None)])
    assert set(op.snapshot_changes()) == {"l:a", "l:b", "meta"}
    op.process_right([("a", 105, "r", 3, None)])  # marks l:a matched only for outer joins
    assert set(op.snapshot_changes()) == {"r:a", "meta"}
    op.advance_watermark(MAX_TIMESTAMP)
    changes = op.snapshot_changes()
    assert {k: v for k, v in changes.items() if k != "meta"} == {
        "l:a": None,
        "l:b": None,
        "r:a": None,
    }


def test_a_row_that_comes_and_goes_between_two_checkpoints_leaves_the_changelog_nothing() -> None:
    op = join()
    op.process_left([("a", 100, "l", 1, None)])
    op.advance_watermark(MAX_TIMESTAMP)
    assert set(op.snapshot_changes()) == {"meta"}


def test_a_checkpointed_row_that_goes_is_deleted_from_the_changelog() -> None:
    op = join()
    op.process_left([("a", 100, "l", 1, None)])
    op.snapshot_changes()
    op.advance_watermark(MAX_TIMESTAMP)
    assert {k: v for k, v in op.snapshot_changes().items() if k != "meta"} == {"l:a": None}


def test_a_key_s_checkpointed_rows_stay_deleted_when_newer_rows_come_and_go() -> None:
    """The changelog holds a key's rows from the last checkpoint; they go, rows of the
    same key come and go before the next one: that one must still delete the entry,
    or a restore brings back a row that was already emitted padded or matched."""
    op = join(How.LEFT, lower=0, upper=5)
    op.process_left([("a", 10, "first", 1, None)])
    changes = list(op.snapshot_changes().items())
    op.advance_watermark(15)  # the first row goes (padded)
    op.process_left([("a", 20, "second", 2, None)])
    op.process_right([("a", 22, "r", 3, None)])
    op.advance_watermark(25)  # the second row goes too (matched)
    changes.extend(op.snapshot_changes().items())
    restored = join(How.LEFT, lower=0, upper=5)
    restored.restore_changes(changes)
    assert restored.rows_held(Side.LEFT) == 0
    restored.advance_watermark(MAX_TIMESTAMP)
    assert rows(restored) == []


def test_a_restored_row_that_goes_is_deleted_from_the_changelog() -> None:
    op = join()
    op.process_left([("a", 100, "l", 1, None)])
    restored = join()
    restored.restore_changes(op.snapshot_changes().items())
    restored.advance_watermark(MAX_TIMESTAMP)
    assert {k: v for k, v in restored.snapshot_changes().items() if k != "meta"} == {"l:a": None}


def test_with_rocksdb_the_watermark_finds_rows_evicted_from_the_cache() -> None:
    """The expiry heap stays in memory: a key's rows no longer held are read back from
    RocksDB at their cleanup time (padded here), then deleted there."""
    op = join(How.LEFT, state_maps=Backend("rocksdb").state_maps())
    op.process_left([(f"k{i}", 100 + i, i, i, None) for i in range(50)])
    lefts, _ = op.state_maps()
    assert lefts.held < 5 and len(lefts) == 50
    op.advance_watermark(MAX_TIMESTAMP)
    assert sorted(row[0] for row in rows(op)) == sorted(f"p|k{i}|{i}|none" for i in range(50))
    assert len(lefts) == 0 and op.rows_held(Side.LEFT) == 0


def test_with_rocksdb_a_restart_on_the_same_store_finds_every_row_again() -> None:
    """A local restore replays only the changelog's tail onto the store: the heap and
    the counts are rebuilt from the rows stored, not from the entries replayed."""
    state = Backend("rocksdb-local")

    def make() -> IntervalJoinOperator:
        return join(How.LEFT, state_maps=state.state_maps())

    op = make()
    op.process_left([(f"k{i}", 100 + i, i, i, None) for i in range(50)])
    state.checkpoint(op)
    op.process_left([("k0", 120, "x", 50, None)])
    tail = state.checkpoint(op)
    op = state.restore(make, [], tail)
    assert (op.rows_held(Side.LEFT), op.rows_held(Side.RIGHT), op.gauges().keys) == (51, 0, 50)
    op.advance_watermark(MAX_TIMESTAMP)
    assert len(rows(op)) == 51


def held_by_snapshot(op: IntervalJoinOperator) -> tuple[int, int, int]:
    """Rows per side and keys, counted from a whole snapshot."""
    entries = {name: rows for name, rows in op.snapshot().items() if name != "meta"}
    left = sum(len(rows) for name, rows in entries.items() if name.startswith("l:"))
    right = sum(len(rows) for name, rows in entries.items() if name.startswith("r:"))
    return left, right, len({name[2:] for name in entries})


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=200, deadline=None)
@given(
    actions=st.lists(
        st.tuples(st.sampled_from(["left", "right", "watermark", "restore"]), st.integers(0, 30)),
        max_size=40,
    ),
    keys=st.lists(st.sampled_from("abcd"), min_size=40, max_size=40),
)
def test_rows_and_keys_held_are_counted_as_the_state_changes(
    backend: str, actions: list[tuple[str, int]], keys: list[str]
) -> None:
    state = Backend(backend)

    def make() -> IntervalJoinOperator:
        return join(How.FULL, lower=-3, upper=5, state_maps=state.state_maps())

    op = make()
    watermark = -1
    changes: list[tuple[str, Any]] = []
    for (action, n), key in zip(actions, keys, strict=False):
        if action == "left":
            op.process_left([(key, watermark + 1 + n, n, n, None)])
        elif action == "right":
            op.process_right([(key, watermark + 1 + n, n, n, None)])
        elif action == "watermark":
            watermark += n
            op.advance_watermark(watermark)
        else:
            last = state.checkpoint(op)
            changes.extend(last)
            op = state.restore(make, changes, last)
        assert (op.rows_held(0), op.rows_held(1), op.gauges().keys) == held_by_snapshot(op)


@pytest.mark.parametrize(
    ("how", "lower", "upper", "lateness"),
    [(How.SEMI, 0, 1, 0), (How.INNER, 5, 1, 0), (How.INNER, 0, 1, -1)],
)
def test_settings_that_cannot_work_are_refused(
    how: How, lower: int, upper: int, lateness: int
) -> None:
    with pytest.raises(JoinConfigError):
        join(how, lower, upper, lateness)


def test_a_join_is_not_fed_one_input() -> None:
    with pytest.raises(TypeError):
        join().process_batch(records([("k", 1, None)]))


steps = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(0, 6), st.integers(0, 8)), max_size=25
)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=400, deadline=None)
@given(
    left=steps,
    right=steps,
    schedule=st.lists(st.integers(0, 1), max_size=60),
    how=st.sampled_from([How.INNER, How.LEFT, How.RIGHT, How.FULL]),
    lower=st.integers(-8, 8),
    width=st.integers(0, 10),
    bound=st.integers(0, 8),
    every=st.integers(1, 3),
    restore=st.one_of(st.none(), st.integers(0, 60)),
)
def test_any_in_bound_interleaving_gives_the_reference_rows_and_ends_empty(
    backend: str,
    left: list[tuple[str, int, int]],
    right: list[tuple[str, int, int]],
    schedule: list[int],
    how: How,
    lower: int,
    width: int,
    bound: int,
    every: int,
    restore: int | None,
) -> None:
    """Each input within its out-of-orderness ``bound`` (so no row is late), fed in any
    interleaving, watermarks after every few rows, a restore from the accumulated
    checkpoints anywhere: the reference's rows, each once, and no state left."""
    left_events, right_events = in_bound(left, bound), in_bound(right, bound)
    upper = lower + width
    state = Backend(backend)

    def make() -> IntervalJoinOperator:
        return join(how, lower, upper, state_maps=state.state_maps())

    driver = Driver(make(), bound, state)
    driver.run(left_events, right_events, schedule, every, restore, make)
    emitted = [out(r) for r in driver.emitted]
    assert len(emitted) == len(set(emitted))  # no row twice
    assert set(emitted) == reference_interval(left_events, right_events, how, lower, upper)
    assert driver.late == 0
    assert (driver.operator.rows_held(0), driver.operator.rows_held(1)) == (0, 0)
    assert all(len(cache) == 0 for cache in driver.operator.state_maps())
