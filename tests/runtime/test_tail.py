"""A topic tail closes its consumer whatever happens to its start (no broker needed:
the failures are a refused connection and a broker that never answers)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import pytest
from aiokafka.errors import KafkaConnectionError

from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.embedded_broker import free_port
from service.runtime.kafka.tail import TopicTail, open_tails

TOPICS = {"result": "out"}


@pytest.fixture
async def silent_listener() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """An address that accepts connections and never answers a request, and an event
    set once it holds one."""
    held: list[asyncio.StreamWriter] = []
    connected = asyncio.Event()

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        connected.set()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"127.0.0.1:{port}", connected
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_a_tail_whose_start_fails_closes_its_consumer() -> None:
    tail = TopicTail(KafkaCluster(f"127.0.0.1:{free_port()}"), TOPICS)
    with pytest.raises(KafkaConnectionError):
        async with tail:
            pytest.fail("a tail without a broker must not open")
    assert open_tails() == 0
    del tail
    gc.collect()  # an unclosed consumer warns here, and the warning fails the test


async def test_a_tail_cancelled_while_starting_closes_its_consumer(
    silent_listener: tuple[str, asyncio.Event],
) -> None:
    address, connected = silent_listener
    tail = TopicTail(KafkaCluster(address), TOPICS)
    entered = asyncio.create_task(tail.__aenter__())
    async with asyncio.timeout(10):
        await connected.wait()  # the start connected and waits for its first answer
    assert open_tails() == 1
    entered.cancel()
    with pytest.raises(asyncio.CancelledError):
        await entered
    assert open_tails() == 0
    del tail, entered
    gc.collect()  # an unclosed consumer warns here, and the warning fails the test
