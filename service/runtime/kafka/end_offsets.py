"""Where bounded input ends: every source partition's end offset, read from the broker.

Bounded mode (``source.bounded``) reads every partition up to the end offset it had when
the pipeline started. Every partition's, not only the assigned ones': a replica whose
own partitions are done stays in the group until every partition of the pipeline is
done (semantics.md section 3), and compares the group's committed offsets with these.

The end is the high watermark a fetch response reports: ``end_offsets()`` (ListOffsets)
can answer early on some brokers (Tansu: the last batch's base offset + 1, see
embedded-broker.md), never late. So the probe seeks each partition to what ListOffsets
says and fetches from there, which returns at most the rest of one batch, and takes the
high watermark of the answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition

from service.runtime.kafka.clients import KafkaCluster

_WAIT_MS = 5


class EndOffsetsError(RuntimeError):
    """The broker did not report every partition's end in time."""


async def topic_partitions(
    consumer: AIOKafkaConsumer, topics: Iterable[str]
) -> list[TopicPartition]:
    """Every partition of the existing ``topics``, in topic then partition order.

    From a fresh metadata answer for all topics, not from ``partitions_for_topic``: a
    consumer's own metadata holds only the topics it tracks, and a started consumer that
    has not subscribed or assigned tracks none. Apache Kafka answers that empty request
    with no topic at all (Tansu with every topic, which hid this). Asking for all topics
    also never auto-creates a missing one.
    """
    cluster = await consumer._client.fetch_all_metadata()
    return [
        TopicPartition(topic, partition)
        for topic in topics
        for partition in sorted(cluster.partitions_for_topic(topic) or ())
    ]


async def probe_end_offsets(
    cluster: KafkaCluster, topics: Iterable[str], timeout_s: float = 30.0
) -> dict[TopicPartition, int]:
    """The end offset (fetch high watermark) of every partition of ``topics`` now."""
    consumer = cluster.consumer(
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=_WAIT_MS,
        max_partition_fetch_bytes=1,  # one batch per partition is enough to learn the end
    )
    ends: dict[TopicPartition, int] = {}
    try:
        await consumer.start()  # inside: a failed start still needs its stop()
        tps = await topic_partitions(consumer, topics)
        if not tps:
            return ends
        consumer.assign(tps)
        for tp, offset in (await consumer.end_offsets(tps)).items():
            consumer.seek(tp, int(offset))
        deadline = time.monotonic() + timeout_s
        while len(ends) < len(tps):
            if time.monotonic() > deadline:
                missing = sorted(f"{tp.topic}/{tp.partition}" for tp in tps if tp not in ends)
                raise EndOffsetsError(f"no end offset for {', '.join(missing)} in {timeout_s}s")
            await consumer.getmany(timeout_ms=_WAIT_MS, max_records=len(tps))
            for tp in tps:
                highwater = consumer.highwater(tp)
                if highwater is not None:
                    ends[tp] = highwater
    finally:
        await consumer.stop()
    return ends
