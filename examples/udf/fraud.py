"""Fraud detection, the classic Flink walkthrough as a Clockwork user function.

A small transaction followed, within ``window_ms`` of event time, by a large one on the
same account is suspicious: the small one is a card test. Use it from a pipeline spec:

    {"type": "keyed_process", "function": "examples.udf.fraud:FraudDetector",
     "params": {"small_amount": 1.0, "large_amount": 500.0, "window_ms": 60000}}

with ``SERVICE_UDF_MODULES=examples`` and the account as the pipeline key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.functions import Context, InvalidParams, KeyedProcessFunction, Out

_DEFAULTS: dict[str, float] = {"small_amount": 1.0, "large_amount": 500.0, "window_ms": 60_000}


class FraudDetector(KeyedProcessFunction):
    """Alerts on ``amount >= large_amount`` within ``window_ms`` after ``amount < small_amount``."""

    def __init__(
        self, small_amount: float = 1.0, large_amount: float = 500.0, window_ms: int = 60_000
    ) -> None:
        self.small_amount = small_amount
        self.large_amount = large_amount
        self.window_ms = window_ms

    @classmethod
    def validate_params(cls, params: Mapping[str, Any]) -> list[str]:
        problems = [f"{k}: unexpected parameter" for k in params if k not in _DEFAULTS]
        for name in ("small_amount", "large_amount"):
            value = params.get(name, _DEFAULTS[name])
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                problems.append(f"{name}: must be a positive number")
        window = params.get("window_ms", 60_000)
        if type(window) is not int or window <= 0:
            problems.append("window_ms: must be a positive integer")
        return problems

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> FraudDetector:
        problems = cls.validate_params(params)
        if problems:
            raise InvalidParams("examples.udf.fraud:FraudDetector", problems)
        return cls(**params)

    def open(self, ctx: Context) -> None:
        # The time of the last small transaction, if it is still within the window.
        self.small_seen_at = ctx.value_state("small_seen_at")

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        amount = float(value["amount"])
        ts: int = ctx.timestamp  # type: ignore[assignment]
        small_at = self.small_seen_at.value()
        if small_at is not None and amount >= self.large_amount:
            out.collect(
                {
                    "alert": "small_then_large",
                    "account": ctx.key,
                    "small_at": small_at,
                    "large_at": ts,
                    "amount": amount,
                }
            )
            self._forget(ctx, small_at)
        if amount < self.small_amount:
            if small_at is not None:
                ctx.timer_service.delete_event_time_timer(small_at + self.window_ms)
            self.small_seen_at.update(ts)
            ctx.timer_service.register_event_time_timer(ts + self.window_ms)

    def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
        self.small_seen_at.clear()

    def _forget(self, ctx: Context, small_at: int) -> None:
        ctx.timer_service.delete_event_time_timer(small_at + self.window_ms)
        self.small_seen_at.clear()
