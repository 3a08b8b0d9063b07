"""Building operators from a spec's function name and params, including user functions."""

from __future__ import annotations

import sys

import pytest

from service.core.time import ManualClock
from service.operators.process import (
    NotAProcessFunction,
    UnknownFunction,
    build_process_operator,
    validate_function,
)
from service.operators.udf import UdfNotAllowed
from tests.operators.process.harness import rec, values

CANARY = "tests.operators.process.udf_canary"


def test_example_user_function_loads_through_the_allowlist_and_runs() -> None:
    op = build_process_operator(
        "fraud",
        "examples.udf.fraud:FraudDetector",
        {"window_ms": 1_000},
        ManualClock(0),
        ["examples"],
    )
    op.process_batch(
        [
            rec("acct1", 10_000, {"amount": 0.5}, 0),
            rec("acct2", 10_100, {"amount": 900}, 1),  # large, but no small before it
            rec("acct1", 10_500, {"amount": 700}, 2),
        ]
    )
    assert values(op) == [
        (
            "acct1",
            10_500,
            {
                "alert": "small_then_large",
                "account": "acct1",
                "small_at": 10_000,
                "large_at": 10_500,
                "amount": 700.0,
            },
        )
    ]
    assert op.gauges().event_timers == 0


def test_example_user_function_forgets_the_small_one_after_its_window() -> None:
    op = build_process_operator(
        "fraud", "examples.udf.fraud:FraudDetector", {}, ManualClock(0), ["examples.udf"]
    )
    op.process_batch([rec("acct1", 0, {"amount": 0.1}, 0)])
    op.advance_watermark(60_000)
    op.process_batch([rec("acct1", 60_001, {"amount": 1_000}, 1)])
    assert values(op) == []


def test_user_function_outside_the_allowlist_is_refused_before_import() -> None:
    sys.modules.pop(CANARY, None)
    with pytest.raises(UdfNotAllowed):
        build_process_operator("p", f"{CANARY}:Fn", {}, ManualClock(0), ["examples"])
    assert CANARY not in sys.modules


def test_reference_to_something_that_is_not_a_process_function_is_refused() -> None:
    with pytest.raises(NotAProcessFunction):
        build_process_operator("p", f"{CANARY}:Fn", {}, ManualClock(0), [CANARY])


def test_unknown_builtin_name_lists_the_builtins() -> None:
    with pytest.raises(UnknownFunction, match="dedupe, inactivity_timeout"):
        build_process_operator("p", "sessionize", {}, ManualClock(0), [])


def test_validate_function_checks_refs_without_importing() -> None:
    sys.modules.pop(CANARY, None)
    assert validate_function(f"{CANARY}:Fn", {}, ["examples"])[0].startswith("function:")
    assert validate_function("examples.udf.fraud:FraudDetector", {}, ["examples"]) == []
    assert validate_function("os:system", None, []) != []
    assert CANARY not in sys.modules
