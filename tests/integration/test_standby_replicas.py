"""Standby replicas of the rocksdb backend (#53): two replicas (separate processes, each
its own state directory), ``standby_replicas: 1``, a running aggregate over a stream.
Each keeps a warm copy of the other's partition, caught up in its status; the owner is
killed (SIGKILL) and the survivor restores the partition from its copy, reading only the
changelog's tail, and the results stay exact, every key held once.

Only the partition that is taken over holds state when its owner is killed (the first
wave goes to it alone), so the changelog records the survivor reads are those of the
copy's tail: its own partition's local restore reads back its last checkpoint's records
(the checkpoint file names the changelog's end before them, as the broker reported it,
which Tansu reports late), which would blur the count. The copy's local checkpoint names
where the owner's last checkpoint it applied begins (the restore reads that checkpoint
again, as after a checkpoint of its own): a last wave of two records after the copy
applied the first wave's keeps that checkpoint small. The second wave, to both
partitions, comes after the takeover."""

from __future__ import annotations

import random
import signal
import socket
from collections import defaultdict
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    produce,
    unique,
    wait_until,
)
from tests.integration.replicas import Replica
from tests.integration.test_rocksdb_state import folded
from tests.integration.test_running_aggregates import RUNNING, folds_to

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PARTITIONS = 2
KEYS = 1500
"""Keys per partition: each key lives in one partition (the running aggregate runs per
source partition here, without a shuffle)."""


def wave(count: int, seed: int, partitions: int = PARTITIONS) -> list[tuple[int, dict[str, Any]]]:
    """``count`` records over the first ``partitions`` partitions."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        p = i % partitions
        user = f"u{p}-{rng.randrange(KEYS)}"
        out.append((p, {"user": user, "ts": 1_700_000_000_000 + i, "amount": rng.randrange(9)}))
    return out


def aggregate(data: list[tuple[int, dict[str, Any]]]) -> dict[str, dict[str, int]]:
    want: dict[str, dict[str, int]] = defaultdict(lambda: {"n": 0, "total": 0})
    for _, e in data:
        want[e["user"]]["n"] += 1
        want[e["user"]]["total"] += e["amount"]
    return dict(want)


async def send(bootstrap: str, topic: str, data: list[tuple[int, dict[str, Any]]]) -> None:
    await produce(bootstrap, topic, [json_record(p, e["user"], e) for p, e in data])


def replica(bootstrap: str, name: str, topic: str, tmp_path: Path, index: int) -> Replica:
    state = {
        "backend": "rocksdb",
        "cache_bytes": 4000,  # a dozen keys: the copies too live in RocksDB
        "standby_replicas": 1,
        "dir": str(tmp_path / f"state{index}"),
    }
    return Replica(
        bootstrap, name, topic, tmp_path / f"r{index}.json", running=RUNNING, state=state
    )


def member(r: Replica) -> str:
    """A worker's member name: the runtime's default (no SERVICE_INSTANCE_ID)."""
    return f"{socket.gethostname()}-{r.status()['pid']}"


def restored(status: dict[str, Any], what: str) -> float:
    return float(status["restored"].get(what) or 0)


async def test_a_failover_restores_from_the_standby_s_copy(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    name = unique("standby")
    topic = f"{name}.in"
    out = f"{name}.out"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first = wave(3000, 1, partitions=1)  # partition 0 only: the one taken over
    last = wave(2, 3, partitions=1)
    ends = {p: sum(1 for q, _ in first + last if q == p) for p in range(PARTITIONS)}
    pair = [replica(bootstrap_servers, name, topic, tmp_path, i) for i in range(PARTITIONS)]
    try:

        async def balanced() -> bool:
            return all(len(r.holds()) == 1 for r in pair)

        await wait_until(balanced, timeout_s=45)
        await send(bootstrap_servers, topic, first)

        async def copied() -> bool:
            """The first wave's last checkpoint applied by the copy on the other member."""
            return any(
                [(c["partition"], c["offset"]) for c in r.status()["standbys"]] == [(0, len(first))]
                for r in pair
            )

        await wait_until(copied, timeout_s=60)
        await send(bootstrap_servers, topic, last)
        want = aggregate(first + last)
        await wait_until(
            partial(folds_to, bootstrap_servers, out, "read_uncommitted", want), timeout_s=60
        )

        # Quiet: every record read, no tick to come; from then on a checkpoint can only
        # write what was pending, within a few loop turns.
        quiet_at: dict[int, int] = {}

        async def quiet() -> bool:
            for i, r in enumerate(pair):
                status = r.status()
                parts = status["partitions"]
                if not parts or any(
                    p["offset"] != ends[p["partition"]] or p["processing_timers"] for p in parts
                ):
                    return False
                quiet_at.setdefault(i, status["loop_turns"])
            return len(quiet_at) == len(pair)

        await wait_until(quiet, timeout_s=60)

        # Each keeps a copy of the other's partition, caught up with its last checkpoint
        # (the input's end, nothing left to apply), shown by status and the metric; each
        # partition's status names the other as its standby.
        async def warm() -> bool:
            for i, r in enumerate(pair):
                status = r.status()
                if status["loop_turns"] < quiet_at[i] + 20:
                    return False
                (own,) = status["partitions"]
                other = pair[1 - i]
                if own["standbys"] != [member(other)]:
                    return False
                standbys = status["standbys"]
                if [s["partition"] for s in standbys] != [1 - own["partition"]]:
                    return False
                (copy,) = standbys
                label = f"{topic}/{copy['partition']}"
                if (copy["lag"], copy["offset"]) != (0, ends[copy["partition"]]):
                    return False
                if status["standby_lag"].get(label) != 0:
                    return False
            return True

        await wait_until(warm, timeout_s=60)
        dead = next(r for r in pair if r.holds() == {0})
        survivor = next(r for r in pair if r is not dead)
        (taken,) = dead.status()["partitions"]
        (copy,) = survivor.status()["standbys"]
        assert copy["partition"] == taken["partition"]
        assert copy["keys"] == taken["keys"] > KEYS // 2
        before = survivor.status()
        dead.stop(signal.SIGKILL)

        async def took_over() -> bool:
            return survivor.checkpointed(PARTITIONS, processed=False)

        await wait_until(took_over, timeout_s=45)
        after = survivor.status()
        # More input after the takeover: both partitions go on from what was restored.
        second = wave(600, 2)
        await send(bootstrap_servers, topic, second)
        want = aggregate(first + last + second)
        await wait_until(
            partial(folds_to, bootstrap_servers, out, "read_uncommitted", want), timeout_s=60
        )
        # The survivor holds every key of both partitions, each once: the copy's and its
        # own, with what the second wave added.
        distinct = {
            p: len({e["user"] for q, e in first + last + second if q == p})
            for p in range(PARTITIONS)
        }

        async def every_key_held_once() -> bool:
            parts = survivor.status()["partitions"]
            return {p["partition"]: p["keys"] for p in parts} == distinct

        await wait_until(every_key_held_once, timeout_s=30)
    finally:
        for r in pair:
            r.stop(signal.SIGTERM)
    assert after["taken_over"] == 1
    assert after["standbys"] == []  # the only other member is gone: no copies to keep
    # Every partition holding keys restored from this disk: the copy of the dead one's,
    # and its own if it held any (a partition without state has no store: stores are
    # made at their first write).
    holding = 1 + sum(1 for own in before["partitions"] if own["keys"])
    assert (
        restored(after, "partitions_restored/local") - restored(before, "partitions_restored/local")
        == holding
    )
    assert (
        restored(after, "partitions_restored/changelog")
        - restored(before, "partitions_restored/changelog")
        == PARTITIONS - holding
    )
    assert (
        restored(after, "state_restored/local") - restored(before, "state_restored/local")
        >= taken["keys"]
    )
    # The changelog's tail only: far fewer records than the state it restored holds.
    tail = restored(after, "state_restored/changelog") - restored(
        before, "state_restored/changelog"
    )
    assert tail < taken["keys"] / 10
    _, seqs = await folded(bootstrap_servers, out)
    assert all(s == list(range(len(s))) for s in seqs.values()), seqs
