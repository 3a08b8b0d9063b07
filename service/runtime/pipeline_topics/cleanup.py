"""Dropping what a pipeline no longer needs: old epochs' topics, a deleted pipeline's
shuffle topics, and a reset's checkpointed positions.

All best effort where nothing depends on it (a topic left behind only takes room), and
in the right order where something does: see each function.
"""

from __future__ import annotations

import logging

from service.runtime.definition import PipelineDefinition
from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.topics import partition_counts
from service.runtime.pipeline_topics.names import changelog_topic, meta_key, shuffle_topic

logger = logging.getLogger(__name__)


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
                    key = meta_key(topic, partition).encode()
                    batches.append(definition.changelog_topic, partition, key, None, None)
            await batches.flush()
        finally:
            await batches.close()
    finally:
        await producer.stop()
