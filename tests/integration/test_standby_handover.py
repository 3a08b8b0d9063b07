"""A standby's copy and the assignment of its partition to this member (#53,
consumer_group/standby.py): one opening of a partition's RocksDB at a time.

The copies start in a task of their own after an assignment (their consumer's start is
not waited for in the rebalance callback); the next revoke stops them (the task cancelled
and awaited, the stores closed) before that assignment's restore opens any store. Here
the copy of a partition is stopped at every point of its start (after 0 to 59 loop
turns) and while it tails, and each time the partition's store is then free for the
owner's opening, and stays the owner's: the copy's task never opens it again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from service.core.time import ManualClock
from service.runtime.consumer_group.changelog import encode_checkpoint
from service.runtime.consumer_group.local_state import LocalStates, process_memory
from service.runtime.consumer_group.stages import KeyedStage
from service.runtime.consumer_group.standby import Standbys
from service.runtime.observability.metrics import build_metrics
from service.runtime.partition.rocksdb_store import in_use
from tests.integration.kafka_utils import (
    create_topic,
    produce,
    runtime_settings,
    unique,
    wait_until,
)
from tests.runtime.consumer_group.test_standby_copies import TP, CopySession, definition

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TURNS = 60
"""Loop turns before the stop: more than a copy's start takes to reach its tail here."""


async def test_a_copy_stopped_at_any_point_leaves_its_store_to_the_assignment(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    built = replace(definition(), name=unique("copy"))
    await create_topic(bootstrap_servers, built.changelog_topic, 1)
    # One committed checkpoint of TP in its changelog: the copy applies it and so makes
    # its store (a store is made on disk at its first write), which it then holds.
    owner_operator = built.operator_factory(ManualClock(0))
    owner_operator.process_batch(
        [(f"u{i}", 0, {"user": f"u{i}", "amount": i}, i, None) for i in range(20)]
    )
    checkpoint = encode_checkpoint(TP, owner_operator.snapshot_changes().items(), {"offset": 20})
    await produce(
        bootstrap_servers,
        built.changelog_topic,
        [(TP.partition, key, value, None) for key, value in checkpoint],
    )
    session = CopySession(
        built,
        runtime_settings(bootstrap_servers, member="me"),
        build_metrics(CollectorRegistry()),
        KeyedStage(built),
        ManualClock(0),
    )
    standbys = Standbys(session, tmp_path, built.changelog_topic, 1)
    owner = LocalStates(tmp_path, built.changelog_topic, 4000)
    path = tmp_path / built.changelog_topic / f"{TP.topic}-{TP.partition}"

    async def handover(until: Callable[[], Awaitable[None]]) -> bool:
        """A copy of TP begun, stopped when ``until`` returns (the next revoke), then TP
        assigned here (its store opened as the restore does); whether the copy held the
        store before the stop."""
        standbys.assignor.standby = {TP}
        standbys.begin([])
        await until()
        held = in_use(path, process_memory())
        await standbys.stop()
        assert not in_use(path, process_memory())  # free before the owner opens it
        local = owner.open(TP)
        try:
            for _ in range(TURNS):  # anything of the copy's task still to run, runs
                await asyncio.sleep(0)
            assert standbys.copies == {}
            # Still the owner's own opening (a copy opening it again would have closed
            # it under the owner): it takes a write.
            local.store.write({"k": [1]}, checkpoint=True)
        finally:
            owner.close([TP])
        return held

    for turns in range(TURNS):

        async def after_turns(turns: int = turns) -> None:
            for _ in range(turns):
                await asyncio.sleep(0)

        await handover(after_turns)

    async def tailing() -> None:
        async def fetched() -> bool:
            return [s.lag for s in standbys.status()] == [0]

        await wait_until(fetched, timeout_s=30)

    assert await handover(tailing)  # the copy held it while tailing, until the stop
