"""The one event-loop wake-up of a timer service's processing-time queue.

semantics.md section 4: only the earliest processing-time timer is scheduled on the
event loop, with one ``loop.call_at`` handle per timer service (never one per timer).
After every change that may move the head (a batch, a watermark, a firing) the owner
calls :meth:`ProcessingTimeScheduler.reschedule`; a different head replaces the handle.
When the handle runs, every timer due by "now" fires (through the owner's ``fire``), then
the new head is scheduled. A head in the past is scheduled for as soon as possible.

While a checkpoint's snapshot holds the state (:class:`~.state_hold.StateHold`), a
wake-up fires nothing: it is armed again when the hold ends.

Processing time is the injected clock's; the event loop's monotonic clock only measures
the delay, so a test clock that jumps forward is honoured at the next reschedule.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from service.core.time import Clock
from service.runtime.partition.state_hold import StateHold


class ProcessingTimeScheduler:
    """Keeps exactly one ``call_at`` handle for the head of one processing-time queue."""

    __slots__ = (
        "_clock",
        "_fire",
        "_handle",
        "_head",
        "_hold",
        "_loop",
        "_next_time",
        "fired",
        "wakeups",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        clock: Clock,
        next_time: Callable[[], int | None],
        fire: Callable[[int, int], None],
        hold: StateHold | None = None,
    ) -> None:
        """``next_time()`` is the queue's head (or None); ``fire(now, head)`` fires timers;
        ``hold``: the session's, which puts wake-ups off while a snapshot is taken."""
        self._loop = loop
        self._hold = hold
        self._clock = clock
        self._next_time = next_time
        self._fire = fire
        self._handle: asyncio.TimerHandle | None = None
        self._head: int | None = None
        self.wakeups = 0
        """Wake-ups since the metrics last took them (reset by the runner)."""
        self.fired = 0
        """Wake-ups ever: a checkpoint compares it to know whether timers changed state."""

    @property
    def scheduled_for(self) -> int | None:
        """The processing time the handle is scheduled for, or None when none is."""
        return self._head if self._handle is not None else None

    @property
    def has_handle(self) -> bool:
        return self._handle is not None

    def reschedule(self) -> None:
        """Make the handle match the queue's current head (cheap when it already does)."""
        head = self._next_time()
        if head == self._head and (head is None or self._handle is not None):
            return
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._head = head
        if head is None:
            return
        delay_ms = head - self._clock.now_ms()
        when = self._loop.time() + (delay_ms / 1000.0 if delay_ms > 0 else 0.0)
        self._handle = self._loop.call_at(when, self._run)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = None
        self._head = None

    def _run(self) -> None:
        head = self._head
        self._handle = None
        self._head = None
        hold = self._hold
        if hold is not None and hold.held:
            hold.defer(self.reschedule)  # nothing armed meanwhile: no busy loop
            return
        self.wakeups += 1
        self.fired += 1
        now = self._clock.now_ms()
        self._fire(now, now if head is None else head)
        self.reschedule()
