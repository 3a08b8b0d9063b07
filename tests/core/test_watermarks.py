"""Watermark generators (semantics.md section 3); the combiner is in test_combiner.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from service.core.errors import ConfigError
from service.core.time import MIN_TIMESTAMP
from service.core.watermarks import (
    Ascending,
    BoundedOutOfOrderness,
    Punctuated,
    StrictlyAscending,
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


def test_strictly_ascending_watermark_is_max_ts_so_a_tie_with_the_newest_is_late() -> None:
    """Flink SQL's ``WATERMARK FOR ts AS ts``: ``W = max_ts``."""
    gen = StrictlyAscending()
    assert gen.current_watermark == MIN_TIMESTAMP
    gen.on_event(1000, {})
    assert gen.current_watermark == 1000
    gen.on_event(400, {})
    assert gen.current_watermark == 1000
    assert gen.watermark_after(1001, {}) == 1001
    assert gen.max_out_of_orderness_ms == -1


def test_strictly_ascending_admits_up_to_the_first_record_past_the_limit() -> None:
    gen = StrictlyAscending()
    gen.on_event(10, {})
    records = [(None, ts, {}) for ts in (12, 15, 16, 30, 31)]
    # W before each: 10, 12, 15, 16, 30: the record at 16 carries W past 15, the last.
    assert gen.admit(records, 0, 15) == 3
    assert gen.admit(records, 0, 9) == 0


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
    [lambda: BoundedOutOfOrderness(5), Ascending, StrictlyAscending, lambda: Punctuated("wm")],
    ids=["bounded", "ascending", "strictly_ascending", "punctuated"],
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
    assert isinstance(make_generator("strictly_ascending"), StrictlyAscending)
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
        (("strictly_ascending", 1), "takes no max_out_of_orderness_ms"),
        (("strictly_ascending", 0, "wm"), "takes no field"),
        (("bounded_out_of_orderness", 0, "wm"), "takes no field"),
        (("bounded_out_of_orderness", -1), "must be an int >= 0"),
        (("bounded_out_of_orderness", True), "must be an int >= 0"),
        (("bounded_out_of_orderness", 1.5), "must be an int >= 0"),
    ],
)
def test_make_generator_rejects_bad_input(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make_generator(*args)


# -- admitting records up to a limit (what alignment holds back by) ------------------------
def stamped(*timestamps: int) -> list[tuple[str, int, dict[str, Any]]]:
    return [("k", ts, {"wm": ts - 10}) for ts in timestamps]


def test_bounded_takes_records_while_the_watermark_before_each_is_within_the_limit() -> None:
    g = BoundedOutOfOrderness(10)  # W = max_ts - 11
    g.on_event(100, None)  # W = 89
    # limit 100: a record may be taken while max_ts before it <= 111; the first above
    # 111 (120) is the last taken, and moves W past the limit by its own step
    assert g.admit(stamped(105, 111, 120, 121, 90), 0, 100) == 3
    assert g.current_watermark == 89  # admit changes nothing


def test_bounded_takes_everything_within_the_limit() -> None:
    g = BoundedOutOfOrderness(0)
    assert g.admit(stamped(1, 2, 3), 0, 1000) == 3
    assert g.admit(stamped(1, 2, 3), 1, 1000) == 2


def test_bounded_takes_nothing_once_past_the_limit() -> None:
    g = BoundedOutOfOrderness(0)
    g.on_event(500, None)
    assert g.admit(stamped(1, 2), 0, 400) == 0


def test_a_generator_without_a_watermark_takes_its_first_record_at_any_limit() -> None:
    assert BoundedOutOfOrderness(0).admit(stamped(10**12, 10**12 + 1), 0, MIN_TIMESTAMP) == 1
    assert Punctuated("wm").admit(stamped(10**12, 10**12 + 1), 0, MIN_TIMESTAMP) == 1


def test_punctuated_takes_records_while_the_watermark_before_each_is_within_the_limit() -> None:
    g = Punctuated("wm")
    records = [("k", 0, {"wm": 50}), ("k", 0, {}), ("k", 0, {"wm": 200}), ("k", 0, {"wm": 1})]
    assert g.admit(records, 0, 100) == 3
    assert g.admit(records, 3, 100) == 1


@pytest.mark.parametrize("make", [lambda: BoundedOutOfOrderness(7), lambda: Punctuated("wm")])
def test_watermark_after_is_what_taking_the_record_gives(
    make: Callable[[], WatermarkGenerator],
) -> None:
    g = make()
    for ts in (100, 50, 300, 299):
        peek = g.watermark_after(ts, {"wm": ts - 10})
        g.on_event(ts, {"wm": ts - 10})
        assert peek == g.current_watermark
