"""Timeouts that count only the time the event loop was free to run.

A synchronous step that holds the loop (a checkpoint's snapshot of many changed keys
holds it for seconds) delays every callback behind it. An ``asyncio.timeout`` around a
request made before the step then expires as soon as the loop runs again, before the
answer that already arrived is read: a broker health check timed out that way declared a
healthy broker lost, and failed the pipeline whose checkpoint held the loop (10M new
session keys, issue #53). :func:`within_loop_time` measures its budget in slices, a slice
in which the loop was held counting as a slice, not as the time it lasted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["SLICE_S", "within_loop_time"]

T = TypeVar("T")

SLICE_S = 0.25
"""How often the budget is counted: a slice that lasted longer (the loop held) counts as
two slices at most."""


async def within_loop_time(awaitable: Awaitable[T], timeout_s: float) -> T:
    """``awaitable``'s result, or :class:`TimeoutError` once ``timeout_s`` of the loop's
    running time passed without it (it is then cancelled)."""
    task = asyncio.ensure_future(awaitable)
    spent = 0.0
    try:
        while True:
            started = time.monotonic()
            done, _ = await asyncio.wait({task}, timeout=SLICE_S)
            if done:
                return task.result()
            spent += min(time.monotonic() - started, 2 * SLICE_S)
            if spent >= timeout_s:
                raise TimeoutError(f"no answer within {timeout_s} s of the loop's time")
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
