"""Stage 1's writer asks for its partition's outputs once per batch (issue 38's rule)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, NamedTuple

import pytest
from aiokafka import AIOKafkaProducer

from service.core.partitioner import KeyPartitioner
from service.runtime.kafka.batch_producer import BatchProducer, ProduceError
from service.runtime.shuffle.writer import ShuffleWriter


class Fetched(NamedTuple):
    """What the writer reads of a fetched record."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes], ...] = ()


@pytest.fixture
async def producer() -> AsyncIterator[AIOKafkaProducer]:
    """Never started: it only builds record batches here (no broker, no I/O)."""
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9")
    yield producer
    await producer.stop()


def batch(offset: int) -> list[Any]:
    return [("k", 1_000, {}, offset, Fetched(offset, b"k", b"{}", 1_000))]


async def test_a_partition_kept_across_a_rebalance_writes_to_its_new_transaction(
    producer: AIOKafkaProducer,
) -> None:
    """The revoke closes the partition's transactional producer and the assignment opens
    another; a writer kept in memory must route into the new one's batches, or what it
    writes is never sent while the new transaction commits its source offset."""
    old, new = BatchProducer(producer), BatchProducer(producer)
    current = [old]
    writer = ShuffleWriter(lambda: current[0], "shuffle", KeyPartitioner(2), 0, 1)
    writer.process_batch(batch(0))
    before = old.pending_bytes
    assert before > 0
    await old.close()
    current[0] = new
    writer.process_batch(batch(1))
    writer.announce(1_000, False)
    assert old.pending_bytes == before
    assert new.pending_bytes > 0


async def test_closed_batches_refuse_what_a_stale_writer_appends(
    producer: AIOKafkaProducer,
) -> None:
    closed = BatchProducer(producer)
    await closed.close()
    writer = ShuffleWriter(lambda: closed, "shuffle", KeyPartitioner(2), 0, 1)
    with pytest.raises(ProduceError, match="closed"):
        writer.process_batch(batch(0))
