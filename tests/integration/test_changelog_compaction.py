"""The changelog is a compacted topic, and a broker that compacts it loses no state.

The pipeline creates its changelog with ``cleanup.policy=compact`` and an hour's
``min.compaction.lag.ms`` (topics.py). On Apache Kafka the log cleaner really runs
(the test broker looks for work every 200 ms): the test lets the checkpoints of many
rounds of input overwrite the same state entries, checks that nothing was compacted
while the lag holds, then lifts the lag and waits until the cleaner has removed the
superseded records. A restore from the compacted log must read exactly the state it
read before, and a restarted pipeline must finish every window with exactly the
results of all the input. Tansu never compacts, so the test runs on Kafka only.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from service.runtime.consumer_group.changelog import RestoredPartition, read_changelog
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.lifecycle.manager import Runtime
from service.runtime.pipeline_topics.creation import CHANGELOG_CONFIGS
from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    partition_ids,
    produce,
    read_json,
    read_topic,
    runtime_settings,
    unique,
    wait_until,
    window_definition,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.requires_broker("compaction"),
    pytest.mark.timeout(120),
]

BASE = 1_700_000_000_000
HOUR = 3_600_000
PARTITIONS = 2
KEYS = 10
ROUNDS = 8
WINDOW = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": HOUR},
    "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
}


def round_records(r: int) -> list[Any]:
    """One record per key: every round changes every key's window state."""
    return [
        json_record(
            k % PARTITIONS, f"u{k}", {"user": f"u{k}", "ts": BASE + r * 1_000 + k, "amount": r * k}
        )
        for k in range(KEYS)
    ]


async def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)]
        )
    finally:
        await admin.close()
    (resource,) = response.resources
    assert resource[0] == 0, resource
    return {entry[0]: entry[1] for entry in resource[4]}


async def set_topic_configs(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    """Replace the topic's own settings (AlterConfigs: what is not given is reset)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)]
        )
    finally:
        await admin.close()
    assert all(resource[0] == 0 for resource in response.resources), response


async def test_a_restore_after_compaction_reads_the_same_state(bootstrap_servers: str) -> None:
    name = unique("compacted")
    topic = f"{name}.in"
    changelog = f"clockwork.{name}.changelog"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    definition = window_definition(name, [topic], WINDOW, bounded=False)
    sources = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    produced = dict.fromkeys(range(PARTITIONS), 0)

    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    try:
        runtime.start_pipeline(definition)

        async def changelog_exists() -> bool:
            return bool(await partition_ids(bootstrap_servers, changelog))

        await wait_until(changelog_exists, timeout_s=30)
        created = await topic_configs(bootstrap_servers, changelog)
        assert created["cleanup.policy"] == CHANGELOG_CONFIGS["cleanup.policy"] == "compact"
        assert created["min.compaction.lag.ms"] == CHANGELOG_CONFIGS["min.compaction.lag.ms"]
        # A segment per checkpoint and any dirt worth cleaning, the lag left as created.
        quick = {
            **CHANGELOG_CONFIGS,
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
        }
        await set_topic_configs(bootstrap_servers, changelog, quick)

        for r in range(ROUNDS):
            records = round_records(r)
            await produce(bootstrap_servers, topic, records)
            for partition, *_ in records:
                produced[partition] += 1

            async def checkpointed() -> bool:
                state = await read_changelog(KafkaCluster(bootstrap_servers), changelog, sources)
                return all(
                    state[tp].meta is not None
                    and state[tp].meta["offset"] == produced[tp.partition]
                    for tp in sources
                )

            await wait_until(checkpointed, timeout_s=30)
    finally:
        await runtime.shutdown()

    written = await read_topic(bootstrap_servers, changelog)
    offsets = sum(1 + max(r.offset for r in written if r.partition == p) for p in range(PARTITIONS))
    assert len(written) == offsets  # nothing compacted while the lag holds
    assert len(written) > 2 * ROUNDS * KEYS // PARTITIONS  # many superseded versions
    before = await read_changelog(KafkaCluster(bootstrap_servers), changelog, sources)
    assert all(len(before[tp].entries) >= KEYS // PARTITIONS for tp in sources)

    await set_topic_configs(bootstrap_servers, changelog, {**quick, "min.compaction.lag.ms": "0"})

    async def compacted() -> bool:
        return len(await read_topic(bootstrap_servers, changelog)) <= offsets // 2

    await wait_until(compacted, timeout_s=60)
    after = await read_changelog(KafkaCluster(bootstrap_servers), changelog, sources)
    # The same state (entries, metadata, nothing to repair) from fewer records.
    assert {tp: replace(r, records=0) for tp, r in after.items()} == {
        tp: replace(r, records=0) for tp, r in before.items()
    }
    assert all(after[tp].records < before[tp].records for tp in sources)
    assert all(isinstance(after[tp], RestoredPartition) and not after[tp].repair for tp in sources)

    # A new runtime restores from the compacted log; closing records fire every window.
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    try:
        runtime.start_pipeline(definition)
        closing = [
            json_record(p, f"end{p}", {"user": f"end{p}", "ts": BASE + 3 * HOUR, "amount": 0})
            for p in range(PARTITIONS)
        ]
        await produce(bootstrap_servers, topic, closing)

        async def fired() -> bool:
            return len(await read_json(bootstrap_servers, f"{name}.out")) >= KEYS

        await wait_until(fired, timeout_s=30)
    finally:
        await runtime.shutdown()
    want: dict[str, dict[str, int]] = defaultdict(lambda: {"n": 0, "total": 0})
    for r in range(ROUNDS):
        for k in range(KEYS):
            want[f"u{k}"]["n"] += 1
            want[f"u{k}"]["total"] += r * k
    results = await read_json(bootstrap_servers, f"{name}.out")
    assert sorted((r["key"], r["result"]) for r in results) == sorted(want.items())
