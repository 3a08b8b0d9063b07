"""Triggers: when a window is evaluated, as Flink's ``Trigger`` classes.

A trigger is stateless configuration; its per-window state (a count, the next early
firing) lives in the operator and is reached through the :class:`TriggerContext`,
keyed by the current key and window, so it is snapshotted with everything else and
``clear`` removes it. Timers registered through the context carry the window as
namespace; :meth:`Trigger.clear` deletes the ones the trigger registered.

Continuous triggers use Python's floor modulo to align the first early firing
(``ts - ts % interval``); Flink uses Java's remainder, which differs only for
negative timestamps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from service.core.time import MAX_TIMESTAMP, TimeDomain

from .assigners import Window, max_timestamp
from .errors import WindowConfigError


class TriggerResult(Enum):
    """What the operator does with a window after asking its trigger."""

    CONTINUE = (False, False)
    FIRE = (True, False)
    PURGE = (False, True)
    FIRE_AND_PURGE = (True, True)

    @property
    def is_fire(self) -> bool:
        return self.value[0]

    @property
    def is_purge(self) -> bool:
        return self.value[1]


class TriggerContext(Protocol):
    """What a trigger may see and do for the current key and window."""

    @property
    def current_watermark(self) -> int: ...

    @property
    def current_processing_time(self) -> int: ...

    def register_event_time_timer(self, timestamp: int) -> None: ...

    def delete_event_time_timer(self, timestamp: int) -> None: ...

    def register_processing_time_timer(self, timestamp: int) -> None: ...

    def delete_processing_time_timer(self, timestamp: int) -> None: ...

    def get_state(self, name: str) -> Any:
        """The window's trigger state ``name`` (plain data), or None."""
        ...

    def set_state(self, name: str, value: Any) -> None:
        """Set (``None``: remove) the window's trigger state ``name``."""
        ...

    def merge_state(self, name: str, combine: Callable[[Any, Any], Any]) -> None:
        """Combine state ``name`` of the merged windows into the current (merged) window."""
        ...


class Trigger(Protocol):
    """Decides when a window fires; Flink's ``Trigger`` contract."""

    @property
    def can_merge(self) -> bool: ...

    def on_element(self, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult: ...

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult: ...

    def on_processing_time(
        self, time: int, window: Window, ctx: TriggerContext
    ) -> TriggerResult: ...

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        """Re-establish timers and state for ``window``, just merged from others."""
        ...

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        """Remove every timer and state this trigger holds for ``window``."""
        ...


_CONTINUE = TriggerResult.CONTINUE
_FIRE = TriggerResult.FIRE


@dataclass(frozen=True, slots=True)
class EventTimeTrigger:
    """Fires once the watermark passes ``max_ts``; immediately for allowed-late records."""

    @property
    def can_merge(self) -> bool:
        return True

    def on_element(self, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        max_ts = max_timestamp(window)
        if max_ts <= ctx.current_watermark:
            return _FIRE
        ctx.register_event_time_timer(max_ts)
        return _CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return _FIRE if time == max_timestamp(window) else _CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return _CONTINUE

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        max_ts = max_timestamp(window)
        if max_ts > ctx.current_watermark:
            ctx.register_event_time_timer(max_ts)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        ctx.delete_event_time_timer(max_timestamp(window))


@dataclass(frozen=True, slots=True)
class ProcessingTimeTrigger:
    """Fires when processing time reaches ``max_ts``."""

    @property
    def can_merge(self) -> bool:
        return True

    def on_element(self, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        ctx.register_processing_time_timer(max_timestamp(window))
        return _CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return _CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return _FIRE

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        max_ts = max_timestamp(window)
        if max_ts > ctx.current_processing_time:
            ctx.register_processing_time_timer(max_ts)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        ctx.delete_processing_time_timer(max_timestamp(window))


@dataclass(frozen=True, slots=True)
class NeverTrigger:
    """The global window's default: never fires (Flink's ``GlobalWindows.NeverTrigger``)."""

    @property
    def can_merge(self) -> bool:
        return True

    def on_element(self, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return _CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return _CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return _CONTINUE

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        return None

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        return None


def _add(a: Any, b: Any) -> Any:
    return int(a) + int(b)


def _min(a: Any, b: Any) -> Any:
    return min(int(a), int(b))


@dataclass(frozen=True, slots=True)
class CountTrigger:
    """Fires when the window's element count reaches ``count``, then counts from zero."""

    count: int

    def __post_init__(self) -> None:
        if type(self.count) is not int or self.count <= 0:
            raise WindowConfigError(f"count trigger needs a positive count, not {self.count!r}")

    @property
    def can_merge(self) -> bool:
        return True

    def on_element(self, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        seen = (ctx.get_state("count") or 0) + 1
        if seen >= self.count:
            ctx.set_state("count", None)
            return _FIRE
        ctx.set_state("count", seen)
        return _CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return _CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return _CONTINUE

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        ctx.merge_state("count", _add)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        ctx.set_state("count", None)


@dataclass(frozen=True, slots=True)
class ContinuousEventTimeTrigger:
    """Early firings every ``interval`` of event time, and the final one at ``max_ts``.

    As Flink's ``ContinuousEventTimeTrigger``: the first early firing is aligned to the
    interval (``ts - ts % interval + interval``), each one schedules the next, never
    past ``max_ts``; an element at or after ``max_ts`` fires at once (late firing).
    """

    interval: int

    def __post_init__(self) -> None:
        _check_interval(self.interval)

    @property
    def can_merge(self) -> bool:
        return True

    def on_element(self, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        max_ts = max_timestamp(window)
        if max_ts <= ctx.current_watermark:
            return _FIRE
        ctx.register_event_time_timer(max_ts)
        if ctx.get_state("next") is None:
            self._schedule(timestamp - timestamp % self.interval, max_ts, ctx)
        return _CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        max_ts = max_timestamp(window)
        if time == max_ts:
            return _FIRE
        if ctx.get_state("next") == time:
            self._schedule(time, max_ts, ctx)
            return _FIRE
        return _CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return _CONTINUE

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        ctx.merge_state("next", _min)
        upcoming = ctx.get_state("next")
        if upcoming is not None:
            ctx.register_event_time_timer(upcoming)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        upcoming = ctx.get_state("next")
        if upcoming is not None:
            ctx.delete_event_time_timer(upcoming)
            ctx.set_state("next", None)

    def _schedule(self, base: int, max_ts: int, ctx: TriggerContext) -> None:
        upcoming = min(base + self.interval, max_ts)
        ctx.set_state("next", upcoming)
        ctx.register_event_time_timer(upcoming)


@dataclass(frozen=True, slots=True)
class ContinuousProcessingTimeTrigger:
    """Firings every ``interval`` of processing time, the last at ``max_ts``.

    As Flink's ``ContinuousProcessingTimeTrigger``: the chain of timers is capped at
    the window's ``max_ts``, so a processing-time window gets its final firing there.
    """

    interval: int

    def __post_init__(self) -> None:
        _check_interval(self.interval)

    @property
    def can_merge(self) -> bool:
        return True

    def on_element(self, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        if ctx.get_state("next") is None:
            now = ctx.current_processing_time
            self._schedule(now - now % self.interval, max_timestamp(window), ctx)
        return _CONTINUE

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        return _CONTINUE

    def on_processing_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        if ctx.get_state("next") == time:
            self._schedule(time, max_timestamp(window), ctx)
            return _FIRE
        return _CONTINUE

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        ctx.merge_state("next", _min)
        upcoming = ctx.get_state("next")
        if upcoming is not None:
            ctx.register_processing_time_timer(upcoming)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        upcoming = ctx.get_state("next")
        if upcoming is not None:
            ctx.delete_processing_time_timer(upcoming)
            ctx.set_state("next", None)

    def _schedule(self, base: int, max_ts: int, ctx: TriggerContext) -> None:
        upcoming = min(base + self.interval, max_ts)
        if upcoming >= MAX_TIMESTAMP:  # a global window: nothing to schedule at the end of time
            upcoming = MAX_TIMESTAMP
        ctx.set_state("next", upcoming)
        ctx.register_processing_time_timer(upcoming)


def _check_interval(interval: int) -> None:
    if type(interval) is not int or interval <= 0:
        raise WindowConfigError(f"continuous trigger needs interval_ms > 0, not {interval!r}")


_PURGED = {TriggerResult.FIRE: TriggerResult.FIRE_AND_PURGE}


@dataclass(frozen=True, slots=True)
class PurgingTrigger:
    """Wraps a trigger and turns its FIRE into FIRE_AND_PURGE."""

    inner: Trigger

    @property
    def can_merge(self) -> bool:
        return self.inner.can_merge

    def on_element(self, timestamp: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        result = self.inner.on_element(timestamp, window, ctx)
        return _PURGED.get(result, result)

    def on_event_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        result = self.inner.on_event_time(time, window, ctx)
        return _PURGED.get(result, result)

    def on_processing_time(self, time: int, window: Window, ctx: TriggerContext) -> TriggerResult:
        result = self.inner.on_processing_time(time, window, ctx)
        return _PURGED.get(result, result)

    def on_merge(self, window: Window, ctx: TriggerContext) -> None:
        self.inner.on_merge(window, ctx)

    def clear(self, window: Window, ctx: TriggerContext) -> None:
        self.inner.clear(window, ctx)


def continuous_trigger(interval: int, domain: TimeDomain) -> Trigger:
    """The continuous trigger of ``domain`` (the operator's time domain)."""
    if domain is TimeDomain.EVENT_TIME:
        return ContinuousEventTimeTrigger(interval)
    return ContinuousProcessingTimeTrigger(interval)
