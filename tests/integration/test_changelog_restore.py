"""Reading a changelog back (service/runtime/consumer_group/changelog.py): its timeout
bounds a stall, not a long read that progresses."""

from __future__ import annotations

import time
from typing import Any

import pytest
from aiokafka import TopicPartition

from service.runtime.consumer_group.changelog import encode_checkpoint, read_changelog
from tests.integration.kafka_utils import cluster_of, create_topic, produce, unique

pytestmark = pytest.mark.integration

SOURCE = TopicPartition("orders", 0)
ENTRIES = 30_000


class SlowApplier:
    """Takes 50 ms a batch: the read lasts far longer than its timeout."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, Any]] = []

    def apply(self, entries: list[tuple[str, Any]]) -> None:
        time.sleep(0.05)
        self.applied += entries

    def reset(self) -> None:
        self.applied.clear()


async def test_a_read_longer_than_its_timeout_that_progresses_completes(
    bootstrap_servers: str,
) -> None:
    topic = unique("changelog")
    await create_topic(bootstrap_servers, topic, 1)
    records = encode_checkpoint(
        SOURCE, ((f"k{i}", {"n": i}) for i in range(ENTRIES)), {"offset": ENTRIES}
    )
    await produce(bootstrap_servers, topic, [(0, key, value, None) for key, value in records])
    applier = SlowApplier()
    started = time.monotonic()
    restored = await read_changelog(
        cluster_of(bootstrap_servers), topic, [SOURCE], timeout_s=0.5, appliers={SOURCE: applier}
    )
    # 15 batches of 50 ms: past the timeout, and every entry applied
    assert time.monotonic() - started > 0.5
    assert len(applier.applied) == ENTRIES
    assert applier.applied[-1] == (f"k{ENTRIES - 1}", {"n": ENTRIES - 1})
    assert restored[SOURCE].records == ENTRIES + 1
