"""What a process function sees while it runs: the context, its timer service and ``out``.

One :class:`Context`, one :class:`TimerServiceView` and one :class:`Out` exist per operator
instance and are reused for every record and timer: the operator sets the current key,
timestamp and output position on the context before each call. That keeps the per-record
path free of allocations; it also means user code must not keep the context (or ``out``)
to use it after the call returns.
"""

from __future__ import annotations

from typing import NoReturn, cast

from service.core.state_cache import StateMaps
from service.core.time import Clock, TimeDomain
from service.core.timers import KeyTimers, TimerService
from service.operators.base import Collector, KeyedOutput
from service.operators.process.errors import NoCurrentKey
from service.operators.process.state import (
    KeyedStateBackend,
    ListState,
    MapState,
    StateKind,
    ValueState,
)

ProcessTimers = TimerService[str, None]
"""The operator's timer service: string keys, no namespace (semantics.md section 4)."""


def _bad_timer(key: str | None, timestamp: object) -> NoReturn:
    if key is None:
        raise NoCurrentKey("timers can only be registered for a current key")
    raise TypeError(f"timer timestamps are int epoch milliseconds, got {timestamp!r}")


class TimerServiceView(KeyTimers[str]):
    """Timers of the current key: register and delete, in event or processing time.

    Registering a timer that is already queued is a no-op; deleting an absent one too.
    A timer whose time has already passed fires at the next watermark (event time) or
    processing-time advance. (The register/delete methods are the core's
    :class:`~service.core.timers.KeyTimers`: one call per timer operation.)
    """

    __slots__ = ("_ctx", "_timers")

    def __init__(self, ctx: Context, timers: ProcessTimers) -> None:
        super().__init__(timers, ctx, _bad_timer)
        self._ctx = ctx
        self._timers = timers

    @property
    def current_watermark(self) -> int:
        return self._timers.current_watermark

    @property
    def current_processing_time(self) -> int:
        return self._ctx.current_processing_time


class Context:
    """The current key, time and timer of a call, plus timers and keyed state.

    - ``timestamp``: the record's timestamp in ``process_element``; the timer's timestamp
      in an event-time ``on_timer``; None in a processing-time ``on_timer``.
    - ``key``: the current key (None only in ``open``).
    - ``time_domain``: the domain of the firing timer in ``on_timer``, else None.
    """

    __slots__ = (
        "_clock",
        "_n",
        "_position",
        "_state",
        "_timers",
        "key",
        "time_domain",
        "timer_service",
        "timestamp",
    )

    def __init__(self, timers: ProcessTimers, clock: Clock, maps: StateMaps | None = None) -> None:
        self.key: str | None = None
        self.timestamp: int | None = None
        self.time_domain: TimeDomain | None = None
        self._position: int | str = ""
        self._n = 0
        self._timers = timers
        self._clock = clock
        self._state = KeyedStateBackend(self, maps)
        self.timer_service = TimerServiceView(self, timers)

    @property
    def state_backend(self) -> KeyedStateBackend:
        return self._state

    @property
    def raw_timers(self) -> ProcessTimers:
        """The operator's timer service itself, taking ``(ts, key, None)`` with no checks.

        For the built-in functions' hot path (it saves a call per timer operation); user
        code should use :attr:`timer_service`, which scopes timers to the current key.
        """
        return self._timers

    @property
    def current_watermark(self) -> int:
        """The operator's current watermark (MIN before the first)."""
        return self._timers.current_watermark

    @property
    def current_processing_time(self) -> int:
        """Processing time now, from the operator's clock."""
        return self._clock.now_ms()

    def value_state(self, name: str, ttl_ms: int | None = None) -> ValueState:
        """The value state ``name`` (created on first use); keep the handle, e.g. in open."""
        return cast(ValueState, self._state.handle(name, StateKind.VALUE, ttl_ms))

    def list_state(self, name: str, ttl_ms: int | None = None) -> ListState:
        return cast(ListState, self._state.handle(name, StateKind.LIST, ttl_ms))

    def map_state(self, name: str, ttl_ms: int | None = None) -> MapState:
        return cast(MapState, self._state.handle(name, StateKind.MAP, ttl_ms))


class Out:
    """Emits values for the current key; see the operator for ids and timestamps."""

    __slots__ = ("_collector", "_ctx", "_pipeline")

    def __init__(self, ctx: Context, collector: Collector, pipeline: str) -> None:
        self._ctx = ctx
        self._collector = collector
        self._pipeline = pipeline

    def collect(self, value: object) -> None:
        """Emit ``value``, timestamped like the current record or event-time timer."""
        ctx = self._ctx
        n = ctx._n
        ctx._n = n + 1
        key = ctx.key
        self._collector.results.append(
            KeyedOutput(f"{self._pipeline}|{key}|{ctx._position}|{n}", key, ctx.timestamp, value)  # type: ignore[arg-type]
        )
