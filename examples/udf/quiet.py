"""Count a key's records until it goes quiet: the user function of docs/user-functions.md.

A key's count is emitted once no record of it has arrived for ``quiet_ms`` of event time
(its deadline timer moves with every record), and the key's state is cleared. Use it
from a pipeline spec with ``SERVICE_UDF_MODULES=examples``:

    {"type": "keyed_process", "function": "examples.udf.quiet:CountUntilQuiet",
     "params": {"quiet_ms": 600000}}

It is also the shape of the keyed process benchmark's user function (two value states,
one event-time timer moved per record).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.functions import Context, InvalidParams, KeyedProcessFunction, Out

DEFAULT_QUIET_MS = 600_000


class CountUntilQuiet(KeyedProcessFunction):
    """Emits ``{"key", "count", "last_seen"}`` when a key has been quiet for ``quiet_ms``."""

    def __init__(self, quiet_ms: int = DEFAULT_QUIET_MS) -> None:
        self.quiet_ms = quiet_ms

    @classmethod
    def validate_params(cls, params: Mapping[str, Any]) -> list[str]:
        problems = [f"{name}: unexpected parameter" for name in params if name != "quiet_ms"]
        quiet = params.get("quiet_ms", DEFAULT_QUIET_MS)
        if type(quiet) is not int or quiet <= 0:
            problems.append("quiet_ms: must be a positive integer (milliseconds)")
        return problems

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> CountUntilQuiet:
        problems = cls.validate_params(params)
        if problems:
            raise InvalidParams("examples.udf.quiet:CountUntilQuiet", problems)
        return cls(params.get("quiet_ms", DEFAULT_QUIET_MS))

    def open(self, ctx: Context) -> None:
        # Handles are made once and kept; each reads the current key's entry.
        self.count = ctx.value_state("count")
        self.deadline = ctx.value_state("deadline")

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        self.count.update((self.count.value() or 0) + 1)
        old = self.deadline.value()
        deadline: int = ctx.timestamp + self.quiet_ms  # type: ignore[operator]
        if old is None or deadline > old:  # a late record does not pull the deadline in
            timers = ctx.timer_service
            if old is not None:
                timers.delete_event_time_timer(old)
            timers.register_event_time_timer(deadline)
            self.deadline.update(deadline)

    def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
        out.collect(
            {"key": ctx.key, "count": self.count.value(), "last_seen": timestamp - self.quiet_ms}
        )
        self.count.clear()
        self.deadline.clear()
