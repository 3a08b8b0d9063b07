"""Creating a pipeline's output, shuffle and changelog topics, and learning partition counts.

Output topics (results, late data, dead letters) get as many partitions as the widest
source topic. A shuffled pipeline's shuffle topic gets the spec's count (default: that
width too), ``cleanup.policy=delete`` (the keyed stage trims what it committed, where
the broker can). The changelog gets as many as the widest of the source topics and the
shuffle topic (source or shuffle partition ``p`` is checkpointed to changelog partition
``p``), with ``cleanup.policy=compact`` so it keeps the newest value per state entry.
An existing topic is left as it is.
"""

from __future__ import annotations

import logging

from aiokafka.admin import AIOKafkaAdminClient

from service.runtime.definition import PipelineDefinition
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.topics import (
    TopicError,
    create_topics,
    described_partition_counts,
    grow_topic,
    wait_described,
)

logger = logging.getLogger(__name__)

SHUFFLE_CONFIGS = {
    "cleanup.policy": "delete",
    # Never by time: a routed record keeps its source record's timestamp, which in a
    # backfill is months old, so a time retention would delete closed segments the keyed
    # stage has not read yet. The keyed stage deletes what it has checkpointed past
    # (trim.py), as Kafka Streams purges its repartition topics.
    "retention.ms": "-1",
}

CHANGELOG_CONFIGS = {
    "cleanup.policy": "compact",
    # Compaction must not run between a crash and the next owner's repair of a
    # checkpoint cut short (see consumer_group/changelog.py); an hour is far more than a
    # restore takes.
    "min.compaction.lag.ms": "3600000",
}


async def ensure_topics(
    cluster: KafkaCluster, definition: PipelineDefinition, replication_factor: int = 1
) -> dict[str, int]:
    """Create the pipeline's missing output and changelog topics; return partition counts.

    The returned mapping covers the source topics, the output topics and the changelog.
    """
    admin = cluster.admin(request_timeout_ms=15_000)
    try:
        # start() inside: a start that fails half way (the broker went away) has
        # connections open, and only close() ends them (no unclosed transports).
        await admin.start()
        counts = await described_partition_counts(admin, list(definition.topics))
        missing = [t for t in definition.topics if not counts.get(t)]
        if missing:
            raise TopicError(f"source topic(s) do not exist: {', '.join(missing)}")
        width = max(counts[t] for t in definition.topics)
        sink = definition.sink
        outputs = [sink.topic, sink.dead_letter_topic]
        if sink.late_topic:
            outputs.append(sink.late_topic)
        existing = set(await admin.list_topics())
        # name -> (partitions, configs)
        wanted: dict[str, tuple[int, dict[str, str]]] = {
            t: (width, {}) for t in outputs if t not in existing
        }
        shuffled = definition.shuffle is not None
        shuffle_width = width
        if definition.shuffle is not None:
            shuffle_width = definition.shuffle.partitions or width
            if definition.shuffle_topic in existing:
                existing_counts = await described_partition_counts(
                    admin, [definition.shuffle_topic]
                )
                shuffle_width = existing_counts.get(definition.shuffle_topic, shuffle_width)
            else:
                wanted[definition.shuffle_topic] = (shuffle_width, SHUFFLE_CONFIGS)
        changelog_width = max(width, shuffle_width)
        if definition.changelog_topic not in existing:
            wanted[definition.changelog_topic] = (changelog_width, CHANGELOG_CONFIGS)
        if wanted:
            await create_topics(admin, wanted, replication_factor)
            logger.info("pipeline %s: created topics %s", definition.name, sorted(wanted))
        internal = [definition.changelog_topic]
        if shuffled:
            internal.append(definition.shuffle_topic)
        counts.update(await described_partition_counts(admin, [*outputs, *internal]))
        counts.update(await wait_described(admin, dict.fromkeys(wanted, 1), counts))
        if counts.get(definition.changelog_topic, 0) < changelog_width:
            counts[definition.changelog_topic] = await _grow_changelog(
                admin, definition.changelog_topic, changelog_width
            )
        return counts
    finally:
        await admin.close()


async def _grow_changelog(admin: AIOKafkaAdminClient, topic: str, width: int) -> int:
    """Add partitions to a changelog narrower than its pipeline needs; the new count.

    A source can be given more partitions under a running pipeline, which then finds
    its changelog too narrow. (A re-created name is not such a case: it starts in a
    state epoch of its own, with a new changelog.) Growing it is safe: a changelog
    partition belongs to the stage partition of the same number, never to a hash of the
    key, so the existing partitions keep their state and the new ones start empty.
    """
    try:
        return await grow_topic(admin, topic, width)
    except TopicError as exc:
        raise TopicError(
            f"changelog {topic} has fewer partitions than the source (or the shuffle) "
            f"topic and could not be grown to {width}: {exc.__cause__!r}"
        ) from exc.__cause__
