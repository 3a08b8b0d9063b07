"""Fetched records, batch by batch, without a ``ConsumerRecord`` per record.

aiokafka's ``getmany`` turns every record into a ``ConsumerRecord`` through three layers
of Python generators (``FetchResult.getall`` -> ``PartitionRecords.__next__`` ->
``_unpack_records`` -> ``_consumer_record``): about 2 us per record on this machine,
most of what a raw aiokafka consume costs, and as much as decoding and windowing the
record. The record batches underneath are already parsed by aiokafka's C extension, and
a batch's records come out of it as objects with ``offset``, ``timestamp``, ``key``,
``value`` and ``headers`` -- everything the runtime reads. :class:`BatchReader` drains
the consumer's completed fetches into lists of those records (``list(batch)``, C speed)
and keeps aiokafka's bookkeeping exactly as ``getmany`` does: it skips control batches
and records before the fetch position, checks CRCs when the consumer does, advances the
consumed position, wakes the fetcher for the next fetch, waits for data up to the
timeout, and raises fetch errors.

That needs aiokafka internals (``Fetcher._records``, ``FetchResult``, ``PartitionRecords``
and a few helpers), so :func:`lean_reading_supported` checks them on the installed
version, and a consumer that does not pass is read through ``getmany`` instead: same
records, slower. A ``read_committed`` consumer (exactly-once pipelines) skips the batches
of aborted transactions as aiokafka does, with aiokafka's own bookkeeping of the fetch's
aborted transactions. ``tests/integration`` compares both paths on a real broker.

``max_records`` is honoured per fetched partition: a partition's fetch (at most
``max_partition_fetch_bytes``) is handed out whole, and no further partition is drained
once the batch holds ``max_records``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import ConsumerStoppedError, CorruptRecordException


class FetchedRecord(Protocol):
    """What the runtime reads of a Kafka record (aiokafka's batch records and
    ``ConsumerRecord`` both have it)."""

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Any: ...


Batch = dict[TopicPartition, list[Any]]

_PREFETCH_TURNS = 4


def lean_reading_supported(consumer: AIOKafkaConsumer) -> bool:
    """Whether this aiokafka exposes what :class:`BatchReader` relies on."""
    try:
        from aiokafka.consumer.fetcher import FetchResult, PartitionRecords
    except ImportError:
        return False
    fetcher = getattr(consumer, "_fetcher", None)
    subscription = getattr(consumer, "_subscription", None)
    if fetcher is None or subscription is None:
        return False
    needed_fetcher = ("_records", "_notify", "_create_fetch_waiter", "_isolation_level")
    needed_result = ("check_assignment", "_update_position")
    needed_records = ("_unpack_records", "_consume_aborted_up_to", "_contains_abort_marker")
    return (
        all(hasattr(fetcher, name) for name in needed_fetcher)
        and all(hasattr(FetchResult, name) for name in needed_result)
        and all(hasattr(PartitionRecords, name) for name in needed_records)
        and hasattr(subscription, "fetch_context")
        and hasattr(subscription, "reassignment_in_progress")
    )


class BatchReader:
    """Reads one consumer's fetched records; ``read`` replaces ``getmany``.

    Built after the consumer started (the fetcher exists from then on).
    """

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self._consumer = consumer
        self.lean = lean_reading_supported(consumer)
        self.positions: dict[TopicPartition, int] = {}
        """The consumed position of every partition drained since the caller last
        cleared this, records or not: past the last record it can stand on transaction
        markers (a fetch of markers alone yields no record) or a compaction gap."""

    async def read(self, timeout_ms: int, max_records: int) -> Batch:
        consumer = self._consumer
        if not self.lean:
            batch: Batch = await consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
            return batch
        if consumer._closed:
            raise ConsumerStoppedError()
        consumer._coordinator.check_errors()
        with consumer._subscription.fetch_context():
            batch = await self._fetched(timeout_ms / 1000, max_records)
        if batch:
            # Let the fetcher send the next fetch request before the caller spends its
            # CPU on this batch, so the broker prepares the next response meanwhile
            # (waking the fetcher task and starting its request task take a few turns).
            for _ in range(_PREFETCH_TURNS):
                await asyncio.sleep(0)
        return batch

    async def _fetched(self, wait_s: float, max_records: int) -> Batch:
        """``Fetcher.fetched_records`` with whole record batches instead of records."""
        from aiokafka.consumer.fetcher import FetchResult

        consumer = self._consumer
        fetcher = consumer._fetcher
        subscription = consumer._subscription
        while True:
            if subscription.reassignment_in_progress:
                # records fetched before a rebalance may not be ours any more
                await subscription.wait_for_assignment()
            started = time.monotonic()
            drained: Batch = {}
            taken = 0
            pending = fetcher._records
            for tp in list(pending):
                result = pending[tp]
                if type(result) is FetchResult:
                    try:
                        records = _drain(tp, result, self.positions)
                    finally:
                        # Drained, or failed (a bad CRC) with the position unmoved: either
                        # way the partition is fetched again from its position.
                        _release(result)
                        del pending[tp]
                        fetcher._notify(fetcher._wait_consume_future)
                    if records:
                        drained[tp] = records
                        taken += len(records)
                        if taken >= max_records:
                            break
                elif drained:
                    return drained  # the error is raised on the next call
                else:
                    del pending[tp]  # so the partition is fetched again
                    fetcher._notify(fetcher._wait_consume_future)
                    result.check_raise()
            if drained or not wait_s:
                return drained
            waiter = fetcher._create_fetch_waiter()
            done, not_done = await asyncio.wait([waiter], timeout=wait_s)
            if not done or fetcher._closed:
                for future in not_done:
                    future.cancel()
                return {}
            waiter.result()  # authorization and similar errors
            wait_s = max(0.0, wait_s - (time.monotonic() - started))


def _drain(tp: TopicPartition, result: Any, positions: dict[TopicPartition, int]) -> list[Any]:
    """Every record of one completed fetch, and the consumed position moved past them
    (and noted in ``positions``).

    A result whose partition was revoked, paused or seeked since the fetch yields nothing
    (``check_assignment``, as ``getmany`` does); its records are fetched again if needed.
    """
    if not result.check_assignment(tp):
        return []
    from aiokafka.consumer.fetcher import READ_COMMITTED

    partition_records = result._partition_records
    memory = partition_records._records
    check_crcs = partition_records._check_crcs
    read_committed = partition_records._isolation_level == READ_COMMITTED
    position = partition_records.next_fetch_offset
    records: list[Any] = []
    while memory.has_next():
        batch = memory.next_batch()
        if check_crcs and not batch.validate_crc():
            raise CorruptRecordException(f"Invalid CRC - {tp}")
        if read_committed and batch.producer_id is not None and _aborted(partition_records, batch):
            position = max(position, batch.next_offset)
            continue
        if not batch.is_control_batch:
            rows = list(batch)
            if rows and rows[0].offset < position:  # a batch that began before the position
                rows = [row for row in rows if row.offset >= position]
            records += rows
        position = max(position, batch.next_offset)
    partition_records.next_fetch_offset = position
    result._update_position()
    positions[tp] = position
    return records


def _release(result: Any) -> None:
    """Free a completed fetch's buffer now. aiokafka's ``PartitionRecords`` holds a
    generator over itself (a reference cycle) until it is iterated to its end, which
    ``getmany`` does and :func:`_drain` does not: left to the cyclic collector, each
    held its whole fetch (up to ``max_partition_fetch_bytes``), and with the runtime's
    rare young collections (``gc_threshold``) dozens of them piled up (~200 MB at 3M
    records of the standard workload)."""
    partition_records = result._partition_records
    if partition_records is not None:
        partition_records._records_iterator = None
        result._partition_records = None


def _aborted(partition_records: Any, batch: Any) -> bool:
    """Whether ``batch`` belongs to an aborted transaction (``read_committed``), by the
    fetch response's list of aborted transactions, as aiokafka's own reader decides:
    a producer's transaction is aborted from its first offset in that list up to its
    abort marker."""
    partition_records._consume_aborted_up_to(batch.base_offset)
    aborted = partition_records._aborted_producers
    if batch.is_control_batch and partition_records._contains_abort_marker(batch):
        aborted.discard(batch.producer_id)
    return bool(batch.is_transactional and batch.producer_id in aborted)
