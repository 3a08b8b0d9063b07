"""The built-in functions usable by name from a pipeline spec."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.time import ManualClock
from service.operators.process import (
    BUILTIN_FUNCTIONS,
    InvalidParams,
    KeyedProcessOperator,
    build_process_operator,
    validate_function,
)
from service.operators.process.builtins.daily_counter import DAY_MS, next_midnight
from service.operators.process.builtins.inactivity import InactivityTimeout
from service.operators.process.context import Context
from tests.operators.process.harness import outputs, rec, records, values


def build(function: str, params: dict[str, Any], clock: ManualClock) -> KeyedProcessOperator:
    return build_process_operator("p", function, params, clock, [])


# -- inactivity_timeout ------------------------------------------------------------------
def test_inactivity_alerts_when_watermark_passes_last_seen_plus_timeout() -> None:
    op = build("inactivity_timeout", {"timeout_ms": 100}, ManualClock(0))
    op.process_batch([rec("a", 1_000, {})])
    op.advance_watermark(1_099)
    assert values(op) == []
    op.advance_watermark(1_100)
    assert values(op) == [
        (
            "a",
            1_100,
            {"alert": "inactive", "key": "a", "last_seen": 1_000, "timeout_ms": 100},
        )
    ]
    assert op.gauges().keys == 0 and op.gauges().event_timers == 0


def test_inactivity_each_record_moves_the_timer() -> None:
    op = build("inactivity_timeout", {"timeout_ms": 100}, ManualClock(0))
    op.process_batch([rec("a", 1_000, {}), rec("a", 1_050, {})])
    assert op.gauges().event_timers == 1  # the old timer was deleted
    op.advance_watermark(1_120)
    assert values(op) == []
    op.advance_watermark(1_150)
    assert [v["last_seen"] for _, _, v in values(op)] == [1_050]


def test_inactivity_out_of_order_record_does_not_move_the_timer_back() -> None:
    op = build("inactivity_timeout", {"timeout_ms": 100}, ManualClock(0))
    op.process_batch([rec("a", 1_000, {}), rec("a", 900, {})])
    op.advance_watermark(1_050)
    assert values(op) == []
    op.advance_watermark(1_100)
    assert len(values(op)) == 1


def test_inactivity_in_processing_time_follows_the_clock() -> None:
    clock = ManualClock(10_000)
    op = build("inactivity_timeout", {"timeout_ms": 500, "time": "processing"}, clock)
    op.process_batch([rec("a", 1, {})])
    clock.set(10_400)
    op.process_batch([rec("a", 2, {})])
    assert op.next_processing_time() == 10_900
    clock.set(10_900)
    op.advance_processing_time(10_900)
    assert values(op) == [
        ("a", None, {"alert": "inactive", "key": "a", "last_seen": 10_400, "timeout_ms": 500})
    ]


def test_inactivity_params_report_every_problem() -> None:
    with pytest.raises(InvalidParams) as info:
        build("inactivity_timeout", {"timeout_ms": 0, "time": "wall", "x": 1}, ManualClock(0))
    problems = info.value.problems
    assert any(p.startswith("timeout_ms:") for p in problems)
    assert any(p.startswith("time:") for p in problems)
    assert any(p.startswith("x: unexpected") for p in problems)


def test_inactivity_timeout_is_required_and_an_integer() -> None:
    cls = BUILTIN_FUNCTIONS["inactivity_timeout"]
    assert cls.validate_params({}) == ["timeout_ms: required"]
    assert cls.validate_params({"timeout_ms": True}) == ["timeout_ms: must be an integer, got True"]


class _PerRecordInactivity(InactivityTimeout):
    """inactivity_timeout with its batch path switched off: process_element per record."""

    def open(self, ctx: Context) -> None:
        super().open(ctx)
        self.process_records = None


_steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("batch"),
            st.lists(
                st.tuples(st.sampled_from("abcde"), st.integers(0, 400)), min_size=1, max_size=8
            ),
        ),
        st.tuples(st.just("watermark"), st.integers(0, 600)),
        st.tuples(st.just("restore"), st.just(0)),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(steps=_steps, timeout=st.integers(1, 150))
def test_inactivity_batch_path_does_what_per_record_calls_do(
    steps: list[tuple[str, Any]], timeout: int
) -> None:
    batched = KeyedProcessOperator("p", InactivityTimeout(timeout), ManualClock(0))
    per_record = KeyedProcessOperator("p", _PerRecordInactivity(timeout), ManualClock(0))
    assert batched._records_path is not None and per_record._records_path is None
    offset = 0
    for step, arg in steps:
        for op in (batched, per_record):
            if step == "batch":
                op.process_batch(records([(k, ts, {}) for k, ts in arg], start=offset))
            elif step == "watermark":
                op.advance_watermark(arg)
            else:
                snapshot = orjson.loads(orjson.dumps(op.snapshot()))
                op.restore(snapshot)
        if step == "batch":
            offset += len(arg)
        assert outputs(batched) == outputs(per_record)
        assert batched.snapshot() == per_record.snapshot()
        assert batched.gauges() == per_record.gauges()
        assert batched.timer_counts() == per_record.timer_counts()
        assert batched.snapshot_changes() == per_record.snapshot_changes()


def test_inactivity_batch_path_dead_letters_a_failing_record_and_goes_on() -> None:
    op = build("inactivity_timeout", {"timeout_ms": 100}, ManualClock(0))
    broken: Any = ("b", None, {}, 1, ("src", 1))  # no timestamp: deadline cannot be computed
    op.process_batch([rec("a", 1_000, {}, pos=0), broken, rec("c", 1_010, {}, pos=2)])
    _, _, failed = op.collector.drain()
    assert [(f.source, f.key, f.reason) for f in failed] == [
        (("src", 1), "b", "user_function_error")
    ]
    assert "TypeError" in failed[0].detail and "offset 1" in failed[0].detail
    assert op.gauges().event_timers == 2  # a and c
    op.advance_watermark(1_110)
    assert sorted(v["key"] for _, _, v in values(op)) == ["a", "c"]


def test_value_state_entries_are_refused_for_state_with_a_ttl() -> None:
    class WithTtl(InactivityTimeout):
        def open(self, ctx: Context) -> None:
            self.ttl_state = ctx.value_state("t", ttl_ms=10)
            self.plain_state = ctx.value_state("p")

    function = WithTtl(5)
    KeyedProcessOperator("p", function, ManualClock(0))
    assert function.plain_state.entries == {}
    with pytest.raises(ValueError, match="has a TTL"):
        _ = function.ttl_state.entries


# -- dedupe ------------------------------------------------------------------------------
def test_dedupe_drops_repeats_within_ttl() -> None:
    op = build("dedupe", {"ttl_ms": 100}, ManualClock(0))
    op.process_batch(
        [
            rec("a", 1_000, {"x": 1, "y": 2}, 0),
            rec("a", 1_050, {"y": 2, "x": 1}, 1),  # same value, other key order
            rec("b", 1_050, {"x": 1, "y": 2}, 2),  # other key: not a repeat
            rec("a", 1_060, {"x": 2, "y": 2}, 3),
        ]
    )
    assert [(k, v) for k, _, v in values(op)] == [
        ("a", {"x": 1, "y": 2}),
        ("b", {"x": 1, "y": 2}),
        ("a", {"x": 2, "y": 2}),
    ]


def test_dedupe_forwards_again_after_ttl() -> None:
    op = build("dedupe", {"ttl_ms": 100}, ManualClock(0))
    op.process_batch([rec("a", 1_000, "v", 0), rec("a", 1_099, "v", 1), rec("a", 1_100, "v", 2)])
    assert [ts for _, ts, _ in values(op)] == [1_000, 1_100]


def test_dedupe_state_expires_by_timer() -> None:
    op = build("dedupe", {"ttl_ms": 100}, ManualClock(0))
    op.process_batch([rec(f"k{i}", 1_000 + i, "v", i) for i in range(50)])
    assert op.gauges().keys == 50
    op.advance_watermark(1_120)
    assert op.gauges().keys == 29  # k21..k49 expire at 1121..1149
    op.advance_watermark(2_000)
    assert op.gauges().keys == 0
    assert op.gauges().event_timers == 0


def test_dedupe_by_fields_ignores_other_fields_and_tells_missing_from_null() -> None:
    op = build("dedupe", {"ttl_ms": 1_000, "fields": ["order.id"]}, ManualClock(0))
    op.process_batch(
        [
            rec("a", 1, {"order": {"id": 7}, "retry": 0}, 0),
            rec("a", 2, {"order": {"id": 7}, "retry": 1}, 1),
            rec("a", 3, {"order": {"id": None}}, 2),
            rec("a", 4, {"order": {}}, 3),
            rec("a", 5, {"order": {}}, 4),
        ]
    )
    assert [ts for _, ts, _ in values(op)] == [1, 3, 4]


def test_dedupe_params_validated() -> None:
    problems = validate_function("dedupe", {"fields": ["a..b", 3], "ttl_ms": -1}, [])
    assert problems[0].startswith("params.ttl_ms:")
    assert any(p.startswith("params.fields[0]:") for p in problems)
    assert any(p.startswith("params.fields[1]:") for p in problems)


# -- daily_reset_counter -----------------------------------------------------------------
def test_next_midnight_with_offset() -> None:
    # 2024-01-01T22:30Z is 2024-01-02T00:30 at UTC+2; the next local midnight is
    # 2024-01-02T22:00Z.
    now = 1_704_148_200_000
    assert next_midnight(now, 120 * 60_000) == 1_704_232_800_000
    assert next_midnight(now, 0) == 1_704_153_600_000  # 2024-01-02T00:00Z
    assert next_midnight(1_704_153_600_000, 0) == 1_704_153_600_000 + DAY_MS


def test_daily_counter_counts_per_key_and_resets_at_local_midnight() -> None:
    local_midnight_utc = 1_704_232_800_000  # 2024-01-03T00:00 at UTC+2
    clock = ManualClock(local_midnight_utc - 60_000)
    op = build("daily_reset_counter", {"utc_offset_minutes": 120}, clock)
    op.process_batch([rec("a", 0, {}, 0), rec("a", 0, {}, 1), rec("b", 0, {}, 2)])
    assert op.next_processing_time() == local_midnight_utc
    clock.set(local_midnight_utc - 1)
    op.advance_processing_time(clock.now_ms())
    op.process_batch([rec("a", 0, {}, 3)])
    clock.set(local_midnight_utc)
    op.advance_processing_time(local_midnight_utc)
    assert op.gauges().keys == 0
    op.process_batch([rec("a", 0, {}, 4)])
    assert [(k, v["count"]) for k, _, v in values(op)] == [
        ("a", 1),
        ("a", 2),
        ("b", 1),
        ("a", 3),
        ("a", 1),
    ]
    assert op.next_processing_time() == local_midnight_utc + DAY_MS


def test_daily_counter_starts_a_new_day_even_if_the_timer_has_not_fired_yet() -> None:
    midnight = DAY_MS * 20_000
    clock = ManualClock(midnight - 10)
    op = build("daily_reset_counter", {}, clock)
    op.process_batch([rec("a", 0, {}, 0)])
    clock.set(midnight + 5)  # runtime has not called advance_processing_time yet
    op.process_batch([rec("a", 0, {}, 1)])
    assert [v["count"] for _, _, v in values(op)] == [1, 1]
    assert op.gauges().processing_timers == 1


@pytest.mark.parametrize("offset", [841, -841, 1.5, "60"])
def test_daily_counter_offset_must_be_within_14_hours(offset: Any) -> None:
    with pytest.raises(InvalidParams, match="utc_offset_minutes"):
        build("daily_reset_counter", {"utc_offset_minutes": offset}, ManualClock(0))
