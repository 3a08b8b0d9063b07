"""within_loop_time (service/runtime/lifecycle/loop_time.py): a timeout that a held
event loop does not use up."""

from __future__ import annotations

import asyncio
import time

import pytest

from service.runtime.lifecycle.loop_time import within_loop_time


async def test_an_answer_that_came_while_the_loop_was_held_is_taken() -> None:
    """The answer is due 50 ms in, but the loop is held for 1 s (past the 0.3 s timeout):
    it is taken when the loop runs again, as asyncio.timeout would not."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[int] = loop.create_future()
    loop.call_later(0.05, answer.set_result, 7)
    loop.call_soon(time.sleep, 1.0)  # a synchronous step holding the loop
    assert await within_loop_time(answer, 0.3) == 7


async def test_asyncio_s_own_timeout_gives_up_on_that_answer() -> None:
    """The case above with asyncio.timeout: what the health check did before."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[int] = loop.create_future()
    loop.call_later(0.05, answer.set_result, 7)
    loop.call_soon(time.sleep, 1.0)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await answer


async def test_no_answer_times_out_and_is_cancelled() -> None:
    never: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await within_loop_time(never, 0.3)
    assert never.cancelled()
