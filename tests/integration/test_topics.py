"""The pipeline's topics on a real broker: what a start creates, and what it finds."""

from __future__ import annotations

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions

from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.topics import partition_counts
from service.runtime.pipeline_topics.creation import ensure_topics
from tests.integration.kafka_utils import create_topic, unique, wait_until, window_definition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

TUMBLING = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": 10_000},
    "aggregations": {"n": {"fn": "count"}},
}


@pytest.mark.requires_broker("create_partitions")
async def test_a_changelog_narrower_than_its_grown_source_is_grown(
    bootstrap_servers: str,
) -> None:
    """A source given more partitions finds its pipeline's changelog too narrow; the
    start grows it, where it used to fail forever. (On a broker that cannot add
    partitions the start fails with that reason, and restarts: the changelog's
    partitions cannot be remapped without losing the state they hold.)"""
    name = unique("grow")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    definition = window_definition(name, [topic], TUMBLING)
    assert (await ensure_topics(KafkaCluster(bootstrap_servers), definition))[
        definition.changelog_topic
    ] == 2
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        await admin.create_partitions({topic: NewPartitions(total_count=4)})
    finally:
        await admin.close()

    async def source_grown() -> bool:  # the broker's metadata follows a moment later
        return (await partition_counts(KafkaCluster(bootstrap_servers), [topic])) == {topic: 4}

    await wait_until(source_grown, timeout_s=30)
    counts = await ensure_topics(KafkaCluster(bootstrap_servers), definition)
    assert counts[definition.changelog_topic] == 4
    described = await partition_counts(
        KafkaCluster(bootstrap_servers), [definition.changelog_topic]
    )
    assert described == {definition.changelog_topic: 4}
