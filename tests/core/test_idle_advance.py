"""Idle advance: event time follows the wall clock while all input is quiet (issue 10)."""

from __future__ import annotations

import pytest

from service.core.combiner import WatermarkCombiner
from service.core.errors import ConfigError
from service.core.time import MAX_TIMESTAMP


def _quiet_after(peak: int, at: int) -> WatermarkCombiner[int]:
    combiner: WatermarkCombiner[int] = WatermarkCombiner(1000, idle_advance=True)
    combiner.assign(0, now=0)
    combiner.assign(1, now=0)
    combiner.update(0, peak - 500, at)
    combiner.update(1, peak, at)
    assert combiner.combine(at) == peak - 500
    return combiner


def test_when_every_partition_is_idle_the_watermark_runs_on_with_the_clock() -> None:
    combiner = _quiet_after(peak=10_000, at=100)
    assert combiner.combine(1100) == 10_000 + 1000
    assert combiner.combine(1600) == 10_000 + 1500
    assert combiner.idle_advancing


def test_idle_advance_does_not_start_before_the_idle_timeout() -> None:
    combiner = _quiet_after(peak=10_000, at=100)
    assert combiner.combine(1099) is None
    assert not combiner.idle_advancing


def test_a_record_stops_idle_advance_and_no_operator_goes_back() -> None:
    combiner = _quiet_after(peak=10_000, at=100)
    assert list(combiner.advance(2100)) == [(0, 12_000), (1, 12_000)]
    combiner.update(0, 10_100, 2200)  # a record arrives, behind the advanced watermark
    assert list(combiner.advance(2200)) == []
    assert not combiner.idle_advancing
    assert combiner.current == 10_100  # the minimum again; the operators keep 12_000
    assert combiner.delivered(0) == combiner.delivered(1) == 12_000


def test_normal_rules_resume_once_the_active_partitions_pass_the_advanced_watermark() -> None:
    combiner = _quiet_after(peak=10_000, at=100)
    combiner.combine(2100)
    combiner.update(0, 13_000, 2200)
    combiner.update(1, 14_000, 2200)
    assert combiner.combine(2200) == 13_000


def test_without_idle_advance_an_idle_input_keeps_its_watermark() -> None:
    combiner: WatermarkCombiner[int] = WatermarkCombiner(1000)
    combiner.assign(0, now=0)
    combiner.update(0, 10_000, 100)
    assert combiner.combine(100) == 10_000
    assert combiner.combine(50_000) is None


def test_idle_advance_never_reaches_the_end_of_input_watermark() -> None:
    combiner = _quiet_after(peak=MAX_TIMESTAMP - 10, at=100)
    assert combiner.combine(10_000) == MAX_TIMESTAMP - 1


def test_idle_advance_survives_a_snapshot() -> None:
    combiner = _quiet_after(peak=10_000, at=100)
    restored: WatermarkCombiner[int] = WatermarkCombiner(1000, idle_advance=True)
    restored.restore(combiner.snapshot())
    assert restored.combine(1100) == 11_000


def test_a_restored_partition_runs_on_from_its_assignment() -> None:
    combiner: WatermarkCombiner[int] = WatermarkCombiner(1000, idle_advance=True)
    combiner.assign(0, now=5000, watermark=10_000)
    assert combiner.combine(5000) == 10_000
    assert combiner.combine(6500) == 11_500


def test_idle_advance_needs_an_idle_timeout() -> None:
    with pytest.raises(ConfigError):
        WatermarkCombiner(None, idle_advance=True)
