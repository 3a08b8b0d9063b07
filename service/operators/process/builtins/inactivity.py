"""``inactivity_timeout``: an alert when a key has seen no record for ``timeout_ms``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.core.time import MAX_DURATION_MS, TimeDomain
from service.operators.base import InputRecord
from service.operators.process.builtins.params import (
    TIME_DOMAINS,
    check_int,
    check_mapping,
    check_time,
    check_unknown,
)
from service.operators.process.context import Context, Out
from service.operators.process.errors import InvalidParams
from service.operators.process.function import KeyedProcessFunction, RecordFailed


@dataclass(frozen=True, slots=True)
class InactivityParams:
    """``timeout_ms`` > 0; ``time``: ``"event"`` (default) or ``"processing"``."""

    timeout_ms: int
    time: TimeDomain = TimeDomain.EVENT_TIME


class InactivityTimeout(KeyedProcessFunction):
    """Emits ``{"alert": "inactive", "key", "last_seen", "timeout_ms"}`` when a key has been
    silent for ``timeout_ms``; every record moves the key's one timer.

    In event time "silent" means: the watermark passed ``last_seen + timeout_ms``, where
    ``last_seen`` is the largest record timestamp of the key (an out-of-order record never
    moves the timer back). In processing time it is measured on the clock. The registered
    deadline is kept in value state ``deadline`` so the old timer can be deleted; after the
    alert the key's state is cleared (it alerts once per silence).
    """

    NAME = "inactivity_timeout"
    PARAMS = ("timeout_ms", "time")

    def __init__(self, timeout_ms: int, time: TimeDomain = TimeDomain.EVENT_TIME) -> None:
        self.timeout_ms = timeout_ms
        self.time = time
        self._event = time is TimeDomain.EVENT_TIME

    @classmethod
    def validate_params(cls, params: Mapping[str, Any]) -> list[str]:
        mapping, problems = check_mapping(params)
        problems += check_unknown(mapping, cls.PARAMS)
        check_int(
            mapping, "timeout_ms", problems, required=True, minimum=1, maximum=MAX_DURATION_MS
        )
        check_time(mapping, problems)
        return problems

    @classmethod
    def parse_params(cls, params: Mapping[str, Any]) -> InactivityParams:
        problems = cls.validate_params(params)
        if problems:
            raise InvalidParams(cls.NAME, problems)
        mapping = params or {}
        return InactivityParams(
            timeout_ms=mapping["timeout_ms"], time=TIME_DOMAINS[mapping.get("time", "event")]
        )

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> InactivityTimeout:
        parsed = cls.parse_params(params)
        return cls(parsed.timeout_ms, parsed.time)

    def open(self, ctx: Context) -> None:
        self._deadline = ctx.value_state("deadline")
        timers = ctx.raw_timers
        if self._event:
            self._register = timers.register_event_time_timer
            self._move = timers.move_event_time_timer
            self.process_records = self._event_time_records
        else:
            self._register = timers.register_processing_time_timer
            self._move = timers.move_processing_time_timer

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        seen = ctx.timestamp if self._event else ctx.current_processing_time
        deadline: int = seen + self.timeout_ms  # type: ignore[operator]
        state = self._deadline
        old = state.value()
        if old is None:
            self._register(deadline, ctx.key, None)  # type: ignore[arg-type]
        elif deadline > old:
            self._move(old, deadline, ctx.key, None)  # type: ignore[arg-type]
        else:
            return
        state.update(deadline)

    def _event_time_records(self, records: Sequence[InputRecord], failed: RecordFailed) -> None:
        """:meth:`process_element` in event time over a whole batch: the same state and
        timer operations, on the state's dict directly (a deadline is an ``int``, which
        ``update`` stores as it is)."""
        deadlines = self._deadline.entries
        last = deadlines.get
        register = self._register
        move = self._move
        timeout = self.timeout_ms
        for key, timestamp, _value, position, source in records:
            try:
                deadline = timestamp + timeout
                old = last(key)
                if old is None:
                    register(deadline, key, None)
                elif deadline > old:
                    move(old, deadline, key, None)
                else:
                    continue
                deadlines[key] = deadline
            except Exception as exc:
                failed(source, key, exc, position)

    def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
        if self._deadline.value() != timestamp:
            return
        self._deadline.clear()
        out.collect(
            {
                "alert": "inactive",
                "key": ctx.key,
                "last_seen": timestamp - self.timeout_ms,
                "timeout_ms": self.timeout_ms,
            }
        )
