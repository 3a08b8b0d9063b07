"""Pull queries on the operators (operators/query.py): what ``query_key`` and ``scan``
answer equals an oracle computed from the input so far, at any point of the input."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.core.time import ManualClock
from service.operators.base import InputRecord
from service.operators.process import KeyedProcessFunction, KeyedProcessOperator
from service.operators.process.context import Context, Out
from service.operators.query import Queryable
from service.operators.table import TableAggregateOperator, build_running_aggregate, build_top_n
from service.operators.table.running import RunningAggregateConfig
from service.operators.window import build_window_operator
from service.operators.window.general import GeneralWindowOperator

BOUND = 20
KEYS = ["a", "b", "é/ü key", "z?&=#", "a" * 1100]
AGGS = {
    "n": {"fn": "count"},
    "s": {"fn": "sum", "field": "amount"},
    "lo": {"fn": "min", "field": "amount"},
    "hi": {"fn": "max", "field": "amount"},
}

events = st.lists(
    st.tuples(
        st.sampled_from(KEYS),
        st.integers(min_value=0, max_value=300),
        st.integers(min_value=-50, max_value=50),
        st.integers(min_value=0, max_value=BOUND),  # arrival delay
    ),
    min_size=1,
    max_size=80,
)
assigners = st.one_of(
    st.builds(lambda size: {"type": "tumbling", "size_ms": size}, st.integers(1, 60)),
    st.builds(
        lambda size, slide: {"type": "sliding", "size_ms": size, "slide_ms": slide},
        st.integers(1, 60),
        st.integers(1, 30),
    ),
)
ranges = st.tuples(
    st.one_of(st.none(), st.sampled_from(KEYS)),
    st.one_of(st.none(), st.sampled_from(KEYS)),
    st.integers(0, 6),
)


def arrival_order(generated: list[tuple[str, int, int, int]]) -> list[InputRecord]:
    ordered = sorted(enumerate(generated), key=lambda item: (item[1][1] + item[1][3], item[0]))
    return [(key, ts, {"amount": amount}, i, None) for i, (key, ts, amount, _) in ordered]


def windows_of(assigner: dict[str, Any], ts: int) -> list[tuple[int, int]]:
    size = assigner["size_ms"]
    slide = assigner.get("slide_ms", size)
    last = ts - ts % slide
    return [(s, s + size) for s in range(last, ts - size, -slide)]


def window_oracle(
    assigner: dict[str, Any], seen: list[InputRecord], watermark: int
) -> dict[str, dict[str, Any]]:
    """Each key's windows not fired yet (``max_ts`` past the watermark), aggregated."""
    amounts: dict[str, dict[tuple[int, int], list[int]]] = defaultdict(lambda: defaultdict(list))
    for key, ts, value, _, _ in seen:
        for window in windows_of(assigner, ts):
            if window[1] - 1 > watermark:
                amounts[key][window].append(value["amount"])
    return {
        key: {
            "windows": [
                {
                    "start": start,
                    "end": end,
                    "result": {"n": len(xs), "s": sum(xs), "lo": min(xs), "hi": max(xs)},
                    "fires": 0,
                }
                for (start, end), xs in sorted(by_window.items())
            ]
        }
        for key, by_window in amounts.items()
    }


def check_scans(op: Queryable, expected: dict[str, Any], scans: list[Any]) -> None:
    for from_key, to_key, limit in scans:
        keys = sorted(
            k
            for k in expected
            if (from_key is None or k >= from_key) and (to_key is None or k < to_key)
        )[:limit]
        assert op.scan(from_key, to_key, limit) == [(k, expected[k]) for k in keys]


def check_window_lookups(
    general: bool, assigner: dict[str, Any], generated: list[Any], scans: list[Any]
) -> None:
    spec = {"type": "window", "assigner": assigner, "aggregations": AGGS}
    op = build_window_operator("p", spec, ManualClock(), False)
    if general:
        op = GeneralWindowOperator(op.config)
    assert isinstance(op, Queryable)
    records = arrival_order(generated)
    seen: list[InputRecord] = []
    top = -(10**9)
    for i in range(0, len(records), 7):
        batch = records[i : i + 7]
        op.process_batch(batch)
        seen.extend(batch)
        top = max(top, *(r[1] for r in batch))
        op.advance_watermark(top - BOUND - 1)
        op.collector.drain()
        expected = window_oracle(assigner, seen, op.current_watermark)
        for key in KEYS:
            assert op.query_key(key) == expected.get(key)
        check_scans(op, expected, scans)


@seed(5201)
@settings(max_examples=150, deadline=None)
@given(assigner=assigners, generated=events, scans=st.lists(ranges, max_size=3))
def test_a_fast_window_lookup_equals_the_open_windows_partial_aggregates(
    assigner: dict[str, Any], generated: list[Any], scans: list[Any]
) -> None:
    check_window_lookups(False, assigner, generated, scans)


@seed(5202)
@settings(max_examples=100, deadline=None)
@given(assigner=assigners, generated=events, scans=st.lists(ranges, max_size=3))
def test_a_general_window_lookup_equals_the_open_windows_partial_aggregates(
    assigner: dict[str, Any], generated: list[Any], scans: list[Any]
) -> None:
    check_window_lookups(True, assigner, generated, scans)


def test_a_session_window_lookup_shows_the_merged_session() -> None:
    spec = {"type": "window", "assigner": {"type": "session", "gap_ms": 10}, "aggregations": AGGS}
    op = build_window_operator("p", spec, ManualClock(), False)
    op.process_batch([("k", 0, {"amount": 1}, 0, None), ("k", 15, {"amount": 2}, 1, None)])
    op.process_batch([("k", 8, {"amount": 4}, 2, None)])  # bridges the two sessions
    assert op.query_key("k") == {
        "windows": [
            {"start": 0, "end": 25, "result": {"n": 3, "s": 7, "lo": 1, "hi": 4}, "fires": 0}
        ]
    }


def test_a_window_function_lookup_counts_the_elements_held() -> None:
    def function(key: str, window: Any, values: list[Any]) -> Any:
        return len(values)

    spec = {
        "type": "window",
        "assigner": {"type": "tumbling", "size_ms": 10},
        "function": "tests:function",
    }
    op = build_window_operator("p", spec, ManualClock(), False, function=function)
    op.process_batch([("k", 1, {"amount": 1}, 0, None), ("k", 2, {"amount": 2}, 1, None)])
    assert op.query_key("k") == {
        "windows": [{"start": 0, "end": 10, "result": None, "elements": 2, "fires": 0}]
    }


def test_a_key_with_no_state_answers_none_and_is_left_out_of_scans() -> None:
    spec = {"type": "window", "assigner": {"type": "tumbling", "size_ms": 10}, "aggregations": AGGS}
    op = build_window_operator("p", spec, ManualClock(), False)
    op.process_batch([("k", 1, {"amount": 1}, 0, None)])
    assert op.query_key("nope") is None
    op.advance_watermark(100)  # the window fired and went
    assert op.query_key("k") is None
    assert op.scan(None, None, 10) == []


steps = st.lists(
    st.tuples(st.sampled_from(KEYS), st.integers(0, 1000), st.integers(-50, 50), st.booleans()),
    min_size=1,
    max_size=60,
)


@seed(5203)
@settings(max_examples=150, deadline=None)
@given(steps=steps, scans=st.lists(ranges, max_size=3))
def test_a_running_aggregate_lookup_equals_the_aggregate_of_the_input_so_far(
    steps: list[tuple[str, int, int, bool]], scans: list[Any]
) -> None:
    clock = ManualClock()
    op = build_running_aggregate("p", {"type": "aggregate", "aggregations": AGGS}, clock)
    seen: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i, (key, ts, amount, tick) in enumerate(steps):
        op.process_batch([(key, ts, {"amount": amount}, i, None)])
        seen[key].append((ts, amount))
        if tick:  # emitting changes what was emitted, never the row
            clock.set(clock.now_ms() + 1000)
            op.advance_processing_time(clock.now_ms())
        emitted = defaultdict(int)
        for result in op.collector.drain()[0]:
            emitted[result.key] += 1
        expected = {
            k: {
                "result": {
                    "n": len(xs),
                    "s": sum(x for _, x in xs),
                    "lo": min(x for _, x in xs),
                    "hi": max(x for _, x in xs),
                },
                "timestamp": max(t for t, _ in xs),
            }
            for k, xs in seen.items()
        }
        for k in KEYS:
            found = op.query_key(k)
            if k not in expected:
                assert found is None
                continue
            assert found is not None
            assert {"result": found["result"], "timestamp": found["timestamp"]} == expected[k]
        for from_key, to_key, limit in scans:
            keys = sorted(
                k
                for k in expected
                if (from_key is None or k >= from_key) and (to_key is None or k < to_key)
            )[:limit]
            assert [k for k, _ in op.scan(from_key, to_key, limit)] == keys


@seed(5204)
@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.tuples(st.sampled_from(KEYS), st.integers(-20, 20)), min_size=1, max_size=60),
    n=st.integers(1, 4),
    desc=st.booleans(),
)
def test_a_top_n_lookup_equals_the_best_n_rows_so_far(
    rows: list[tuple[str, int]], n: int, desc: bool
) -> None:
    spec = {"type": "top_n", "order_by": {"field": "x", "desc": desc}, "n": n}
    op = build_top_n("p", spec, ManualClock())
    seen: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i, (key, x) in enumerate(rows):
        op.process_batch([(key, i, {"x": x, "i": i}, i, None)])
        seen[key].append((x, i))
        for k in KEYS:
            if k not in seen:
                assert op.query_key(k) is None
                continue
            best = sorted(seen[k], key=lambda r: (-r[0] if desc else r[0], r[1]))[:n]
            assert op.query_key(k) == {
                "ranks": [
                    {"rank": r + 1, "row": {"x": x, "i": j}, "timestamp": j}
                    for r, (x, j) in enumerate(best)
                ]
            }
    assert [k for k, _ in op.scan(None, None, 100)] == sorted(seen)


class Counting(KeyedProcessFunction):
    queryable_state = ("count", "last")

    def open(self, ctx: Context) -> None:
        self.count = ctx.value_state("count")
        self.last = ctx.map_state("last")
        self.secret = ctx.value_state("secret")

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        self.count.update((self.count.value() or 0) + 1)
        self.last.put(value["tag"], value["n"])
        self.secret.update("hidden")


@seed(5205)
@settings(max_examples=100, deadline=None)
@given(
    items=st.lists(
        st.tuples(st.sampled_from(KEYS), st.sampled_from(["x", "y"]), st.integers(0, 9)),
        min_size=1,
        max_size=40,
    ),
    scans=st.lists(ranges, max_size=3),
)
def test_a_process_lookup_shows_only_the_states_declared_queryable(
    items: list[tuple[str, str, int]], scans: list[Any]
) -> None:
    op = KeyedProcessOperator("p", Counting(), ManualClock(0))
    counts: dict[str, int] = defaultdict(int)
    last: dict[str, dict[str, int]] = defaultdict(dict)
    for i, (key, tag, n) in enumerate(items):
        op.process_batch([(key, i, {"tag": tag, "n": n}, i, None)])
        counts[key] += 1
        last[key][tag] = n
        expected = {k: {"states": {"count": c, "last": dict(last[k])}} for k, c in counts.items()}
        for k in KEYS:
            assert op.query_key(k) == expected.get(k)
        check_scans(op, expected, scans)


def test_a_process_function_declaring_nothing_queryable_answers_none() -> None:
    class Private(Counting):
        queryable_state = ()

    op = KeyedProcessOperator("p", Private(), ManualClock(0))
    op.process_batch([("k", 0, {"tag": "x", "n": 1}, 0, None)])
    assert op.query_key("k") is None
    assert op.scan(None, None, 10) == []


def test_an_answer_is_a_copy_later_input_does_not_change() -> None:
    op = KeyedProcessOperator("p", Counting(), ManualClock(0))
    op.process_batch([("k", 0, {"tag": "x", "n": 1}, 0, None)])
    answer = op.query_key("k")
    op.process_batch([("k", 1, {"tag": "x", "n": 2}, 1, None)])
    assert answer == {"states": {"count": 1, "last": {"x": 1}}}


@seed(5206)
@settings(max_examples=150, deadline=None)
@given(
    changes=st.lists(
        st.tuples(
            st.sampled_from(["r1", "r2", "r3", "r4"]),
            st.one_of(st.none(), st.tuples(st.sampled_from(["g1", "g/2"]), st.integers(0, 9))),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_a_table_aggregate_lookup_equals_the_aggregate_of_the_table_s_current_rows(
    changes: list[tuple[str, tuple[str, int] | None]],
) -> None:
    config = RunningAggregateConfig(
        pipeline="p",
        aggregations={"n": {"fn": "count"}, "s": {"fn": "sum", "field": "amount"}},
    )
    op = TableAggregateOperator(config, group_field="g")
    table: dict[str, tuple[str, int]] = {}
    for i, (pk, change) in enumerate(changes):
        value = None if change is None else {"g": change[0], "amount": change[1]}
        op.process_batch([(pk, i, value, i, None)])
        if change is None:
            table.pop(pk, None)
        else:
            table[pk] = change
        for group in ("g1", "g/2"):
            amounts = [amount for g, amount in table.values() if g == group]
            found = op.query_key(group)
            if not amounts:
                assert found is None
            else:
                assert found is not None
                assert found["result"] == {"n": len(amounts), "s": sum(amounts)}
