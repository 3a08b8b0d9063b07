"""The rocksdb state backend with two worker processes sharing one state directory (#53):
a partition that moves from one worker to the other is opened by its new owner once the
old one's revoke closed it, however long that revoke takes, and no session fails on
RocksDB's lock. A replica of two workers (``SERVICE_WORKERS=2``, a real ``python -m
service``) restarted on its stores; and two worker processes of the replica tests with
a revoke made slower than the group's session timeout."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.server import app_settings, eventually, wait_ready
from tests.integration.kafka_utils import create_topic, unique, wait_until
from tests.integration.replicas import Replica, replicas
from tests.integration.test_api_replicas import service_process
from tests.integration.test_replica_loss import (
    HALF,
    PARTITIONS,
    balanced,
    dataset,
    expected,
    send,
    sentinels,
    settle_and_check,
)
from tests.integration.test_workers import owners, window_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SESSION_TIMEOUT_MS = 2000
"""The replicas' group session timeout (``runtime_settings``)."""


def many_keys(start: int, stop: int, keys: int) -> list[tuple[int, dict[str, Any]]]:
    """Records ``start..stop-1`` of every partition over ``keys`` users of it, all in one
    window (closed by :func:`sentinels`)."""
    return [
        (p, {"user": f"u{p}-{i % keys}", "ts": 1_700_000_000_000 + i % 9_000, "amount": i % 13})
        for p in range(PARTITIONS)
        for i in range(start, stop)
    ]


def rocksdb_window_spec(name: str, topic: str) -> dict[str, Any]:
    """The workers' tumbling window behind the keyed shuffle, its keys in RocksDB (each
    partition's store is on disk after its first checkpoint)."""
    spec = window_spec(name, topic, "at_least_once")
    spec["state"] = {"backend": "rocksdb", "cache_bytes": 1024 * 1024}
    return spec


async def both_workers_hold_partitions(client: httpx.AsyncClient, name: str) -> bool:
    held = owners((await client.get(f"/pipelines/{name}/status")).json())
    return len(held) >= 2 * PARTITIONS and set(held.values()) == {1, 2}


async def test_two_workers_restarted_on_their_stores_share_them_without_a_lock_failure(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """A replica of two workers writes every partition's store, stops, and starts again
    on the same state directory with a backlog waiting (checkpoints far apart, so the
    state a revoke checkpoints is large): the worker whose group join comes first gets
    every partition, then hands the other its share. The results are exact and no
    session of either worker failed (no restart)."""
    settings = app_settings(bootstrap_servers, store_apply_timeout_ms=60000)
    name = unique("rocksworkers")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first, second = many_keys(0, 2_000, 1_000), many_keys(2_000, 32_000, 10_000)
    await send(bootstrap_servers, topic, first)
    env = {"SERVICE_STATE_DIR": str(tmp_path / "state")}
    async with (
        service_process(settings, workers=2, extra_env=env) as replica,
        httpx.AsyncClient(base_url=replica.url, timeout=30) as client,
    ):
        await wait_ready(client, timeout_s=60)
        created = await client.post("/pipelines", json=rocksdb_window_spec(name, topic))
        assert created.status_code == 201, created.text
        await eventually(partial(both_workers_hold_partitions, client, name), timeout_s=90)

        async def first_read() -> bool:
            status = (await client.get(f"/pipelines/{name}/status")).json()
            return bool(status["records_in"] >= len(first))

        await eventually(first_read, timeout_s=60)
    await send(bootstrap_servers, topic, second)
    settings = replace(settings, checkpoint_interval_ms=30_000)
    async with (
        service_process(settings, workers=2, extra_env=env) as replica,
        httpx.AsyncClient(base_url=replica.url, timeout=30) as client,
    ):
        await wait_ready(client, timeout_s=60)
        await eventually(partial(both_workers_hold_partitions, client, name), timeout_s=90)
        await send(bootstrap_servers, topic, sentinels())
        await settle_and_check(bootstrap_servers, name, expected(first + second))
        status = (await client.get(f"/pipelines/{name}/status")).json()
        assert (status["state"], status["restarts"]) == ("running", 0), status


async def test_a_revoke_slower_than_the_session_timeout_hands_the_stores_over_unfailed(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Two worker processes on one state directory: the first holds every partition,
    its stores on disk; when the second joins, the first's revoke takes three session
    timeouts (a checkpoint of much state). The group waits for it, so the second opens
    its share once the first closed it: no session fails, the results are exact."""
    name = unique("rocksrevoke")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first, second = dataset(0, HALF // 3), dataset(HALF // 3, 2 * HALF // 3)
    state = {"backend": "rocksdb", "cache_bytes": 4000, "dir": str(tmp_path / "state")}
    options: dict[str, Any] = {"state": state, "slow_revoke_ms": 3 * SESSION_TIMEOUT_MS}
    with replicas(bootstrap_servers, name, topic, tmp_path, 1, **options) as started:
        await send(bootstrap_servers, topic, first)

        async def stores_on_disk() -> bool:
            return started[0].checkpointed(PARTITIONS)

        await wait_until(stores_on_disk, timeout_s=60)
        started.append(Replica(bootstrap_servers, name, topic, tmp_path / "r1.json", **options))
        await balanced(started)
        await send(bootstrap_servers, topic, second + sentinels())
        await settle_and_check(bootstrap_servers, name, expected(first + second))
        assert [r.status()["restarts"] for r in started] == [0, 0]
