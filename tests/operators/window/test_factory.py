"""Building operators from the contract's operator JSON; configuration errors."""

from __future__ import annotations

from typing import Any

import pytest

from service.core.time import ManualClock
from service.operators.window import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    FastWindowOperator,
    GeneralWindowOperator,
    PurgingTrigger,
    WindowConfigError,
    build_window_operator,
)

from .helpers import COUNT_SUM, spec

CONTRACT_EXAMPLE = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": 60000},
    "time": "event",
    "allowed_lateness_ms": 0,
    "trigger": {"type": "event_time"},
    "aggregations": {"orders": {"fn": "count"}, "revenue": {"fn": "sum", "field": "amount"}},
}


def build(operator_spec: dict[str, Any], **kwargs: Any) -> Any:
    return build_window_operator("p", operator_spec, ManualClock(), False, **kwargs)


def test_contract_example_builds_the_fast_path() -> None:
    assert isinstance(build(CONTRACT_EXAMPLE), FastWindowOperator)


@pytest.mark.parametrize(
    "extra",
    [
        {"time": "processing"},
        {"trigger": {"type": "count", "count": 5}},
        {"trigger": {"type": "event_time", "purge": True}},
        {"evictor": {"type": "count", "max_count": 3}},
    ],
)
def test_anything_but_the_plain_case_builds_the_general_operator(extra: dict[str, Any]) -> None:
    assert isinstance(build({**CONTRACT_EXAMPLE, **extra}), GeneralWindowOperator)


def test_continuous_trigger_follows_the_operator_time_domain() -> None:
    trigger = {"type": "continuous", "interval_ms": 5, "purge": True}
    event = build(spec({"type": "global"}, trigger=trigger)).config.trigger
    processing = build(spec({"type": "global"}, trigger=trigger, time="processing")).config.trigger
    assert isinstance(event, PurgingTrigger)
    assert isinstance(event.inner, ContinuousEventTimeTrigger)
    assert isinstance(processing, PurgingTrigger)
    assert isinstance(processing.inner, ContinuousProcessingTimeTrigger)


def test_function_spec_uses_the_passed_callable() -> None:
    op = build(
        spec({"type": "tumbling", "size_ms": 5}, aggregations=None, function="m:f"),
        function=lambda key, window, values: len(values),
    )
    assert isinstance(op, GeneralWindowOperator)


@pytest.mark.parametrize(
    ("operator_spec", "kwargs"),
    [
        ({"type": "keyed_process", "assigner": {"type": "global"}}, {}),
        (spec({"type": "hopping", "size_ms": 5}), {}),
        (spec({"type": "tumbling"}), {}),
        (spec({"type": "tumbling", "size_ms": 0}), {}),
        (spec({"type": "sliding", "size_ms": 10, "slide_ms": -1}), {}),
        (spec({"type": "session", "gap_ms": 1.5}), {}),
        (spec({"type": "tumbling", "size_ms": 5}, time="wall"), {}),
        (spec({"type": "tumbling", "size_ms": 5}, allowed_lateness_ms=-1), {}),
        (spec({"type": "tumbling", "size_ms": 5}, trigger={"type": "count"}), {}),
        (spec({"type": "tumbling", "size_ms": 5}, trigger={"type": "sometimes"}), {}),
        (spec({"type": "tumbling", "size_ms": 5}, evictor={"type": "count", "max_count": -1}), {}),
        (spec({"type": "tumbling", "size_ms": 5}, aggregations=None, function="m:f"), {}),
        (spec({"type": "tumbling", "size_ms": 5}, aggregations=None), {}),
        (spec({"type": "tumbling", "size_ms": 5}, aggregations=COUNT_SUM), {"function": print}),
    ],
)
def test_invalid_specs_are_config_errors(operator_spec: dict[str, Any], kwargs: Any) -> None:
    with pytest.raises(WindowConfigError):
        build(operator_spec, **kwargs)


def test_config_errors_are_value_errors_for_the_api_layer() -> None:
    assert issubclass(WindowConfigError, ValueError)
