"""The batch producer on the real broker: order, batch boundaries, byte accounting."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaProducer

from service.runtime.kafka.batch_producer import BatchProducer, ProduceError
from tests.integration.kafka_utils import create_topic, read_topic, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

BATCH_BYTES = 2048


@pytest.fixture
async def batches(bootstrap_servers: str) -> AsyncIterator[BatchProducer]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers,
        linger_ms=0,
        max_batch_size=BATCH_BYTES,
        enable_idempotence=False,
    )
    await producer.start()
    batches = BatchProducer(producer, max_pending_bytes=1 << 20)
    batches.start()
    yield batches
    await batches.close()
    await producer.stop()


async def test_appends_go_out_in_order_across_batch_boundaries(
    bootstrap_servers: str, batches: BatchProducer
) -> None:
    topic = unique("appendorder")
    await create_topic(bootstrap_servers, topic, 2)
    rows = [(f"k{i}".encode(), f'{{"i": {i}}}'.encode() * 3, 1_000 + i) for i in range(500)]
    for key, value, timestamp in rows:  # ~20 KB: about ten batches
        batches.append(topic, 1, key, value, timestamp)
    assert batches.pending_bytes == sum(len(k) + len(v) for k, v, _ in rows) + 24 * len(rows)
    await batches.flush()
    assert batches.pending_bytes == 0
    records = await read_topic(bootstrap_servers, topic)
    assert [(r.partition, r.key, r.value, r.timestamp) for r in records] == [
        (1, k, v, ts) for k, v, ts in rows
    ]


async def test_a_row_larger_than_the_batch_size_goes_out_in_a_batch_of_its_own(
    bootstrap_servers: str, batches: BatchProducer
) -> None:
    topic = unique("appendbig")
    await create_topic(bootstrap_servers, topic, 1)
    big = b"x" * (4 * BATCH_BYTES)
    for key, value in ((b"a", b"small"), (b"b", big), (b"c", b"end")):
        batches.append(topic, 0, key, value, None)
    await batches.flush()
    assert batches.pending_bytes == 0
    records = await read_topic(bootstrap_servers, topic)
    assert [r.value for r in records] == [b"small", big, b"end"]


async def test_a_mark_numbers_every_batch_queued_so_far(
    bootstrap_servers: str, batches: BatchProducer
) -> None:
    topic = unique("marknumbers")
    await create_topic(bootstrap_servers, topic, 2)
    assert batches.mark() == 0  # nothing appended: nothing to wait for
    for i in range(200):  # ~6 KB in partition 0: full batches queue as they fill
        batches.append(topic, 0, b"k", f'{{"i": {i:04}}}'.encode() * 2, None)
    batches.append(topic, 1, b"k", b"one", None)
    first = batches.mark()
    assert first >= 3  # the full ones, then the two open ones
    assert batches.mark() == first  # nothing appended since: no new batch
    await batches.wait_delivered(first)
    assert batches.pending_bytes == 0


async def test_waiting_for_a_mark_does_not_wait_for_what_was_appended_after_it(
    bootstrap_servers: str, batches: BatchProducer
) -> None:
    topic = unique("markafter")
    await create_topic(bootstrap_servers, topic, 1)
    batches.append(topic, 0, b"a", b"before", None)
    mark = batches.mark()
    batches.append(topic, 0, b"b", b"after", None)  # open: not sent until the next mark
    await batches.wait_delivered(mark)
    assert batches.pending_bytes == len(b"b") + len(b"after") + 24
    assert [r.value for r in await read_topic(bootstrap_servers, topic)] == [b"before"]
    await batches.flush()
    assert [r.value for r in await read_topic(bootstrap_servers, topic)] == [b"before", b"after"]


async def test_appending_to_closed_batches_raises_instead_of_losing_the_record(
    bootstrap_servers: str, batches: BatchProducer
) -> None:
    """Nothing sends what closed batches hold: a caller still appending there (an
    operator holding batches it should have let go) fails its session loudly."""
    topic = unique("appendclosed")
    await batches.close()
    with pytest.raises(ProduceError, match="closed"):
        batches.append(topic, 0, b"k", b"v", None)
