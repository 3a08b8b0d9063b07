"""Exactly-once delivery: a transactional producer per assigned input partition.

A partition's transaction holds everything its input produced since its last
checkpoint (results, late records, dead letters; in stage 1 of a shuffled pipeline the
routed records and watermark markers), then the checkpoint itself: its changelog
records and its input offset (``send_offsets_to_transaction``). Committing the
transaction is the checkpoint. A ``read_committed`` reader sees a partition's outputs
at its checkpoints, all of them or none; a crash aborts what was not committed, and the
next owner replays exactly the input after the committed offset.

Why a producer per partition (Kafka's first exactly-once design, Kafka Streams'
``exactly_once`` before KIP-447): aiokafka commits offsets in a transaction with the
group id alone (TxnOffsetCommit v0-v1, no group generation), so the broker cannot fence
a zombie by its group membership. A transactional id that belongs to one input
partition can: the next owner starts a producer with the same id before it reads the
changelog, which aborts the zombie's open transaction and fences it (its next send or
commit fails with ``ProducerFenced``).

The loop does not stop for a commit: :meth:`PartitionTransactions.hold` marks what a
checkpoint covers when its snapshot is taken, and what the loop appends after the mark
waits in the partition's :class:`BatchProducer` until the transaction committed and the
next one began (:meth:`BatchProducer.hold`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from service.runtime.kafka.access import authorization_problem
from service.runtime.kafka.batch_producer import BatchProducer, ProduceError, drop_unsent
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.settings import RuntimeSettings

logger = logging.getLogger(__name__)

Encoded = list[tuple[bytes, bytes | None]]


def transactional_id(prefix: str, tp: TopicPartition) -> str:
    """The id of the producer of ``tp``'s outputs: the same on every replica and after
    every restart, so that whoever owns ``tp`` next fences whoever owned it before."""
    return f"{prefix}.{tp.topic}.{tp.partition}"


@dataclass(slots=True)
class _Open:
    producer: AIOKafkaProducer
    batches: BatchProducer


class PartitionTransactions:
    """The transactional producers of one session's partitions."""

    def __init__(self, settings: RuntimeSettings, prefix: str, group_id: str) -> None:
        self._settings = settings
        self._prefix = prefix
        self._group_id = group_id
        self._open: dict[TopicPartition, _Open] = {}
        self.by_partition: dict[TopicPartition, BatchProducer] = {}
        """Each open partition's batches, for the sink."""

    def batches(self, tp: TopicPartition) -> BatchProducer:
        return self._open[tp].batches

    async def open(self, tps: Iterable[TopicPartition]) -> None:
        """Start the producers of ``tps`` (fencing their previous owners) and begin
        their first transactions."""
        new = [tp for tp in tps if tp not in self._open]
        await asyncio.gather(*(self._open_one(tp) for tp in new))

    async def _open_one(self, tp: TopicPartition) -> None:
        settings = self._settings
        producer = KafkaCluster.of(settings).producer(
            acks="all",
            linger_ms=0,
            max_batch_size=settings.max_batch_bytes,
            request_timeout_ms=settings.request_timeout_ms,
            transactional_id=transactional_id(self._prefix, tp),
            transaction_timeout_ms=settings.transaction_timeout_ms,
        )
        try:
            await producer.start()  # InitProducerId: aborts and fences the previous owner
            await producer.begin_transaction()
        except BaseException:
            with contextlib.suppress(Exception):
                await producer.stop()
            raise
        batches = BatchProducer(producer, self._settings.max_pending_bytes)
        batches.start()
        self._open[tp] = _Open(producer, batches)
        self.by_partition[tp] = batches

    def hold(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Mark what each partition's transaction holds now; what is appended later
        waits for the next transaction (see the module docstring)."""
        return {tp: self._open[tp].batches.hold() for tp in tps}

    async def commit(
        self,
        tp: TopicPartition,
        mark: int,
        changelog_topic: str,
        changelog: Encoded,
        offset: int,
    ) -> int:
        """Commit ``tp``'s transaction: the outputs up to ``mark``, then ``changelog``
        and the input ``offset``; begin the next one. Returns the changelog's bytes."""
        entry = self._open[tp]
        producer, batches = entry.producer, entry.batches
        await batches.wait_delivered(mark)
        size = await _send(producer, changelog_topic, tp.partition, changelog)
        await producer.send_offsets_to_transaction(
            {tp: OffsetAndMetadata(offset, "")}, self._group_id
        )
        await producer.commit_transaction()
        await producer.begin_transaction()
        batches.release()
        return size

    def send_open(self) -> None:
        for entry in self._open.values():
            entry.batches.send_open()

    async def wait_capacity(self) -> None:
        """Backpressure: wait while a partition has too much unacknowledged (held back
        behind a commit, or in flight)."""
        for entry in list(self._open.values()):
            await entry.batches.wait_capacity()

    async def flush(self, tp: TopicPartition) -> None:
        await self._open[tp].batches.flush()

    async def close(self, tps: Iterable[TopicPartition], *, drop: bool) -> None:
        """Stop the producers of ``tps``. Their open transactions hold nothing a
        checkpoint covers: the broker aborts them when the next owner starts (or when
        they time out)."""
        for tp in list(tps):
            entry = self._open.pop(tp, None)
            if entry is None:
                continue
            if self.by_partition.get(tp) is entry.batches:
                del self.by_partition[tp]
            await entry.batches.close()
            if drop:
                drop_unsent(entry.producer, None)
            try:
                await entry.producer.stop()
            except Exception:
                logger.warning("producer of %s did not stop cleanly", tp, exc_info=True)

    async def close_all(self, *, drop: bool) -> None:
        await self.close(list(self._open), drop=drop)


async def _send(producer: AIOKafkaProducer, topic: str, partition: int, records: Encoded) -> int:
    """Send ``records`` straight through ``producer`` (not behind the held batches),
    emptying the list: each batch holds a copy, so the records are freed before the
    acknowledgements come (a checkpoint's can be ~100 MB)."""
    futures = []
    size = 0
    builder = producer.create_batch()
    for key, value in records:
        if builder.append(timestamp=None, key=key, value=value, headers=[]) is None:
            futures.append(await producer.send_batch(builder, topic, partition=partition))
            builder = producer.create_batch()
            if builder.append(timestamp=None, key=key, value=value, headers=[]) is None:
                raise ProduceError(f"a changelog record of {len(value or b'')} bytes is too big")
        size += len(key) + (len(value) if value else 0)
    if builder.record_count():
        futures.append(await producer.send_batch(builder, topic, partition=partition))
    records.clear()
    if futures:
        await asyncio.gather(*futures)
    return size


async def transactions_unsupported(cluster: KafkaCluster, timeout_s: float = 15.0) -> str | None:
    """Why the broker cannot run exactly-once delivery, or None if it can.

    Asked of the broker, not guessed from its name: a transactional producer starts
    (InitProducerId), runs one transaction and commits it.
    """
    probe = f"clockwork.probe.{uuid.uuid4().hex}"
    producer = cluster.producer(
        transactional_id=probe,
        request_timeout_ms=int(timeout_s * 1000),
    )
    try:
        async with asyncio.timeout(timeout_s):
            await producer.start()
            await producer.begin_transaction()
            await producer.commit_transaction()
    except TimeoutError:
        return f"the broker did not start a transaction within {timeout_s:g} s"
    except Exception as exc:
        refused = authorization_problem(
            exc, principal=cluster.security.principal, group_id="clockwork.probe"
        )
        return f"the broker refused a transaction: {refused or repr(exc)}"
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()
    return None
