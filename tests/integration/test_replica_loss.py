"""Two replicas of one pipeline (separate processes) over a 4-partition topic: one dies,
joins or leaves mid-stream, and the results are exactly an uninterrupted run's after
de-duplication by id. Every record is within the out-of-orderness bound of its
partition, so no record is ever late, whoever holds its partition and however far ahead
the holder's other partitions are (semantics.md section 3, partitions joining a replica).

Each replica writes its status to a file (tests/integration/worker.py): which partitions
it holds, their checkpoints, what it finished, the takeovers it counted.
"""

from __future__ import annotations

import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    latest_by_id,
    produce,
    read_json,
    read_topic,
    unique,
    wait_until,
)
from tests.integration.replicas import Replica, replicas

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BASE = 1_700_000_000_000
PARTITIONS = 4
KEYS_PER_PARTITION = 4
HALF = 3_000  # records per partition in each half of the input
WINDOW_MS = 10_000
AHEAD_MS = 10 * 3_600_000


def partition_base(partition: int, ahead: bool) -> int:
    return BASE + (AHEAD_MS if ahead and partition % 2 == 1 else 0)


def dataset(start: int, stop: int, ahead: bool = False) -> list[tuple[int, dict[str, Any]]]:
    """Records ``start..stop-1`` of every partition, 100 ms apart and up to 1.5 s out of
    order (within the 2 s bound); with ``ahead``, the odd partitions are 10 h ahead (the
    group's round-robin assignor gives two members the even and the odd ones)."""
    out = []
    for p in range(PARTITIONS):
        for i in range(start, stop):
            ts = partition_base(p, ahead) + i * 100 - (i * 7919 % 1_500)
            key = f"u{p}-{i % KEYS_PER_PARTITION}"
            out.append((p, {"user": key, "ts": ts, "amount": i % 13}))
    return out


def sentinels(ahead: bool = False) -> list[tuple[int, dict[str, Any]]]:
    """One record per partition far past the data: it closes every window before it."""
    return [
        (p, {"user": f"s{p}", "ts": partition_base(p, ahead) + 10**8, "amount": 0})
        for p in range(PARTITIONS)
    ]


async def send(bootstrap: str, topic: str, data: list[tuple[int, dict[str, Any]]]) -> None:
    await produce(bootstrap, topic, [json_record(p, e["user"], e) for p, e in data])


def expected(data: list[tuple[int, dict[str, Any]]]) -> dict[tuple[str, int], dict[str, int]]:
    out: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: {"n": 0, "total": 0})
    for _, e in data:
        acc = out[(e["user"], e["ts"] - e["ts"] % WINDOW_MS)]
        acc["n"] += 1
        acc["total"] += e["amount"]
    return dict(out)


async def settle_and_check(
    bootstrap: str, name: str, want: dict[tuple[str, int], dict[str, int]]
) -> None:
    """Wait until every expected window was emitted, then: exactly the expected results
    after de-duplication by id, a replayed window always equal to its first emission,
    no late record and no dead letter."""

    async def complete() -> bool:
        return len(latest_by_id(await read_json(bootstrap, f"{name}.out"))) >= len(want)

    await wait_until(complete, timeout_s=60)
    emitted = await read_json(bootstrap, f"{name}.out")
    final = latest_by_id(emitted)
    assert {(r["key"], r["window"]["start"]): r["result"] for r in final.values()} == want
    by_id: dict[str, list[Any]] = defaultdict(list)
    for r in emitted:
        by_id[r["id"]].append(r["result"])
    assert all(all(v == values[0] for v in values) for values in by_id.values())
    assert await read_topic(bootstrap, f"{name}.late") == []
    assert await read_topic(bootstrap, f"{name}.dlq") == []


async def balanced(pair: list[Replica]) -> None:
    """Both replicas hold two partitions each: the group has settled.

    Waited for before the input is sent, so that each replica processes its own half:
    Apache Kafka answers a join at once, and the replica that joined first would
    otherwise read all of the input before the other one joined.
    """

    async def settled() -> bool:
        return all(len(r.holds()) == 2 for r in pair)

    await wait_until(settled, timeout_s=45)


async def two_checkpointed(pair: list[Replica], processed: bool = True) -> None:
    async def ready() -> bool:
        return all(r.checkpointed(2, processed) for r in pair)

    await wait_until(ready, timeout_s=45)


async def test_a_killed_replica_s_partitions_are_finished_by_the_survivor_bounded(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Bounded input (end offsets pinned past the first half, as if it were still being
    written): the replicas wait at the end of what exists, one is killed, the rest
    arrives. The survivor takes the dead one's partitions over and reads them to their
    end; it reports ``finished`` only then, having finished all four."""
    name = unique("lossb")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first, second = dataset(0, HALF), dataset(HALF, 2 * HALF)
    ends = [[topic, p, 2 * HALF] for p in range(PARTITIONS)]
    with replicas(bootstrap_servers, name, topic, tmp_path, 2, bounded=ends) as pair:
        await balanced(pair)
        await send(bootstrap_servers, topic, first)
        await two_checkpointed(pair)
        dead, survivor = pair
        dead.stop(signal.SIGKILL)
        assert survivor.status()["state"] == "running"  # its own half is not the end
        await send(bootstrap_servers, topic, second)

        async def survivor_exited() -> bool:
            return survivor.exited

        await wait_until(survivor_exited, timeout_s=60)
        status = survivor.status()
    assert status["state"] == "finished"
    assert status["finished_here"] == [f"{topic}/{p}" for p in range(PARTITIONS)]
    assert (status["partitions_finished"], status["partitions_total"]) == (4, 4)
    assert status["taken_over"] == 2
    await settle_and_check(bootstrap_servers, name, expected(first + second))


async def test_a_killed_replica_s_partitions_are_taken_over_unbounded(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    name = unique("lossu")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first, second = dataset(0, HALF), dataset(HALF, 2 * HALF)
    with replicas(bootstrap_servers, name, topic, tmp_path, 2) as pair:
        await balanced(pair)
        await send(bootstrap_servers, topic, first)
        await two_checkpointed(pair)
        dead, survivor = pair
        dead.stop(signal.SIGKILL)
        await send(bootstrap_servers, topic, second + sentinels())

        async def took_over() -> bool:
            return survivor.checkpointed(4, processed=False)

        await wait_until(took_over, timeout_s=45)
        await settle_and_check(bootstrap_servers, name, expected(first + second))
        assert survivor.status()["taken_over"] == 2


async def test_a_takeover_behind_the_survivor_s_own_partitions_loses_nothing(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Partitions 1 and 3 are 10 h of event time ahead of 0 and 2. The replica holding
    the laggards dies; the survivor, whose own watermark is 10 h ahead, restores them
    behind it: they hold its combined watermark back (its operators wait, never wound
    back), their windows fire as they catch up, and none of their records is late."""
    name = unique("lossahead")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first, second = dataset(0, HALF, ahead=True), dataset(HALF, 2 * HALF, ahead=True)
    with replicas(bootstrap_servers, name, topic, tmp_path, 2) as pair:
        await balanced(pair)
        await send(bootstrap_servers, topic, first)
        await two_checkpointed(pair)
        dead = next(r for r in pair if 0 in r.holds())
        survivor = next(r for r in pair if r is not dead)
        assert survivor.holds() == {1, 3}  # aiokafka's round-robin assignor
        dead.stop(signal.SIGKILL)
        await send(bootstrap_servers, topic, second + sentinels(ahead=True))

        async def took_over() -> bool:
            return survivor.checkpointed(4, processed=False)

        await wait_until(took_over, timeout_s=45)
        await settle_and_check(bootstrap_servers, name, expected(first + second))
        status = survivor.status()
    delivered = {p["partition"]: p["delivered_watermark"] for p in status["partitions"]}
    # every operator got the minimum once the laggards caught up; none went back
    assert min(delivered.values()) >= BASE + 2 * HALF * 100 - 2_000 - 1_500
    assert status["taken_over"] == 2


async def test_a_replica_added_mid_stream_takes_partitions_over(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    name = unique("join")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first, second = dataset(0, HALF), dataset(HALF, 2 * HALF)
    await send(bootstrap_servers, topic, first)
    with replicas(bootstrap_servers, name, topic, tmp_path, 1) as started:
        (first_replica,) = started

        async def alone() -> bool:
            return first_replica.checkpointed(4)

        await wait_until(alone, timeout_s=45)
        newcomer = Replica(bootstrap_servers, name, topic, tmp_path / "new.json")
        started.append(newcomer)
        await two_checkpointed(started, processed=False)  # the first half is all read
        await send(bootstrap_servers, topic, second + sentinels())
        await settle_and_check(bootstrap_servers, name, expected(first + second))
        # a handover, not a takeover: the first replica released what moved
        assert newcomer.status()["taken_over"] is None


async def test_a_replica_stopped_gracefully_mid_stream_hands_its_partitions_over(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    name = unique("leave")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first, second = dataset(0, HALF), dataset(HALF, 2 * HALF)
    with replicas(bootstrap_servers, name, topic, tmp_path, 2) as pair:
        await balanced(pair)
        await send(bootstrap_servers, topic, first)
        await two_checkpointed(pair)
        leaving, staying = pair
        leaving.stop(signal.SIGTERM)
        await send(bootstrap_servers, topic, second + sentinels())

        async def all_four() -> bool:
            return staying.checkpointed(4, processed=False)

        await wait_until(all_four, timeout_s=45)
        await settle_and_check(bootstrap_servers, name, expected(first + second))
        assert staying.status()["taken_over"] is None
