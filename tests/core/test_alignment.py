"""Watermark alignment: which partitions are paused and resumed (issue 10)."""

from __future__ import annotations

import pytest

from service.core.alignment import WatermarkAlignment
from service.core.errors import ConfigError
from service.core.time import MIN_TIMESTAMP


def test_a_partition_more_than_max_drift_ahead_is_paused() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(1000)
    to_pause, to_resume = alignment.decide({0: 5000, 1: 2000}, combined=2000, idle=())
    assert (to_pause, to_resume) == ([0], [])
    assert alignment.paused == {0}


def test_a_partition_exactly_max_drift_ahead_keeps_running() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(1000)
    assert alignment.decide({0: 3000, 1: 2000}, combined=2000, idle=()) == ([], [])


def test_a_paused_partition_resumes_once_within_max_drift() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(1000)
    alignment.decide({0: 5000, 1: 2000}, combined=2000, idle=())
    assert alignment.decide({0: 5000, 1: 3500}, combined=3500, idle=()) == ([], [])
    assert alignment.decide({0: 5000, 1: 4000}, combined=4000, idle=()) == ([], [0])
    assert alignment.paused == frozenset()


def test_pausing_is_reported_once_not_on_every_decision() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(1000)
    alignment.decide({0: 5000, 1: 2000}, combined=2000, idle=())
    assert alignment.decide({0: 5000, 1: 2100}, combined=2100, idle=()) == ([], [])
    assert alignment.pauses == 1


def test_nothing_is_paused_before_the_first_combined_watermark() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(0)
    assert alignment.decide({0: 9000, 1: MIN_TIMESTAMP}, MIN_TIMESTAMP, idle=()) == ([], [])


def test_paused_partitions_resume_when_every_running_partition_is_idle() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(1000)
    alignment.decide({0: 5000, 1: 2000}, combined=2000, idle=())
    assert alignment.decide({0: 5000, 1: 2000}, combined=2000, idle={1}) == ([], [0])
    assert alignment.resumes == 1


def test_a_revoked_paused_partition_is_forgotten_without_a_resume() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(1000)
    alignment.decide({0: 5000, 1: 2000, 2: 2000}, combined=2000, idle=())
    assert alignment.decide({1: 2000, 2: 2000}, combined=2000, idle=()) == ([], [])
    assert alignment.paused == frozenset()


def test_drift_is_zero_for_partitions_behind_the_combined_watermark() -> None:
    alignment: WatermarkAlignment[int] = WatermarkAlignment(10)
    assert alignment.drift(100, 500) == 0
    assert alignment.drift(800, 500) == 300


def test_negative_max_drift_is_refused() -> None:
    with pytest.raises(ConfigError):
        WatermarkAlignment(-1)
