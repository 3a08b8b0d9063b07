"""The changelog: per-partition state made durable in a compacted Kafka topic.

Layout. One changelog topic per pipeline, with as many partitions as its widest source
topic; source partition ``p`` of topic ``t`` is checkpointed to changelog partition
``p``. Record keys are ``"{t}|{p}|s|{entry}"`` for an operator state entry (value: JSON,
or null as a tombstone when the entry is gone) and ``"{t}|{p}|m"`` for the partition's
checkpoint metadata (the next source offset, the watermark generator's state, the state
fingerprint). Compaction keeps the newest value per key, which is all a restore needs.

Atomicity. A checkpoint writes the changed entries first and its metadata record last,
and the metadata record is what commits it: a restore applies entries only up to the
last metadata record of the partition and ignores what follows (a checkpoint cut short
by a crash). Those ignored keys are reported as ``repair`` so the new owner rewrites
their committed values at once, before compaction could drop the older value behind a
newer, uncommitted one. The source offset to resume from is the one in the metadata,
not the group's committed offset, so state and input position always match (a crash
between writing the changelog and committing the offset replays nothing twice into the
state).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import TopicPartition

from service.runtime.definition import PipelineDefinition, changelog_topic, shuffle_topic
from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.topics import partition_counts
from service.runtime.partition.sinks import dumps

logger = logging.getLogger(__name__)

META = "m"
STATE = "s"


class RestoreError(RuntimeError):
    """The changelog could not be read to its end."""


@dataclass(slots=True)
class RestoredPartition:
    """The committed state of one source partition, as read from the changelog."""

    entries: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] | None = None
    repair: dict[str, Any] = field(default_factory=dict)
    """Entries written after the last metadata record, mapped to their committed value
    (None: absent); they must be rewritten before they can shadow the committed ones."""


RESTORE_FETCH_WAIT_MS = 5
"""The restore reader's fetch wait and ``getmany`` timeout (see :func:`read_changelog`)."""


def entry_prefix(tp: TopicPartition) -> str:
    return f"{tp.topic}|{tp.partition}|"


Encoded = list[tuple[bytes, bytes | None]]
"""Changelog records ready to append: ``(key, value or None)``, metadata last."""


def encode_checkpoint(tp: TopicPartition, changes: dict[str, Any], meta: dict[str, Any]) -> Encoded:
    """One partition's changed entries, then its metadata record, as bytes.

    Encoded at once, in the same synchronous step as the snapshot, so later changes to
    the operator's state cannot leak into what is written.
    """
    prefix = f"{tp.topic}|{tp.partition}|{STATE}|"
    records: Encoded = [
        ((prefix + entry).encode(), None if data is None else dumps(data))
        for entry, data in changes.items()
    ]
    records.append((f"{tp.topic}|{tp.partition}|{META}".encode(), dumps(meta)))
    return records


def append_checkpoint(
    batches: BatchProducer, changelog_topic: str, partition: int, records: Encoded
) -> int:
    """Append encoded records to changelog partition ``partition``; returns their bytes.

    The caller flushes ``batches`` and only then commits the source offset.
    """
    size = 0
    append = batches.append
    for key, value in records:
        append(changelog_topic, partition, key, value, None)
        size += len(key) + (len(value) if value else 0)
    return size


class _Reader:
    """Folds one changelog partition's records into committed per-source-partition state."""

    __slots__ = ("committed", "pending")

    def __init__(self) -> None:
        self.committed: dict[str, RestoredPartition] = {}
        # source "topic|partition|" -> entries seen since that partition's last metadata
        self.pending: dict[str, dict[str, Any]] = {}

    def add(self, key: bytes | None, value: bytes | None, wanted: set[str]) -> None:
        if key is None:
            return
        text = key.decode()
        topic, partition, kind_entry = text.split("|", 2)
        source = f"{topic}|{partition}|"
        if source not in wanted:
            return
        if kind_entry == META:
            if value is None:  # a reset: forget everything of this partition
                self.committed.pop(source, None)
                self.pending.pop(source, None)
                return
            state = self.committed.setdefault(source, RestoredPartition())
            for entry, data in self.pending.pop(source, {}).items():
                if data is None:
                    state.entries.pop(entry, None)
                else:
                    state.entries[entry] = data
            state.meta = orjson.loads(value)
            return
        kind, _, entry = kind_entry.partition("|")
        if kind != STATE:
            return
        self.pending.setdefault(source, {})[entry] = None if value is None else orjson.loads(value)

    def result(self, source: str) -> RestoredPartition:
        state = self.committed.get(source) or RestoredPartition()
        for entry in self.pending.get(source, {}):
            state.repair[entry] = state.entries.get(entry)
        return state


async def read_changelog(
    cluster: KafkaCluster,
    changelog_topic: str,
    partitions: list[TopicPartition],
    isolation_level: str = "read_uncommitted",
    timeout_s: float = 90.0,
) -> dict[TopicPartition, RestoredPartition]:
    """Read the changelog partitions of ``partitions`` from the beginning to their end.

    The end is the fetch high watermark (``end_offsets()`` can be early on some brokers).
    ``read_committed`` (exactly-once) reads to the high watermark too, not to the last
    stable offset: another partition's transaction open on the same changelog partition
    (a same-numbered partition of the other stage, or of another topic) holds the
    stable offset back while records after it may be committed entries of ours, so the
    read waits for that transaction to end (at its commit, or the transaction timeout).
    """
    if not partitions:
        return {}
    wanted = {entry_prefix(tp) for tp in partitions}
    log_parts = sorted({TopicPartition(changelog_topic, tp.partition) for tp in partitions})
    consumer = cluster.consumer(
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        # Short: the read ends on an empty fetch (every first start reads nothing but
        # one), which some brokers (Tansu) hold for the whole wait. 5 ms instead of 20
        # took an empty changelog's read from ~42 ms to ~11 ms on Tansu.
        fetch_max_wait_ms=RESTORE_FETCH_WAIT_MS,
        max_partition_fetch_bytes=4 * 1024 * 1024,
        isolation_level=isolation_level,
    )
    reader = _Reader()
    deadline = time.monotonic() + timeout_s
    try:
        await consumer.start()  # inside: a failed start still needs its stop()
        consumer.assign(log_parts)
        await consumer.seek_to_beginning(*log_parts)
        remaining = set(log_parts)
        while remaining:
            if time.monotonic() > deadline:
                raise RestoreError(f"changelog {changelog_topic} not read within {timeout_s}s")
            # Short: a getmany that gets no records waits its whole timeout even after
            # the fetch answered, and an empty changelog (every first start) gets none;
            # the end is known from the high watermark after the first fetch answer.
            batch = await consumer.getmany(timeout_ms=RESTORE_FETCH_WAIT_MS, max_records=10_000)
            for records in batch.values():
                for record in records:
                    reader.add(record.key, record.value, wanted)
            for tp in list(remaining):
                highwater = consumer.highwater(tp)
                if highwater is not None and await consumer.position(tp) >= highwater:
                    remaining.discard(tp)
            await asyncio.sleep(0)
    finally:
        await consumer.stop()
    return {tp: reader.result(entry_prefix(tp)) for tp in partitions}


async def delete_old_changelogs(cluster: KafkaCluster, definition: PipelineDefinition) -> None:
    """Delete the changelog and shuffle topics of the pipeline's state epochs before the
    previous one, best effort.

    Nothing reads them any more. The previous epoch's are kept until the next reset: a
    replica that has not seen the reset yet still checkpoints (and routes) to them until
    it follows. Deleted under it, its writes would fail on a broker without topic
    auto-creation (Apache Kafka as usually run: every checkpoint then waits out the
    producer's timeout, ~30 s, before the replica can stop and follow) or recreate the
    topic on one with it.
    """
    old = range(definition.state_epoch - 1)
    await _delete_topics(
        cluster,
        definition.name,
        {changelog_topic(definition.name, e) for e in old}
        | {shuffle_topic(definition.name, e) for e in old},
    )


async def delete_shuffle_topics(cluster: KafkaCluster, definition: PipelineDefinition) -> None:
    """Delete every shuffle topic of a deleted pipeline, best effort.

    What a deleted pipeline routed must not reach a new pipeline of the same name: its
    keyed stage would start from the earliest shuffle record. (The changelog is kept,
    with every position nulled by :func:`reset_state`: see there.)
    """
    await _delete_topics(
        cluster,
        definition.name,
        {shuffle_topic(definition.name, e) for e in range(definition.state_epoch + 1)},
    )


async def _delete_topics(cluster: KafkaCluster, pipeline: str, topics: set[str]) -> None:
    admin = cluster.admin(request_timeout_ms=15_000)
    try:
        await admin.start()
        doomed = sorted(topics & set(await admin.list_topics()))
        if doomed:
            await admin.delete_topics(doomed)
            logger.info("pipeline %s: deleted old topics %s", pipeline, doomed)
    except Exception as exc:
        logger.warning("pipeline %s: old topics not deleted: %r", pipeline, exc)
    finally:
        await admin.close()


async def reset_state(cluster: KafkaCluster, definition: PipelineDefinition) -> None:
    """Discard a pipeline's checkpointed state and positions (a replace that resets).

    Writes a null metadata record for every partition of each stage (the source's, and
    a shuffled pipeline's shuffle partitions): a restore then forgets
    everything written before it and starts the partition from ``start_from``. With
    state epochs (``definition.state_epoch > 0``) the epoch's changelog is fresh
    anyway; the changelogs of epochs before the previous one are then deleted, best
    effort.
    """
    if definition.state_epoch > 0:
        await delete_old_changelogs(cluster, definition)
    # Both stages' positions: a shuffled pipeline's keyed stage checkpoints the shuffle
    # partitions under the same changelog. Topics that do not exist hold no position.
    stage_topics = list(definition.topics)
    if definition.shuffle is not None:
        stage_topics.append(definition.shuffle_topic)
    counts = await partition_counts(cluster, [definition.changelog_topic, *stage_topics])
    if definition.changelog_topic not in counts:
        return  # nothing was ever checkpointed in this epoch
    producer = cluster.producer(acks="all")
    try:
        await producer.start()  # inside: a failed start still needs its stop()
        batches = BatchProducer(producer)
        batches.start()
        try:
            for topic in stage_topics:
                for partition in range(counts.get(topic, 0)):
                    key = f"{topic}|{partition}|{META}".encode()
                    batches.append(definition.changelog_topic, partition, key, None, None)
            await batches.flush()
        finally:
            await batches.close()
    finally:
        await producer.stop()
