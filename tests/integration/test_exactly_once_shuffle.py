"""Exactly-once through the keyed shuffle when a replica dies.

Two replicas run a bounded, shuffled, exactly-once pipeline: the window is keyed by a
payload field that every source partition carries, so every record crosses the shuffle
topic. One replica dies mid-stream -- killed from outside, or killing itself inside a
checkpoint of either stage with its outputs written and its transaction open -- and the
survivor finishes the pipeline. A ``read_committed`` reader of the results then sees
every window exactly once with its exact result, without any de-duplication.
"""

from __future__ import annotations

import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kafka_utils import create_topic, unique, wait_until
from tests.integration.replicas import Replica, replicas
from tests.integration.test_exactly_once import EXACTLY_ONCE, check_exactly_once
from tests.integration.test_replica_loss import BASE, PARTITIONS, WINDOW_MS, send

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.requires_broker("transactions"),
]

PER_PARTITION = 6_000
"""Records per source partition: 100 ms apart, so 10 minutes of event time each."""
KEYS = 40
"""Users, each in every source partition: a user's window gathers all four."""
FIRST = 2_400
"""Records per partition sent before the kill (40 %)."""


def records(start: int, stop: int) -> list[tuple[int, dict[str, Any]]]:
    """Records ``start..stop-1`` of every source partition, up to 1.5 s out of order
    (inside the 2 s bound), each partition's users spread over all shuffle partitions."""
    out = []
    for p in range(PARTITIONS):
        for i in range(start, stop):
            ts = BASE + i * 100 - (i * 7919 % 1_500) + p * 37
            out.append((p, {"user": f"u{(i * 7 + p) % KEYS}", "ts": ts, "amount": i % 13}))
    return out


def windows(data: list[tuple[int, dict[str, Any]]]) -> dict[tuple[str, int], dict[str, int]]:
    out: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: {"n": 0, "total": 0})
    for _, e in data:
        acc = out[(e["user"], e["ts"] - e["ts"] % WINDOW_MS)]
        acc["n"] += 1
        acc["total"] += e["amount"]
    return dict(out)


def held(replica: Replica, stage: str) -> list[dict[str, Any]]:
    return [p for p in replica.status()["partitions"] if p.get("stage") == stage]


def checkpointed(replica: Replica, count: int) -> bool:
    """Holds ``count`` partitions of each stage, every one checkpointed since it came."""
    return all(
        len(parts) == count and all(p["last_checkpoint_ms"] is not None for p in parts)
        for parts in (held(replica, "route"), held(replica, "shuffled"))
    )


async def run_with_a_dead_replica(
    bootstrap: str, tmp_path: Path, crash: dict[str, Any] | None
) -> None:
    name = unique("eosshuf")
    topic = f"{name}.in"
    await create_topic(bootstrap, topic, PARTITIONS)
    first, second = records(0, FIRST), records(FIRST, PER_PARTITION)
    ends = [[topic, p, PER_PARTITION] for p in range(PARTITIONS)]
    options: dict[str, Any] = {"bounded": ends, "shuffle": True, "delivery": EXACTLY_ONCE}
    armed = tmp_path / "armed"
    if crash is not None:
        crash = {**crash, "armed_by": str(armed)}
    with replicas(bootstrap, name, topic, tmp_path, 1, **options) as pair:
        pair.append(
            Replica(
                bootstrap,
                name,
                topic,
                tmp_path / "r1.json",
                **options,
                **({"crash": crash} if crash else {}),
            )
        )

        async def balanced() -> bool:
            return all(checkpointed(r, 2) for r in pair)

        await wait_until(balanced, timeout_s=60)
        await send(bootstrap, topic, first)
        dead, survivor = pair[1], pair[0]

        async def both_processed() -> bool:
            return all(sum(p["records_in"] for p in held(r, "shuffled")) > 0 for r in pair)

        await wait_until(both_processed, timeout_s=60)
        if crash is None:
            dead.stop(signal.SIGKILL)
        else:  # at its next checkpoint of the stage that holds outputs
            armed.touch()
        await send(bootstrap, topic, second)

        async def dead_is_dead() -> bool:
            return dead.exited

        await wait_until(dead_is_dead, timeout_s=60)
        assert dead.process.returncode == -signal.SIGKILL

        async def survivor_finished() -> bool:
            return survivor.exited

        await wait_until(survivor_finished, timeout_s=120)
        status = survivor.status()
    assert status["state"] == "finished", status
    # read to its end: past the last transaction's marker, with nothing left to read
    assert [(p["stage"], p["partition"], p["lag"]) for p in status["partitions"]] == [
        (p["stage"], p["partition"], 0) for p in status["partitions"]
    ]
    await check_exactly_once(bootstrap, name, windows(first + second))


async def test_a_replica_killed_mid_stream_leaves_every_window_once(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    await run_with_a_dead_replica(bootstrap_servers, tmp_path, None)


@pytest.mark.parametrize("stage", ["route", "shuffled"])
async def test_a_replica_dying_inside_a_checkpoint_leaves_every_window_once(
    bootstrap_servers: str, tmp_path: Path, stage: str
) -> None:
    """It dies with its outputs acknowledged and its transaction open: the routed
    records and markers (stage 1) or the results (stage 2) are aborted."""
    crash = {"stage": stage, "point": "after_outputs", "at": 1}
    await run_with_a_dead_replica(bootstrap_servers, tmp_path, crash)
