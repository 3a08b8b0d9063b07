"""The young collection on a clock (runtime/lifecycle/garbage.py); no broker."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from collections.abc import Iterator

import pytest

from service.runtime.lifecycle.garbage import collect_young_garbage


class Node:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def thresholds_never_reached() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(10**9, 10**9, 10**9)
    try:
        yield
    finally:
        gc.set_threshold(*before)


@pytest.mark.usefixtures("thresholds_never_reached")
async def test_cyclic_garbage_is_freed_without_the_threshold_being_reached() -> None:
    garbage = Node()
    gone = weakref.ref(garbage)
    del garbage
    assert gone() is not None  # a cycle: only a collection frees it
    task = asyncio.get_running_loop().create_task(collect_young_garbage(0.01))
    try:
        async with asyncio.timeout(10):
            while gone() is not None:  # noqa: ASYNC110 (nothing to wait on: a weakref)
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
