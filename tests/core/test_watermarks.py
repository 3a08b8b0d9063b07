"""Watermark generators and the combiner (semantics.md section 3)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from service.core.errors import ConfigError, PartitionError
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP, ManualClock
from service.core.watermarks import (
    Ascending,
    BoundedOutOfOrderness,
    Punctuated,
    WatermarkCombiner,
    WatermarkGenerator,
    make_generator,
)


# -- generators ---------------------------------------------------------------------------
def test_bounded_generator_has_no_watermark_before_the_first_record() -> None:
    assert BoundedOutOfOrderness(100).current_watermark == MIN_TIMESTAMP


def test_bounded_watermark_is_max_ts_minus_bound_minus_one() -> None:
    gen = BoundedOutOfOrderness(100)
    gen.on_event(1000, {})
    assert gen.current_watermark == 899


def test_bounded_watermark_follows_the_maximum_not_the_latest() -> None:
    gen = BoundedOutOfOrderness(10)
    gen.on_event(1000, {})
    gen.on_event(500, {})
    assert gen.current_watermark == 989
    gen.on_event(2000, {})
    assert gen.current_watermark == 1989


def test_bounded_watermark_saturates_at_min() -> None:
    gen = BoundedOutOfOrderness(10)
    gen.on_event(MIN_TIMESTAMP + 3, {})
    assert gen.current_watermark == MIN_TIMESTAMP


def test_ascending_watermark_is_max_ts_minus_one() -> None:
    gen = Ascending()
    gen.on_event(1000, {})
    assert gen.current_watermark == 999
    assert gen.max_out_of_orderness_ms == 0


def test_punctuated_watermark_is_the_largest_field_value_seen() -> None:
    gen = Punctuated("wm")
    gen.on_event(1, {"wm": 50})
    gen.on_event(2, {"wm": 30})
    assert gen.current_watermark == 50
    gen.on_event(3, {"wm": 70})
    assert gen.current_watermark == 70


def test_punctuated_generator_starts_at_min() -> None:
    assert Punctuated("wm").current_watermark == MIN_TIMESTAMP


def test_punctuated_missing_field_changes_nothing() -> None:
    gen = Punctuated("meta.wm")
    gen.on_event(1, {"meta": {"wm": 5}})
    gen.on_event(999, {"meta": {}})
    gen.on_event(999, {"x": 1})
    assert gen.current_watermark == 5
    assert gen.ignored == 0


def test_punctuated_ignores_record_timestamp() -> None:
    gen = Punctuated("wm")
    gen.on_event(10_000, {})
    assert gen.current_watermark == MIN_TIMESTAMP


@pytest.mark.parametrize("bad", ["100", True, None, float("nan"), [1]])
def test_punctuated_non_number_is_ignored_and_counted(bad: Any) -> None:
    gen = Punctuated("wm")
    gen.on_event(1, {"wm": 5})
    gen.on_event(2, {"wm": bad})
    assert gen.current_watermark == 5
    assert gen.ignored == 1


def test_punctuated_float_is_floored() -> None:
    gen = Punctuated("wm")
    gen.on_event(1, {"wm": 10.9})
    assert gen.current_watermark == 10


@pytest.mark.parametrize(
    "factory",
    [lambda: BoundedOutOfOrderness(5), Ascending, lambda: Punctuated("wm")],
    ids=["bounded", "ascending", "punctuated"],
)
def test_generator_snapshot_restore_continues_identically(
    factory: Callable[[], WatermarkGenerator],
) -> None:
    gen = factory()
    gen.on_event(100, {"wm": 90})
    twin = factory()
    twin.restore(json.loads(json.dumps(gen.snapshot())))
    assert twin.current_watermark == gen.current_watermark != MIN_TIMESTAMP
    for g in (gen, twin):
        g.on_event(50, {"wm": 40})
        g.on_event(200, {"wm": 190})
    assert twin.current_watermark == gen.current_watermark


def test_bounded_restore_of_an_empty_snapshot_is_min() -> None:
    gen = BoundedOutOfOrderness(5)
    gen.on_event(100, {})
    gen.restore(BoundedOutOfOrderness(5).snapshot())
    assert gen.current_watermark == MIN_TIMESTAMP
    gen.on_event(10, {})
    assert gen.current_watermark == 4


def test_bounded_restore_with_another_bound_rederives_the_watermark() -> None:
    gen = BoundedOutOfOrderness(5)
    gen.on_event(100, {})
    other = BoundedOutOfOrderness(50)
    other.restore(gen.snapshot())
    assert other.current_watermark == 49


def test_make_generator_builds_each_strategy() -> None:
    bounded = make_generator("bounded_out_of_orderness", 2000)
    assert isinstance(bounded, BoundedOutOfOrderness)
    assert bounded.max_out_of_orderness_ms == 2000
    assert isinstance(make_generator("ascending"), Ascending)
    punctuated = make_generator("punctuated", field="wm")
    assert isinstance(punctuated, Punctuated)
    assert punctuated.field == "wm"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("sometimes",), "unknown watermark strategy 'sometimes'"),
        (("punctuated",), "needs a field"),
        (("punctuated", 0, "a..b"), "empty part"),
        (("punctuated", 5, "wm"), "takes no max_out_of_orderness_ms"),
        (("ascending", 5), "takes no max_out_of_orderness_ms"),
        (("ascending", 0, "wm"), "takes no field"),
        (("bounded_out_of_orderness", 0, "wm"), "takes no field"),
        (("bounded_out_of_orderness", -1), "must be an int >= 0"),
        (("bounded_out_of_orderness", True), "must be an int >= 0"),
        (("bounded_out_of_orderness", 1.5), "must be an int >= 0"),
    ],
)
def test_make_generator_rejects_bad_input(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_generator(*args)


# -- combiner -----------------------------------------------------------------------------
def combiner(*partitions: int, idle: int | None = None, now: int = 0) -> WatermarkCombiner[int]:
    c: WatermarkCombiner[int] = WatermarkCombiner(idle_timeout_ms=idle)
    for p in partitions:
        c.assign(p, now)
    return c


def test_combined_watermark_starts_at_min() -> None:
    assert combiner(0, 1).current == MIN_TIMESTAMP


def test_combined_watermark_is_the_minimum_over_partitions() -> None:
    c = combiner(0, 1)
    c.update(0, 100, 0)
    assert c.combine(0) is None  # partition 1 is still at MIN
    c.update(1, 50, 0)
    assert c.combine(0) == 50
    assert c.current == 50


def test_combine_emits_only_when_greater_than_the_last_emitted() -> None:
    c = combiner(0)
    c.update(0, 10, 0)
    assert c.combine(0) == 10
    assert c.combine(0) is None
    c.update(0, 10, 1)
    assert c.combine(1) is None


def test_combined_watermark_never_goes_back() -> None:
    c = combiner(0, 1)
    c.update(0, 100, 0)
    c.update(1, 100, 0)
    assert c.combine(0) == 100
    c.update(1, 40, 1)
    assert c.combine(1) is None
    assert c.current == 100


def test_new_partition_starts_at_min_and_holds_the_minimum_back() -> None:
    c = combiner(0)
    c.update(0, 100, 0)
    assert c.combine(0) == 100
    c.assign(1, 0)
    assert c.partition_watermark(1) == MIN_TIMESTAMP
    c.update(0, 200, 1)
    assert c.combine(1) is None
    assert c.current == 100
    c.update(1, 150, 2)
    assert c.combine(2) == 150


def test_new_partition_starts_at_its_checkpointed_watermark() -> None:
    c = combiner(0)
    c.update(0, 500, 0)
    c.assign(1, 0, watermark=300)
    assert c.partition_watermark(1) == 300
    assert c.combine(0) == 300


def test_reassigned_lower_partition_does_not_pull_the_watermark_back() -> None:
    c = combiner(0, 1)
    c.update(0, 100, 0)
    c.update(1, 100, 0)
    assert c.combine(0) == 100
    c.revoke(1)
    c.assign(1, 1, watermark=20)
    assert c.combine(1) is None
    assert c.current == 100
    c.update(1, 120, 2)
    c.update(0, 130, 2)
    assert c.combine(2) == 120


def test_revoked_partition_leaves_the_minimum() -> None:
    c = combiner(0, 1)
    c.update(0, 100, 0)
    assert c.combine(0) is None
    c.revoke(1)
    assert c.partitions == [0]
    assert c.combine(0) == 100


def test_revoking_an_unassigned_partition_is_a_no_op() -> None:
    c = combiner(0)
    c.revoke(7)
    assert c.partitions == [0]


def test_assigning_an_assigned_partition_is_an_error() -> None:
    c = combiner(0)
    with pytest.raises(PartitionError, match="already assigned"):
        c.assign(0, 0)


def test_update_of_an_unassigned_partition_is_an_error() -> None:
    c = combiner(0)
    with pytest.raises(PartitionError, match="partition 3 is not assigned"):
        c.update(3, 1, 0)
    with pytest.raises(KeyError):
        c.partition_watermark(3)


def test_no_partition_assigned_means_no_movement() -> None:
    c: WatermarkCombiner[int] = WatermarkCombiner()
    assert c.combine(0) is None
    assert c.current == MIN_TIMESTAMP


def test_partition_becomes_idle_after_the_timeout_without_records() -> None:
    clock = ManualClock(1000)
    c = combiner(0, idle=100, now=clock.now_ms())
    assert not c.is_idle(0, clock.advance(99))
    assert c.is_idle(0, clock.advance(1))


def test_a_record_makes_an_idle_partition_active_again() -> None:
    c = combiner(0, idle=100)
    assert c.is_idle(0, 150)
    c.update(0, 5, 150)
    assert not c.is_idle(0, 150)
    assert c.idle_partitions(249) == []
    assert c.idle_partitions(250) == [0]


def test_idle_partition_leaves_the_minimum() -> None:
    clock = ManualClock()
    c = combiner(0, 1, idle=100)
    c.update(0, 500, clock.advance(10))
    assert c.combine(clock.now_ms()) is None  # 1 is active at MIN
    clock.set(100)  # 1 has had no record for 100 ms; 0 for 90
    assert c.idle_partitions(clock.now_ms()) == [1]
    assert c.combine(clock.now_ms()) == 500


def test_idle_partition_rejoins_the_minimum_with_its_next_record() -> None:
    c = combiner(0, 1, idle=100)
    c.update(0, 500, 50)
    assert c.combine(120) == 500  # 1 idle since 100
    c.update(1, 300, 130)
    c.update(0, 900, 130)
    assert c.combine(130) is None  # 1 rejoined below the emitted 500
    c.update(1, 700, 140)
    assert c.combine(140) == 700


def test_all_partitions_idle_means_no_movement() -> None:
    c = combiner(0, 1, idle=100)
    c.update(0, 500, 0)
    c.update(1, 400, 0)
    assert c.combine(0) == 400
    assert c.idle_partitions(100) == [0, 1]
    assert c.combine(100) is None
    assert c.current == 400


def test_no_idle_timeout_means_never_idle() -> None:
    c = combiner(0, 1)
    c.update(0, 500, 0)
    assert not c.is_idle(1, 10**12)
    assert c.idle_partitions(10**12) == []
    assert c.combine(10**12) is None


@pytest.mark.parametrize("bad", [0, -5, 1.5, True])
def test_idle_timeout_must_be_positive_int(bad: Any) -> None:
    with pytest.raises(ConfigError, match="idle_timeout_ms"):
        WatermarkCombiner(idle_timeout_ms=bad)


def test_finish_emits_max_once() -> None:
    c = combiner(0)
    c.update(0, 100, 0)
    assert c.finish() == MAX_TIMESTAMP
    assert c.current == MAX_TIMESTAMP
    assert c.finished
    c.update(0, 200, 1)
    assert c.combine(1) is None
    assert c.finish() == MAX_TIMESTAMP


def test_finish_moves_past_a_partition_still_at_min() -> None:
    c = combiner(0, 1)
    assert c.finish() == MAX_TIMESTAMP


def test_combiner_snapshot_is_json_safe_and_restores_identically() -> None:
    c: WatermarkCombiner[tuple[str, int]] = WatermarkCombiner(idle_timeout_ms=100)
    c.assign(("t", 0), 0)
    c.assign(("t", 1), 0)
    c.update(("t", 0), 300, 10)
    c.update(("t", 1), 200, 20)
    assert c.combine(20) == 200
    data = json.loads(json.dumps(c.snapshot()))
    twin: WatermarkCombiner[tuple[str, int]] = WatermarkCombiner(idle_timeout_ms=100)
    twin.restore(data)
    assert twin.partitions == c.partitions
    assert twin.current == 200
    for comb in (c, twin):
        comb.update(("t", 1), 400, 50)
    assert c.combine(50) == twin.combine(50) == 300
    assert c.idle_partitions(115) == twin.idle_partitions(115) == [("t", 0)]
    assert c.combine(115) == twin.combine(115) == 400


def test_combiner_restore_keeps_finished() -> None:
    c = combiner(0)
    c.finish()
    twin = combiner()
    twin.restore(c.snapshot())
    assert twin.finished
    assert twin.current == MAX_TIMESTAMP
    assert twin.combine(0) is None
