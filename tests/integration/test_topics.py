"""The pipeline's topics on a real broker: what a start creates, and what it finds."""

from __future__ import annotations

import pytest

from service.runtime.kafka.topics import ensure_topics, partition_counts
from tests.integration.kafka_utils import create_topic, unique, window_definition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

TUMBLING = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": 10_000},
    "aggregations": {"n": {"fn": "count"}},
}


@pytest.mark.requires_broker("create_partitions")
async def test_a_changelog_narrower_than_a_new_pipeline_of_its_name_needs_is_grown(
    bootstrap_servers: str,
) -> None:
    """A deleted pipeline's changelog stays (its state is reset, not its topic); a new
    pipeline of the same name over a wider shuffle finds it too narrow and grows it,
    where it used to fail its start forever. (On a broker that cannot add partitions the
    start fails with that reason, and restarts: the changelog's partitions cannot be
    remapped without losing the state they hold.)"""
    name = unique("grow")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    first = window_definition(name, [topic], TUMBLING)
    assert (await ensure_topics(bootstrap_servers, first))[first.changelog_topic] == 2
    wider = window_definition(name, [topic], TUMBLING, shuffle=4)
    assert wider.changelog_topic == first.changelog_topic
    counts = await ensure_topics(bootstrap_servers, wider)
    assert counts[wider.changelog_topic] == 4
    assert counts[wider.shuffle_topic] == 4
    described = await partition_counts(bootstrap_servers, [wider.changelog_topic])
    assert described == {wider.changelog_topic: 4}
