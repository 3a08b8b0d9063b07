"""The session fast path changes nothing: the same operator with and without it, fed the
same random records, emits the same results and writes the same snapshots (general.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.time import MAX_TIMESTAMP, ManualClock, TimeDomain
from service.operators.base import InputRecord
from service.operators.window import (
    GeneralWindowOperator,
    SessionAssigner,
    WindowOperatorConfig,
)
from service.operators.window.merging import add_window, extend_window

from .helpers import build, spec

BOUND = 20
AGGS = {"n": {"fn": "count"}, "s": {"fn": "sum", "field": "amount"}}

events = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.integers(min_value=-100, max_value=300),
        st.integers(min_value=-50, max_value=50),
        # arrival delay: mostly within the bound, some beyond it (late records)
        st.one_of(st.integers(0, BOUND), st.integers(0, 4 * BOUND)),
    ),
    min_size=1,
    max_size=100,
)
variants = st.sampled_from(
    [
        {},  # the default event-time trigger, an accumulator: the q11 case
        {"aggregations": {"n": {"fn": "count"}}},  # the q11 case again: drawn more often
        {"trigger": {"type": "event_time"}},
        {"trigger": {"type": "event_time", "purge": True}},
        {"trigger": {"type": "count", "count": 2}},
        {"trigger": {"type": "continuous", "interval_ms": 7}},
        {"evictor": {"type": "count", "max_count": 2}},  # a list of elements
    ]
)


def arrival_order(generated: list[tuple[str, int, int, int]]) -> list[InputRecord]:
    ordered = sorted(enumerate(generated), key=lambda item: (item[1][1] + item[1][3], item[0]))
    return [(key, ts, {"amount": amount}, i, None) for i, (key, ts, amount, _) in ordered]


class GeneralPathOnly(GeneralWindowOperator):
    """The operator without the session fast path: the seam general.py documents."""

    session_fast_path = False


def pair(operator_spec: dict[str, Any]) -> tuple[GeneralWindowOperator, GeneralWindowOperator]:
    """The operator with the fast path (as the factory builds it) and without it."""
    fast = build(operator_spec, clock=ManualClock(), late_output=True, track_keys=True)
    assert isinstance(fast, GeneralWindowOperator)
    config: WindowOperatorConfig = fast.config
    slow = GeneralPathOnly(config)
    assert fast._extend is not None and slow._extend is None  # the two paths, truly
    return fast, slow


def drained(op: GeneralWindowOperator) -> tuple[Any, ...]:
    return op.collector.drain()


def same_state(fast: GeneralWindowOperator, slow: GeneralWindowOperator) -> None:
    assert fast.snapshot() == slow.snapshot()
    assert fast.snapshot_changes() == slow.snapshot_changes()
    assert fast.gauges() == slow.gauges()
    assert fast.timer_counts() == slow.timer_counts()
    assert fast.stats() == slow.stats()


def roundtrip(snapshot: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = orjson.loads(orjson.dumps(snapshot))
    return loaded


@settings(max_examples=300, deadline=None)
@given(
    events,
    st.integers(1, 40),
    st.one_of(st.just(0), st.integers(0, 30)),  # allowed lateness: none, half the time
    variants,
    st.integers(1, 8),
    st.data(),
)
def test_the_session_fast_path_emits_and_snapshots_what_the_general_path_does(
    generated: list[Any],
    gap: int,
    lateness: int,
    variant: dict[str, Any],
    every: int,
    data: st.DataObject,
) -> None:
    records = arrival_order(generated)
    cut = data.draw(st.integers(0, len(records)), label="restore at")
    incremental = data.draw(st.booleans(), label="restore from incremental checkpoints")
    operator_spec = spec(
        {"type": "session", "gap_ms": gap}, aggregations=AGGS, allowed_lateness_ms=lateness
    )
    operator_spec.update(variant)
    if "evictor" in variant:
        operator_spec["aggregations"] = {"n": {"fn": "count"}}
    fast, slow = pair(operator_spec)
    changes: list[tuple[str, Any]] = []
    max_ts = -(2**63)
    for i, record in enumerate(records):
        if i == cut:
            # Each restores the other's checkpoint: they are the same data.
            same_state(fast, slow)
            if incremental:
                log = list(changes)
                fast, slow = pair(operator_spec)
                fast.restore_changes(log)
                slow.restore_changes(log)
            else:
                fast_snapshot = roundtrip(fast.snapshot())
                slow_snapshot = roundtrip(slow.snapshot())
                fast, slow = pair(operator_spec)
                fast.restore(slow_snapshot)
                slow.restore(fast_snapshot)
            same_state(fast, slow)
        fast.process_batch([record])
        slow.process_batch([record])
        max_ts = max(max_ts, record[1])
        if i % every == every - 1:
            fast.advance_watermark(max_ts - BOUND - 1)
            slow.advance_watermark(max_ts - BOUND - 1)
        assert drained(fast) == drained(slow)
        fast_changes = roundtrip(fast.snapshot_changes())
        assert fast_changes == roundtrip(slow.snapshot_changes())
        changes += fast_changes.items()
        assert fast.snapshot() == slow.snapshot()
    fast.advance_watermark(MAX_TIMESTAMP)
    slow.advance_watermark(MAX_TIMESTAMP)
    assert drained(fast) == drained(slow)
    same_state(fast, slow)


windows = st.lists(
    st.tuples(st.integers(0, 200), st.integers(1, 30)).map(lambda w: (w[0], w[0] + w[1])),
    max_size=12,
)


@settings(max_examples=500, deadline=None)
@given(windows)
def test_extend_window_does_what_add_window_does(added: list[tuple[int, int]]) -> None:
    """Window by window, the same mapping (and order), result and merge calls, or None."""
    general: dict[Any, Any] = {}
    fast: dict[Any, Any] = {}
    general_calls: list[Any] = []
    fast_calls: list[Any] = []
    for window in added:
        expected = add_window(
            general,
            window,
            SessionAssigner.merge_windows,
            lambda *args: general_calls.append(args),
        )
        before = list(fast.items())
        got = extend_window(fast, window, lambda *args: fast_calls.append(args))
        if got is None:
            assert list(fast.items()) == before  # untouched: it asked for the general path
            got = add_window(
                fast,
                window,
                SessionAssigner.merge_windows,
                lambda *args: fast_calls.append(args),
            )
        assert got == expected
        assert list(fast.items()) == list(general.items())
        assert fast_calls == general_calls


def test_processing_time_sessions_take_the_same_path_both_ways() -> None:
    """Processing-time sessions use extend_window too (no trigger inlining)."""
    clock = ManualClock()
    operator_spec = spec({"type": "session", "gap_ms": 10}, time="processing")
    fast = build(operator_spec, clock=clock)
    assert isinstance(fast, GeneralWindowOperator)
    slow = GeneralPathOnly(fast.config)
    for now, key in [(0, "u"), (5, "u"), (12, "v"), (15, "u"), (30, "u"), (31, "v"), (100, "v")]:
        clock.set(now)
        for op in (fast, slow):
            op.process_batch([(key, now, {"amount": 1}, 0, None)])
            op.advance_processing_time(now)
        assert drained(fast) == drained(slow)
        assert fast.snapshot() == slow.snapshot()
        assert list(fast._timers.timers(TimeDomain.PROCESSING_TIME)) == list(
            slow._timers.timers(TimeDomain.PROCESSING_TIME)
        )


@pytest.mark.parametrize("gap", [1, 10])
def test_a_session_ending_at_max_keeps_its_timers_both_ways(gap: int) -> None:
    fast, slow = pair(spec({"type": "session", "gap_ms": gap}))
    for ts in (MAX_TIMESTAMP - gap - 3, MAX_TIMESTAMP - gap):
        for op in (fast, slow):
            op.process_batch([("u", ts, {"amount": 1}, 0, None)])
        assert fast.snapshot() == slow.snapshot()
