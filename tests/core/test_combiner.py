"""The combined watermark and what each operator is delivered (semantics.md section 3)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from service.core.combiner import WatermarkCombiner
from service.core.errors import ConfigError, PartitionError
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP, ManualClock


def combiner(*partitions: int, idle: int | None = None, now: int = 0) -> WatermarkCombiner[int]:
    c: WatermarkCombiner[int] = WatermarkCombiner(idle_timeout_ms=idle)
    for p in partitions:
        c.assign(p, now)
    return c


def adv(c: WatermarkCombiner[Any], now: int) -> list[tuple[Any, int]]:
    """The deliveries of one advance, as a list."""
    return list(c.advance(now))


def delivered(c: WatermarkCombiner[int]) -> dict[int, int]:
    return {p: c.delivered(p) for p in c.partitions}


def test_combined_watermark_starts_at_min() -> None:
    assert combiner(0, 1).current == MIN_TIMESTAMP


def test_combined_watermark_is_the_minimum_over_partitions() -> None:
    c = combiner(0, 1)
    c.update(0, 100, 0)
    assert adv(c, 0) == [] and c.current == MIN_TIMESTAMP  # partition 1 is still at MIN
    c.update(1, 50, 0)
    assert adv(c, 0) == [(0, 50), (1, 50)]
    assert c.current == 50


def test_nothing_is_delivered_when_nothing_changed() -> None:
    c = combiner(0)
    c.update(0, 10, 0)
    assert adv(c, 0) == [(0, 10)]
    assert adv(c, 0) == []
    c.update(0, 10, 1)
    assert adv(c, 1) == []


def test_a_partition_joining_behind_holds_the_combined_watermark_back() -> None:
    c = combiner(0)
    c.update(0, 100, 0)
    adv(c, 0)
    c.assign(1, 0)
    assert c.partition_watermark(1) == MIN_TIMESTAMP
    c.update(0, 200, 1)
    assert adv(c, 1) == []
    assert c.current == MIN_TIMESTAMP  # the newcomer has no watermark yet
    c.update(1, 150, 2)
    assert adv(c, 2) == [(0, 150), (1, 150)]  # 0 had 100 before 1 joined
    assert c.current == 150


def test_the_others_are_never_wound_back_when_a_partition_joins_behind() -> None:
    c = combiner(0, 1)
    c.update(0, 1000, 0)
    c.update(1, 1000, 0)
    adv(c, 0)
    c.assign(2, 1, watermark=200, delivered=100)
    assert adv(c, 1) == [(2, 200)]  # the newcomer gets the new minimum, its own
    assert c.current == 200
    assert delivered(c) == {0: 1000, 1: 1000, 2: 200}


def test_a_partition_joining_behind_gets_the_minimum_delivered_as_it_catches_up() -> None:
    c = combiner(0)
    c.update(0, 1000, 0)
    adv(c, 0)
    c.assign(1, 1, watermark=300, delivered=300)
    assert adv(c, 1) == []  # its own watermark is the minimum: already delivered
    c.update(1, 700, 2)
    assert adv(c, 2) == [(1, 700)]
    c.update(1, 1500, 3)
    assert adv(c, 3) == [(1, 1000)]  # now partition 0 holds the minimum
    c.update(0, 1200, 4)
    assert adv(c, 4) == [(0, 1200), (1, 1200)]


def test_a_joining_partition_is_delivered_the_minimum_at_once_when_behind_it() -> None:
    c = combiner(0)
    c.update(0, 500, 0)
    adv(c, 0)
    c.assign(1, 1, watermark=800, delivered=100)  # its checkpoint delivered 100
    assert adv(c, 1) == [(1, 500)]


def test_a_revoked_partition_leaves_the_minimum() -> None:
    c = combiner(0, 1)
    c.update(0, 100, 0)
    assert adv(c, 0) == []
    c.revoke(1)
    assert c.partitions == [0]
    assert adv(c, 0) == [(0, 100)]


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
    assert adv(c, 0) == []
    assert c.current == MIN_TIMESTAMP


# -- idleness -----------------------------------------------------------------------------
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


def test_an_idle_partition_leaves_the_minimum_and_still_gets_it_delivered() -> None:
    clock = ManualClock()
    c = combiner(0, 1, idle=100)
    c.update(0, 500, clock.advance(10))
    assert adv(c, clock.now_ms()) == []  # 1 is active at MIN
    clock.set(100)  # 1 has had no record for 100 ms; 0 for 90
    assert c.idle_partitions(clock.now_ms()) == [1]
    assert adv(c, clock.now_ms()) == [(0, 500), (1, 500)]


def test_an_idle_partition_rejoins_the_minimum_without_winding_anyone_back() -> None:
    c = combiner(0, 1, idle=100)
    c.update(0, 500, 50)
    assert adv(c, 120) == [(0, 500), (1, 500)]  # 1 idle since 100
    c.update(1, 300, 130)
    c.update(0, 900, 130)
    assert adv(c, 130) == []  # 1 rejoined below what everyone has
    assert c.current == 300
    c.update(1, 700, 140)
    assert adv(c, 140) == [(0, 700), (1, 700)]


def test_all_partitions_idle_means_no_movement() -> None:
    c = combiner(0, 1, idle=100)
    c.update(0, 500, 0)
    c.update(1, 400, 0)
    assert adv(c, 0) == [(0, 400), (1, 400)]
    assert c.idle_partitions(100) == [0, 1]
    assert adv(c, 100) == []
    assert c.current == 400


def test_no_idle_timeout_means_never_idle() -> None:
    c = combiner(0, 1)
    c.update(0, 500, 0)
    assert not c.is_idle(1, 10**12)
    assert c.idle_partitions(10**12) == []
    assert adv(c, 10**12) == []


@pytest.mark.parametrize("bad", [0, -5, 1.5, True])
def test_idle_timeout_must_be_positive_int(bad: Any) -> None:
    with pytest.raises(ConfigError, match="idle_timeout_ms"):
        WatermarkCombiner(idle_timeout_ms=bad)


# -- bounded input ------------------------------------------------------------------------
def test_a_finished_partition_gets_max_and_leaves_the_minimum() -> None:
    c = combiner(0, 1)
    c.update(0, 100, 0)
    c.update(1, 50, 0)
    adv(c, 0)
    c.finish(1)
    assert adv(c, 1) == [(0, 100), (1, MAX_TIMESTAMP)]
    assert c.current == 100
    assert c.is_finished(1) and not c.is_idle(1, 10**12)


def test_when_every_partition_is_finished_the_combined_watermark_is_max() -> None:
    c = combiner(0, 1)
    c.finish(0)
    c.finish(1)
    assert adv(c, 0) == [(0, MAX_TIMESTAMP), (1, MAX_TIMESTAMP)]
    assert c.current == MAX_TIMESTAMP


def test_finished_and_idle_partitions_alone_do_not_move_the_watermark() -> None:
    c = combiner(0, 1, idle=100)
    c.update(0, 100, 0)
    c.finish(1)
    assert adv(c, 200) == [(1, MAX_TIMESTAMP)]  # 0 is idle: no minimum, no movement
    assert c.delivered(0) == MIN_TIMESTAMP


def test_a_partition_joining_a_finished_replica_brings_the_minimum_back() -> None:
    c = combiner(0)
    c.finish(0)
    adv(c, 0)
    c.assign(1, 1, watermark=40)
    assert adv(c, 1) == [(1, 40)]
    assert c.current == 40


# -- alignment's view ---------------------------------------------------------------------
def test_minimum_over_the_others_leaves_out_the_partition_asked_for() -> None:
    c = combiner(0, 1, 2, idle=100)
    c.update(0, 10, 50)
    c.update(1, 20, 50)
    c.update(2, 5, 0)
    assert c.minimum(50) == 5
    assert c.minimum(50, excluding=2) == 10
    assert c.minimum(100, excluding=0) == 20  # 2 is idle at 100
    c.finish(1)
    assert c.minimum(100, excluding=0) is None


# -- snapshots ----------------------------------------------------------------------------
def test_combiner_snapshot_is_json_safe_and_restores_identically() -> None:
    c: WatermarkCombiner[tuple[str, int]] = WatermarkCombiner(idle_timeout_ms=100)
    c.assign(("t", 0), 0)
    c.assign(("t", 1), 0)
    c.update(("t", 0), 300, 10)
    c.update(("t", 1), 200, 20)
    assert adv(c, 20) == [(("t", 0), 200), (("t", 1), 200)]
    data = json.loads(json.dumps(c.snapshot()))
    twin: WatermarkCombiner[tuple[str, int]] = WatermarkCombiner(idle_timeout_ms=100)
    twin.restore(data)
    assert twin.partitions == c.partitions
    assert twin.current == 200
    assert twin.delivered(("t", 1)) == 200
    for comb in (c, twin):
        comb.update(("t", 1), 400, 50)
    assert adv(c, 50) == adv(twin, 50) == [(("t", 0), 300), (("t", 1), 300)]
    assert c.idle_partitions(115) == twin.idle_partitions(115) == [("t", 0)]
    assert adv(c, 115) == adv(twin, 115) == [(("t", 0), 400), (("t", 1), 400)]


def test_combiner_restore_keeps_finished_partitions() -> None:
    c = combiner(0)
    c.finish(0)
    adv(c, 0)
    twin = combiner()
    twin.restore(c.snapshot())
    assert twin.is_finished(0)
    assert twin.delivered(0) == MAX_TIMESTAMP
    assert adv(twin, 0) == []
