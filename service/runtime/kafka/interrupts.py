"""A stop that does not wait for a long await: a group join or a fetch in flight.

A graceful stop must not wait for a join (it can take the whole rebalance timeout) nor
for a fetch held by a rebalance, so the session awaits them through
:class:`Interruptible`, and a stop cancels the one in flight. The caller sees
:class:`Interrupted` and ends gracefully; a cancellation of the session's own task
(``kill``) still propagates as a ``CancelledError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Interrupted(Exception):
    """A stop cancelled an await that can block for long (a group join)."""


class Interruptible:
    """Awaits one thing at a time in a task that :meth:`interrupt` can cancel."""

    __slots__ = ("_pending", "aborted", "interrupted")

    def __init__(self) -> None:
        self.interrupted = False
        self.aborted: BaseException | None = None
        """Set by :meth:`abort`: raised by what is awaited now and by every later await."""
        self._pending: asyncio.Task[Any] | None = None

    async def run(self, awaitable: Coroutine[Any, Any, T]) -> T:
        """Await ``awaitable``; :class:`Interrupted` if a stop cancelled it (or came first)."""
        if self.aborted is not None:
            awaitable.close()
            raise self.aborted
        if self.interrupted:
            awaitable.close()
            raise Interrupted
        task = asyncio.get_running_loop().create_task(awaitable)
        self._pending = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is None or current.cancelling() == 0:
                if self.aborted is not None:
                    raise self.aborted from None
                if self.interrupted:
                    raise Interrupted from None
            raise
        finally:
            self._pending = None

    def interrupt(self) -> None:
        """Cancel what is being awaited, and refuse what comes next."""
        self.interrupted = True
        if self._pending is not None:
            self._pending.cancel()

    def abort(self, exc: BaseException) -> None:
        """Fail what is being awaited, and everything awaited later, with ``exc``.

        For a broker that went away: aiokafka's ``getmany`` can wait indefinitely for a
        group coordinator that does not answer, so the error is not left for it to see.
        """
        if self.aborted is None:
            self.aborted = exc
        if self._pending is not None:
            self._pending.cancel()


async def abandon_join(consumer: Any) -> None:
    """Cancel a group join in progress, so that ``consumer.stop()`` does not wait for it.

    aiokafka's ``stop()`` lets its coordination task "finish all pending work" first,
    and a join can take the whole rebalance timeout (50+ s were seen). Nothing is
    assigned here (the caller checks), so there is nothing to hand over: the member
    simply never completes its join, and the group rebalances without it. This reaches
    into aiokafka's private ``_coordinator._coordination_task`` (aiokafka 0.14); if
    that changes, the stop falls back to waiting for the join.
    """
    coordinator = getattr(consumer, "_coordinator", None)
    task = getattr(coordinator, "_coordination_task", None)
    if isinstance(task, asyncio.Task) and not task.done():
        task.cancel()
        await asyncio.wait([task])
