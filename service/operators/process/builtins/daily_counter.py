"""``daily_reset_counter``: a running count per key that restarts at local midnight."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from service.operators.process.builtins.params import check_int, check_mapping, check_unknown
from service.operators.process.context import Context, Out
from service.operators.process.errors import InvalidParams
from service.operators.process.function import KeyedProcessFunction

DAY_MS: Final = 86_400_000
MAX_OFFSET_MINUTES: Final = 14 * 60


def next_midnight(now_ms: int, offset_ms: int) -> int:
    """The first local midnight strictly after ``now_ms`` (UTC ms) at UTC offset ``offset_ms``."""
    return now_ms - (now_ms + offset_ms) % DAY_MS + DAY_MS


@dataclass(frozen=True, slots=True)
class DailyResetCounterParams:
    """``utc_offset_minutes``: the local time zone's offset, within +-14 hours (default 0)."""

    utc_offset_minutes: int = 0


class DailyResetCounter(KeyedProcessFunction):
    """Emits ``{"count": n}`` for every record: the key's records since local midnight.

    As in the seed article's example, a processing-time timer at the next local midnight
    clears the key's state (so a key that goes quiet leaves nothing behind). The midnight a
    count belongs to is kept too (value state ``reset_at``), so a record processed after
    midnight but before the runtime fired the timer still starts a new day.
    """

    NAME = "daily_reset_counter"
    PARAMS = ("utc_offset_minutes",)

    def __init__(self, utc_offset_minutes: int = 0) -> None:
        self.utc_offset_minutes = utc_offset_minutes
        self._offset_ms = utc_offset_minutes * 60_000

    @classmethod
    def validate_params(cls, params: Mapping[str, Any]) -> list[str]:
        mapping, problems = check_mapping(params)
        problems += check_unknown(mapping, cls.PARAMS)
        check_int(
            mapping,
            "utc_offset_minutes",
            problems,
            required=False,
            minimum=-MAX_OFFSET_MINUTES,
            maximum=MAX_OFFSET_MINUTES,
        )
        return problems

    @classmethod
    def parse_params(cls, params: Mapping[str, Any]) -> DailyResetCounterParams:
        problems = cls.validate_params(params)
        if problems:
            raise InvalidParams(cls.NAME, problems)
        return DailyResetCounterParams((params or {}).get("utc_offset_minutes", 0))

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> DailyResetCounter:
        return cls(cls.parse_params(params).utc_offset_minutes)

    def open(self, ctx: Context) -> None:
        self._count = ctx.value_state("count")
        self._reset_at = ctx.value_state("reset_at")
        self._timers = ctx.timer_service

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        midnight = next_midnight(ctx.current_processing_time, self._offset_ms)
        reset_at = self._reset_at.value()
        if reset_at == midnight:
            count = self._count.value() + 1
        else:
            if reset_at is not None:
                self._timers.delete_processing_time_timer(reset_at)
            self._timers.register_processing_time_timer(midnight)
            self._reset_at.update(midnight)
            count = 1
        self._count.update(count)
        out.collect({"count": count})

    def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
        self._count.clear()
        self._reset_at.clear()
