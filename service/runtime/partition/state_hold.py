"""Keeps a session's operator state still while a checkpoint's snapshot yields to the loop.

A checkpoint reads every key changed since the last one. With the rocksdb backend and
more new keys than the cache holds, that is hundreds of thousands of keys at ~30 µs each:
taken in one synchronous step it held the event loop for 10-30 s, long enough for the
consumer's heartbeats, aiokafka's own metadata requests and the broker health check to
time out (the 10M sessions runs of issue #53). So the snapshot is taken in slices, the
loop free between them (:mod:`~service.runtime.consumer_group.checkpointing`).

The snapshot must still see one point of the state, so nothing may change it meanwhile.
The fetch loop awaits the snapshot, and a rebalance's revoke and restore wait for the
checkpoint lock; what else changes state runs from the loop's own callbacks, and each
asks this hold first:

- the watermark emitter skips its ticks (the next one after the hold combines anew);
- a partition's processing-time wake-up is put off (:meth:`StateHold.defer`) and armed
  again when the hold ends, so a timer due meanwhile fires right after.

Reads (status, metrics, pull queries) go on: they change no entry's value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["StateHold"]


class StateHold:
    """Whether a snapshot is being taken, and what waits for it to end."""

    __slots__ = ("_deferred", "held", "holds")

    def __init__(self) -> None:
        self.held = False
        self.holds = 0
        """Holds taken so far (one from the next, for whoever watches them)."""
        self._deferred: list[Callable[[], None]] = []

    def defer(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the hold ends (synchronously, in the order deferred)."""
        self._deferred.append(callback)

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Hold the state for the ``with`` block; then run what was deferred.

        The deferred callbacks only re-arm wake-ups (no state changes), and run before
        anything else can: a revoke that closes a partition after the checkpoint cancels
        what its callback armed."""
        if self.held:  # nested: the outer hold releases
            yield
            return
        self.held = True
        self.holds += 1
        try:
            yield
        finally:
            self.held = False
            deferred, self._deferred = self._deferred, []
            for callback in deferred:
                callback()
