"""The Kafka client side of the job, on confluent-kafka (librdkafka), synchronous.

Both the driver (partitions and watermarks, see :func:`watermarks`) and the executors
(:func:`read_range`) use it. Synchronous fits Spark's Python workers (no event loop per
task), and measured against the embedded broker it consumes ~2x faster than aiokafka
driven by ``asyncio.run`` (see ``service/compaction/README.md``).

End of input is the high watermark of a *fetch* response, never ListOffsets alone: on the
embedded broker (Tansu) ListOffsets can answer the last batch's base offset + 1, too early.
:func:`watermarks` therefore consumes from the ListOffsets answer to the end of each
partition and takes the end offset librdkafka reports with its end-of-partition event,
which comes from the fetch response. On Apache Kafka both agree and the fetch is empty.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from service.compaction.errors import KafkaReadError
from service.compaction.ranges import OffsetRange, TopicPartition, Watermarks

logger = logging.getLogger(__name__)

GROUP_ID = "clockwork-compaction"
"""Required by librdkafka; the job assigns partitions by hand and never commits to it."""


def consumer_config(
    bootstrap_servers: str, extra: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """librdkafka settings for a reader that assigns partitions and never commits.

    ``extra`` (librdkafka property names, e.g. ``security.protocol``) wins over the defaults.
    ``fetch.wait.max.ms`` is short because the embedded broker always waits it out.
    """
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": GROUP_ID,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
        "fetch.wait.max.ms": 20,
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
        "queued.max.messages.kbytes": 256 * 1024,
        "isolation.level": "read_committed",
    }
    config.update(extra or {})
    return config


def _check(error: KafkaError | None, what: str) -> None:
    if error is not None and error.code() != KafkaError._PARTITION_EOF:
        raise KafkaReadError(f"{what}: {error}")


def list_partitions(
    consumer: Consumer, topics: Iterable[str], timeout_s: float
) -> list[TopicPartition]:
    """Every partition of ``topics``; :class:`KafkaReadError` if a topic does not exist."""
    found: list[TopicPartition] = []
    for topic in topics:
        try:
            metadata = consumer.list_topics(topic, timeout=timeout_s)
        except KafkaException as exc:
            raise KafkaReadError(f"cannot read the metadata of topic {topic!r}: {exc}") from exc
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            reason = info.error if info is not None else "not found"
            raise KafkaReadError(f"topic {topic!r} is not readable: {reason}")
        found.extend((topic, p) for p in sorted(info.partitions))
    return found


def watermarks(
    bootstrap_servers: str,
    topics: Iterable[str],
    *,
    extra: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> dict[TopicPartition, Watermarks]:
    """Low and high watermark of every partition of ``topics``, the high one as a fetch
    response gives it (see the module docstring)."""
    consumer = Consumer(consumer_config(bootstrap_servers, extra))
    try:
        partitions = list_partitions(consumer, topics, timeout_s)
        lows: dict[TopicPartition, int] = {}
        listed: dict[TopicPartition, int] = {}
        for tp in partitions:
            try:
                low, high = consumer.get_watermark_offsets(
                    KafkaTopicPartition(*tp), timeout=timeout_s, cached=False
                )
            except KafkaException as exc:
                raise KafkaReadError(f"cannot list the offsets of {tp[0]}[{tp[1]}]: {exc}") from exc
            lows[tp], listed[tp] = low, high
        consumer.assign([KafkaTopicPartition(t, p, listed[(t, p)]) for t, p in partitions])
        highs: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + timeout_s
        while len(highs) < len(partitions):
            if time.monotonic() > deadline:
                missing = sorted(set(partitions) - set(highs))
                raise KafkaReadError(f"no fetch response within {timeout_s}s for {missing}")
            for message in consumer.consume(num_messages=10_000, timeout=0.1):
                error = message.error()
                _check(error, "fetching the end offsets")
                topic, partition, offset = message.topic(), message.partition(), message.offset()
                if error is not None and topic is not None and partition is not None:
                    # End of partition: offset() is the high watermark of the fetch.
                    highs[(topic, partition)] = offset if offset is not None else -1
        result = {}
        for tp in partitions:
            high = max(highs[tp], listed[tp])
            result[tp] = Watermarks(low=lows[tp], high=high)
            if high != listed[tp]:
                logger.debug("%s[%s]: ListOffsets said %s, fetch %s", *tp, listed[tp], high)
        return result
    finally:
        consumer.close()


@dataclass(slots=True)
class RecordColumns:
    """A chunk of consumed records, column by column (ready to become an Arrow batch)."""

    topic: list[str] = field(default_factory=list)
    partition: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    key: list[bytes | None] = field(default_factory=list)
    value: list[bytes | None] = field(default_factory=list)
    timestamp_ms: list[int | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offset)


def read_range(
    bootstrap_servers: str,
    offsets: OffsetRange,
    *,
    extra: Mapping[str, str] | None = None,
    chunk_records: int = 65_536,
    stall_timeout_s: float = 60.0,
) -> Iterator[RecordColumns]:
    """The records of ``offsets`` in chunks of up to ``chunk_records``.

    Offsets missing from the log (transaction markers, compacted or aborted records) are
    skipped; the read ends at the first record at or past ``end`` or at the end of the
    partition past ``end - 1``. :class:`KafkaReadError` when nothing arrives for
    ``stall_timeout_s`` or the range starts below the first kept offset.
    """
    if offsets.size == 0:
        return
    consumer = Consumer(consumer_config(bootstrap_servers, extra))
    topic, partition, end = offsets.topic, offsets.partition, offsets.end
    try:
        consumer.assign([KafkaTopicPartition(topic, partition, offsets.start)])
        chunk = RecordColumns()
        last_progress = time.monotonic()
        done = False
        while not done:
            messages = consumer.consume(num_messages=10_000, timeout=0.5)
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                raise KafkaReadError(
                    f"{topic}[{partition}]: nothing read for {stall_timeout_s}s, "
                    f"{len(chunk)} records into {offsets}"
                )
            for message in messages:
                error = message.error()
                _check(error, f"reading {topic}[{partition}]")
                offset = message.offset()
                if offset is None:
                    continue
                if error is not None:  # end of partition
                    if offset >= end:
                        done = True
                        break
                    continue
                if offset >= end:
                    done = True
                    break
                chunk.topic.append(topic)
                chunk.partition.append(partition)
                chunk.offset.append(offset)
                chunk.key.append(message.key())
                chunk.value.append(message.value())
                timestamp_type, timestamp = message.timestamp()
                chunk.timestamp_ms.append(
                    None if timestamp_type == TIMESTAMP_NOT_AVAILABLE else timestamp
                )
                if offset == end - 1:
                    done = True
                    break
            if len(chunk) >= chunk_records or (done and len(chunk)):
                yield chunk
                chunk = RecordColumns()
    finally:
        consumer.close()
