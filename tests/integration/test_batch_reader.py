"""The batch reader hands out exactly what ``getmany`` would, on the real broker.

It reads aiokafka's fetched record batches directly (no ``ConsumerRecord`` per record),
so these tests hold it to ``getmany``'s results and bookkeeping: the same records with
the same offsets, keys, values, timestamps and headers; nothing before the position; no
records of a paused partition; the consumed position moved past what was handed out.
"""

from __future__ import annotations

import gc
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import CorruptRecordException
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from service.runtime.kafka.batch_reader import BatchReader, lean_reading_supported
from tests.integration.kafka_utils import create_topic, unique

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

PARTITIONS = 3
PER_PARTITION = 250
Row = tuple[int, int, bytes | None, bytes | None, int, tuple[tuple[str, bytes], ...]]


@pytest.fixture
async def topic(bootstrap_servers: str) -> str:
    """A 3-partition topic with several produced batches per partition, some records
    with headers, a null key or a null value."""
    name = unique("reader")
    await create_topic(bootstrap_servers, name, PARTITIONS)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, enable_idempotence=False)
    await producer.start()
    try:
        for round_ in range(5):  # five sends per partition: five record batches
            for partition in range(PARTITIONS):
                batch = producer.create_batch()
                for i in range(PER_PARTITION // 5):
                    n = round_ * 1000 + i
                    key = None if n % 17 == 0 else f"k{n}".encode()
                    value = None if n % 23 == 0 else f'{{"n": {n}}}'.encode()
                    headers = [("h", str(n).encode())] if n % 5 == 0 else []
                    assert batch.append(
                        timestamp=1_700_000_000_000 + n, key=key, value=value, headers=headers
                    )
                await (await producer.send_batch(batch, name, partition=partition))
    finally:
        await producer.stop()
    return name


@pytest.fixture
async def consumer(bootstrap_servers: str, topic: str) -> AsyncIterator[AIOKafkaConsumer]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        max_partition_fetch_bytes=4096,  # several fetches per partition
    )
    await consumer.start()
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    yield consumer
    await consumer.stop()


def row(tp: TopicPartition, record: Any) -> Row:
    headers = tuple((k, bytes(v)) for k, v in record.headers or ())
    return (tp.partition, record.offset, record.key, record.value, record.timestamp, headers)


async def read_all(
    read: Any, expected: int, max_records: int = 10_000, deadline_s: float = 20.0
) -> list[Row]:
    rows: list[Row] = []
    deadline = time.monotonic() + deadline_s
    while len(rows) < expected and time.monotonic() < deadline:
        batch = await read(timeout_ms=200, max_records=max_records)
        for tp, records in batch.items():
            rows.extend(row(tp, record) for record in records)
    return rows


async def test_the_installed_aiokafka_is_read_batch_by_batch(consumer: AIOKafkaConsumer) -> None:
    # an aiokafka upgrade that moves the internals must fail here, not silently slow down
    assert lean_reading_supported(consumer)
    assert BatchReader(consumer).lean


async def test_reads_the_same_records_as_getmany(
    bootstrap_servers: str, topic: str, consumer: AIOKafkaConsumer
) -> None:
    total = PARTITIONS * PER_PARTITION
    lean = await read_all(BatchReader(consumer).read, total)
    reference = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        max_partition_fetch_bytes=4096,
    )
    await reference.start()
    try:
        reference.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        expected = await read_all(reference.getmany, total)
    finally:
        await reference.stop()
    assert len(expected) == total
    assert sorted(lean) == sorted(expected)
    for partition in range(PARTITIONS):  # and in offset order within a partition
        offsets = [r[1] for r in lean if r[0] == partition]
        assert offsets == sorted(offsets) == list(range(PER_PARTITION))


def _fetches_not_freed(consumer: AIOKafkaConsumer) -> int:
    """aiokafka's per-partition fetch results still in memory (collectable or not),
    besides the completed fetches the fetcher holds for the next read."""
    from aiokafka.consumer.fetcher import PartitionRecords

    pending = sum(
        1 for r in consumer._fetcher._records.values() if hasattr(r, "_partition_records")
    )
    return sum(1 for o in gc.get_objects() if type(o) is PartitionRecords) - pending


async def test_a_drained_fetch_is_freed_at_once_not_left_to_the_cyclic_collector(
    topic: str, consumer: AIOKafkaConsumer
) -> None:
    """Each fetch holds its whole response (up to ``max_partition_fetch_bytes``); one left
    in a reference cycle waits for a collection, and the runtime's collections are rare
    (``gc_threshold``): the buffers piled up to hundreds of MB in a long run."""
    gc.collect()
    gc.disable()
    try:
        rows = await read_all(BatchReader(consumer).read, PARTITIONS * PER_PARTITION)
        assert len(rows) == PARTITIONS * PER_PARTITION  # several fetches per partition
        assert _fetches_not_freed(consumer) == 0
    finally:
        gc.enable()


async def test_starts_at_the_position_even_inside_a_record_batch(
    topic: str, consumer: AIOKafkaConsumer
) -> None:
    tp = TopicPartition(topic, 1)
    for partition in range(PARTITIONS):
        consumer.seek(TopicPartition(topic, partition), 0)
    consumer.seek(tp, 7)  # the first batch holds offsets 0-49
    rows = await read_all(BatchReader(consumer).read, PARTITIONS * PER_PARTITION - 7)
    offsets = [r[1] for r in rows if r[0] == 1]
    assert offsets == list(range(7, PER_PARTITION))


async def test_moves_the_consumed_position_past_what_it_handed_out(
    topic: str, consumer: AIOKafkaConsumer
) -> None:
    await read_all(BatchReader(consumer).read, PARTITIONS * PER_PARTITION)
    for partition in range(PARTITIONS):
        assert await consumer.position(TopicPartition(topic, partition)) == PER_PARTITION


async def test_a_paused_partition_yields_nothing_until_resumed(
    topic: str, consumer: AIOKafkaConsumer
) -> None:
    paused = TopicPartition(topic, 2)
    consumer.pause(paused)
    reader = BatchReader(consumer)
    rows = await read_all(reader.read, 2 * PER_PARTITION)
    assert {r[0] for r in rows} == {0, 1}
    assert await read_all(reader.read, 1, deadline_s=0.5) == []
    consumer.resume(paused)
    rows = await read_all(reader.read, PER_PARTITION)
    assert {r[0] for r in rows} == {2}
    assert [r[1] for r in rows] == list(range(PER_PARTITION))


async def test_max_records_stops_after_the_partition_that_reaches_it(
    topic: str, consumer: AIOKafkaConsumer
) -> None:
    reader = BatchReader(consumer)
    deadline = time.monotonic() + 20
    seen = 0
    while seen < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
        batch = await reader.read(timeout_ms=200, max_records=1)
        assert len(batch) <= 1  # one partition's fetch, handed out whole
        seen += sum(len(records) for records in batch.values())
    assert seen == PARTITIONS * PER_PARTITION


def record_batch(base: int, values: list[bytes], corrupt: bool = False) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_000 + base + i, key=b"k", value=value, headers=[])
    data = bytearray(builder.build())
    if corrupt:
        data[-3] ^= 0xFF  # a byte of the last value: the batch CRC no longer matches
    return bytes(data)


@pytest.mark.requires_broker("stores_corrupt_batches")
async def test_a_batch_failing_its_crc_is_raised_and_never_skipped(bootstrap_servers: str) -> None:
    name = unique("crc")
    await create_topic(bootstrap_servers, name, 1)
    tp = TopicPartition(name, 0)
    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers)
    await client.bootstrap()
    try:  # raw produce requests: the embedded broker stores a batch as it gets it
        await client.force_metadata_update()
        leader = client.cluster.leader_for_partition(tp)
        for batch in (record_batch(0, [b"a", b"b"], corrupt=True), record_batch(2, [b"c"])):
            await client.send(leader, ProduceRequest(None, -1, 5000, [(name, [(0, batch)])]))
    finally:
        await client.close()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers, enable_auto_commit=False, fetch_max_wait_ms=20
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        reader = BatchReader(consumer)
        for _ in range(3):  # fetched again from the same place each time
            with pytest.raises(CorruptRecordException):
                await read_all(reader.read, 1, deadline_s=5)
            assert await consumer.position(tp) == 0
    finally:
        await consumer.stop()


async def read_committed(
    bootstrap_servers: str, topic: str, lean: bool, expected: int
) -> list[Row]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        max_partition_fetch_bytes=4096,  # several fetches per partition
        isolation_level="read_committed",
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(2)])
        reader = BatchReader(consumer)
        assert reader.lean
        read = reader.read if lean else consumer.getmany
        rows = await read_all(read, expected)
        assert await read_all(read, 1, deadline_s=1.0) == []  # nothing after the end
        return rows
    finally:
        await consumer.stop()


@pytest.mark.requires_broker("transactions")
async def test_read_committed_skips_aborted_transactions_as_getmany_does(
    bootstrap_servers: str,
) -> None:
    name = unique("txn")
    await create_topic(bootstrap_servers, name, 2)
    committing = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, transactional_id=unique("c"))
    aborting = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, transactional_id=unique("a"))
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap_servers)
    for producer in (committing, aborting, plain):
        await producer.start()
    kept: set[bytes] = set()
    try:
        for round_ in range(4):  # transactions interleaved with each other and plain sends
            await committing.begin_transaction()
            await aborting.begin_transaction()
            for i in range(30):
                for partition in range(2):
                    for producer, kind in ((committing, b"c"), (aborting, b"a"), (plain, b"p")):
                        value = b"%s-%d-%d-%d" % (kind, round_, i, partition)
                        await (await producer.send(name, value=value, partition=partition))
                        if kind != b"a":
                            kept.add(value)
            await aborting.abort_transaction()
            await committing.commit_transaction()
    finally:
        for producer in (committing, aborting, plain):
            await producer.stop()
    lean = await read_committed(bootstrap_servers, name, True, len(kept))
    reference = await read_committed(bootstrap_servers, name, False, len(kept))
    assert {r[3] for r in lean} == kept
    assert len(lean) == len(kept)
    assert sorted(lean) == sorted(reference)


@pytest.mark.requires_broker("transactions")
async def test_notes_the_position_past_the_markers_of_the_last_transaction(
    bootstrap_servers: str,
) -> None:
    """A read_committed partition read to its end stands after its last commit marker,
    one offset past its last record, and the reader says so (a fetch of the marker alone
    yields no record)."""
    name = unique("txnend")
    await create_topic(bootstrap_servers, name, 1)
    tp = TopicPartition(name, 0)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, transactional_id=unique("t"))
    await producer.start()
    try:
        for round_ in range(3):
            await producer.begin_transaction()
            for i in range(5):
                await (await producer.send(name, value=b"%d-%d" % (round_, i), partition=0))
            await producer.commit_transaction()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        isolation_level="read_committed",
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        reader = BatchReader(consumer)
        rows = await read_all(reader.read, 15)
        end = (await consumer.end_offsets([tp]))[tp]
        assert max(r[1] for r in rows) + 1 < end  # the last commit marker lies between
        if reader.positions.get(tp) != end:  # the marker came in a fetch of its own
            assert await read_all(reader.read, 1, deadline_s=1.0) == []
        assert reader.positions[tp] == end == await consumer.position(tp)
    finally:
        await consumer.stop()
