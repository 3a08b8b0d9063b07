"""The user function of docs/user-functions.md (examples/udf/quiet.py) does what it says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from examples.udf.quiet import CountUntilQuiet
from service.core.time import ManualClock
from service.functions import InvalidParams
from service.operators.process import build_process_operator
from tests.operators.process.harness import make, outputs, records, values

QUIET = 1_000


def test_count_is_emitted_once_the_key_is_quiet_for_the_period() -> None:
    op = make(CountUntilQuiet(QUIET))
    op.process_batch(records([("a", 100, {}), ("a", 600, {}), ("a", 900, {})]))
    op.advance_watermark(1_899)  # 999 ms after the last record: not quiet yet
    assert values(op) == []
    op.advance_watermark(1_900)
    assert values(op) == [("a", 1_900, {"key": "a", "count": 3, "last_seen": 900})]


def test_every_record_moves_the_deadline_so_one_timer_per_key_stays_queued() -> None:
    op = make(CountUntilQuiet(QUIET))
    op.process_batch(records([("a", t, {}) for t in range(0, 5_000, 100)]))
    assert op.gauges().event_timers == 1
    assert list(op.timer_counts()["event"]) == [50, 0, 49]  # registered, fired, deleted


def test_a_late_record_counts_but_does_not_pull_the_deadline_in() -> None:
    op = make(CountUntilQuiet(QUIET))
    op.process_batch(records([("a", 5_000, {}), ("a", 4_000, {})]))
    op.advance_watermark(5_999)
    assert values(op) == []
    op.advance_watermark(6_000)
    assert values(op) == [("a", 6_000, {"key": "a", "count": 2, "last_seen": 5_000})]


def test_keys_are_counted_apart_and_state_is_cleared_after_the_alert() -> None:
    op = make(CountUntilQuiet(QUIET))
    op.process_batch(records([("a", 0, {}), ("b", 10, {}), ("b", 20, {})]))
    op.advance_watermark(10_000)
    assert sorted(v[2]["count"] for v in values(op)) == [1, 2]
    assert op.gauges().keys == 0
    op.process_batch(records([("a", 20_000, {})], start=3))
    op.advance_watermark(30_000)
    assert values(op) == [("a", 21_000, {"key": "a", "count": 1, "last_seen": 20_000})]


def test_restore_then_continue_gives_the_uninterrupted_alerts() -> None:
    first = records([("a", 0, {}), ("b", 100, {})])
    rest = records([("a", 500, {}), ("b", 2_000, {})], start=2)
    whole = make(CountUntilQuiet(QUIET))
    whole.process_batch(first)
    whole.process_batch(rest)
    whole.advance_watermark(10_000)
    snapshot = make(CountUntilQuiet(QUIET))
    snapshot.process_batch(first)
    restored = make(CountUntilQuiet(QUIET))
    restored.restore(json.loads(json.dumps(snapshot.snapshot())))
    restored.process_batch(rest)
    restored.advance_watermark(10_000)
    expected = outputs(whole)
    assert [o.value["count"] for o in expected] == [2, 2]
    assert outputs(restored) == expected  # ids included


def test_params_are_validated_with_every_problem() -> None:
    with pytest.raises(InvalidParams) as info:
        CountUntilQuiet.from_params({"quiet_ms": 0, "colour": "red"})
    assert info.value.problems == [
        "colour: unexpected parameter",
        "quiet_ms: must be a positive integer (milliseconds)",
    ]


def test_it_loads_from_a_spec_reference_when_examples_are_allowed() -> None:
    op = build_process_operator(
        "p", "examples.udf.quiet:CountUntilQuiet", {"quiet_ms": 5}, ManualClock(0), ["examples"]
    )
    assert isinstance(op.function, CountUntilQuiet)
    assert op.function.quiet_ms == 5


def test_the_guide_shows_the_example_as_the_file_has_it() -> None:
    guide = Path("docs/user-functions.md").read_text(encoding="utf-8")
    source = Path("examples/udf/quiet.py").read_text(encoding="utf-8")
    (listing,) = re.findall(r"```python\n(.*?)```", guide, re.S)
    shown = [line for line in listing.splitlines() if line.strip()]
    assert len(shown) > 25
    for line in shown:
        if "validate_params and from_params: see the file" in line:
            continue
        if line.startswith("from service.functions import"):
            continue  # the guide leaves out the names only from_params uses
        assert line in source.splitlines(), line
