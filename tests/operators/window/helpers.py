"""Builders shared by the window operator tests."""

from __future__ import annotations

from typing import Any

from service.core.time import ManualClock
from service.operators.base import InputRecord, WindowResult
from service.operators.window import (
    GeneralWindowOperator,
    WindowOperator,
    WindowOperatorConfig,
    build_window_operator,
    create_window_operator,
)

COUNT_SUM = {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}}


def spec(assigner: dict[str, Any], **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "window", "assigner": assigner}
    out.setdefault("aggregations", COUNT_SUM)
    out.update(extra)
    return out


def tumbling(size: int = 10, **extra: Any) -> dict[str, Any]:
    return spec({"type": "tumbling", "size_ms": size}, **extra)


def build(
    operator_spec: dict[str, Any],
    *,
    general: bool = False,
    clock: ManualClock | None = None,
    late_output: bool = False,
    track_keys: bool = False,
    function: Any = None,
) -> WindowOperator:
    """The operator the factory builds, or (``general``) the general path for the same spec."""
    op = build_window_operator(
        "p",
        operator_spec,
        clock or ManualClock(),
        late_output,
        function=function,
        track_keys=track_keys,
    )
    if general:
        config: WindowOperatorConfig = op.config
        return GeneralWindowOperator(config)
    return op


def rec(key: str, ts: int, amount: Any = 1, position: int = 0) -> InputRecord:
    return (key, ts, {"amount": amount}, position, ("src", key, ts))


def feed(op: WindowOperator, *records: InputRecord) -> None:
    op.process_batch(list(records))


def results(op: WindowOperator) -> list[WindowResult]:
    out, _, _ = op.collector.drain()
    return [r for r in out if isinstance(r, WindowResult)]


def summary(op: WindowOperator) -> list[tuple[str, int, int, Any, str, int]]:
    """``(key, start, end, result, fire, seq)`` of every result since the last drain."""
    return [(r.key, r.start, r.end, r.result, r.fire.value, r.seq) for r in results(op)]


__all__ = ["create_window_operator"]
