"""Property tests: in-bound shuffles give brute-force results; restoring mid-run changes nothing."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.time import MAX_TIMESTAMP, ManualClock
from service.operators.base import InputRecord
from service.operators.window import SlidingAssigner, TumblingAssigner, WindowOperator

from .helpers import BACKENDS, build, results, spec

BOUND = 25
AGGS = {
    "n": {"fn": "count"},
    "s": {"fn": "sum", "field": "amount"},
    "lo": {"fn": "min", "field": "amount"},
    "hi": {"fn": "max", "field": "amount"},
}

events = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.integers(min_value=-200, max_value=400),
        st.integers(min_value=-50, max_value=50),
        st.integers(min_value=0, max_value=BOUND),  # arrival delay
    ),
    min_size=1,
    max_size=120,
)
assigners = st.one_of(
    st.builds(
        lambda size, offset: {"type": "tumbling", "size_ms": size, "offset_ms": offset},
        st.integers(1, 60),
        st.integers(-30, 30),
    ),
    st.builds(
        lambda size, slide, offset: {
            "type": "sliding",
            "size_ms": size,
            "slide_ms": slide,
            "offset_ms": offset,
        },
        st.integers(1, 60),
        st.integers(1, 30),
        st.integers(-30, 30),
    ),
)


def arrival_order(generated: list[tuple[str, int, int, int]]) -> list[InputRecord]:
    """Each record arrives ``delay <= BOUND`` after its timestamp: within the bound."""
    ordered = sorted(enumerate(generated), key=lambda item: (item[1][1] + item[1][3], item[0]))
    return [(key, ts, {"amount": amount}, i, None) for i, (key, ts, amount, _) in ordered]


def run(
    op: WindowOperator, records: list[InputRecord], every: int, max_ts: int = -(2**63)
) -> tuple[list[Any], int]:
    out: list[Any] = []
    for i, record in enumerate(records):
        op.process_batch([record])
        max_ts = max(max_ts, record[1])
        if i % every == every - 1:
            op.advance_watermark(max_ts - BOUND - 1)
            out += results(op)
    return out, max_ts


def brute_force(assigner: dict[str, Any], records: list[InputRecord]) -> dict[Any, Any]:
    if assigner["type"] == "tumbling":
        windows_of = TumblingAssigner(assigner["size_ms"], assigner["offset_ms"]).assign
    else:
        windows_of = SlidingAssigner(
            assigner["size_ms"], assigner["slide_ms"], assigner["offset_ms"]
        ).assign
    grouped: dict[tuple[str, int, int], list[int]] = defaultdict(list)
    for key, ts, value, _, _ in records:
        for start, end in windows_of(ts):
            grouped[(key, start, end)].append(value["amount"])
    return {
        window: {"n": len(xs), "s": sum(xs), "lo": min(xs), "hi": max(xs)}
        for window, xs in grouped.items()
    }


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=150, deadline=None)
@given(assigners, events, st.integers(1, 10), st.booleans())
def test_in_bound_shuffles_give_the_brute_force_results(
    backend: str, assigner: dict[str, Any], generated: list[Any], every: int, general: bool
) -> None:
    records = arrival_order(generated)
    op = build(spec(assigner, aggregations=AGGS), general=general, backend=backend)
    out, _ = run(op, records, every)
    op.advance_watermark(MAX_TIMESTAMP)
    out += results(op)
    assert op.collector.dropped_late == 0
    assert all(r.fire.value == "on_time" and r.seq == 0 for r in out)
    got = {(r.key, r.start, r.end): r.result for r in out}
    assert len(got) == len(out)
    assert got == brute_force(assigner, records)


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=100, deadline=None)
@given(assigners, events, st.integers(1, 10), st.data(), st.integers(0, 40))
def test_restoring_in_the_middle_equals_an_uninterrupted_run(
    backend: str,
    assigner: dict[str, Any],
    generated: list[Any],
    every: int,
    data: st.DataObject,
    lateness: int,
) -> None:
    records = arrival_order(generated)
    cut = data.draw(st.integers(0, len(records)))
    operator_spec = spec(assigner, aggregations=AGGS, allowed_lateness_ms=lateness)

    whole = build(operator_spec, clock=ManualClock())
    expected, _ = run(whole, records, every)
    whole.advance_watermark(MAX_TIMESTAMP)
    expected += results(whole)

    first = build(operator_spec, clock=ManualClock(), backend=backend)
    out, max_ts = run(first, records[:cut], every)
    snapshot = orjson.loads(orjson.dumps(first.snapshot()))
    second = build(operator_spec, clock=ManualClock(), backend=backend)
    second.restore(snapshot)
    # Continue the same watermark cadence from where the first operator stopped.
    tail: list[Any] = []
    for i, record in enumerate(records[cut:], start=cut):
        second.process_batch([record])
        max_ts = max(max_ts, record[1])
        if i % every == every - 1:
            second.advance_watermark(max_ts - BOUND - 1)
            tail += results(second)
    second.advance_watermark(MAX_TIMESTAMP)
    tail += results(second)
    assert out + tail == expected
    assert second.stats() == whole.stats()
