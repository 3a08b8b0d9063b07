"""Replicas share the pipeline store: a pipeline created on one runs on every one, a
restarted replica reloads the pipelines, deletes reach everyone. The second replica is a
real ``python -m service`` process."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from service.runtime.kafka.embedded_broker import free_port
from service.settings import Settings
from tests.api.server import app_settings, create_topic, eventually, running_app, wait_ready

pytestmark = pytest.mark.integration


@dataclass(frozen=True, slots=True)
class ServiceProcess:
    url: str
    instance_id: str
    process: asyncio.subprocess.Process


@asynccontextmanager
async def service_process(
    settings: Settings, workers: int = 1, extra_env: Mapping[str, str] | None = None
) -> AsyncIterator[ServiceProcess]:
    """``python -m service`` with ``settings`` as its environment (and ``extra_env`` over it)
    and ``workers`` worker processes (1: the process runs the pipelines itself); SIGTERM
    at the end (unless the test killed it)."""
    port = free_port()
    instance_id = f"replica-{uuid.uuid4().hex[:6]}"
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers or "",
        "SERVICE_HTTP_HOST": "127.0.0.1",
        "SERVICE_HTTP_PORT": str(port),
        "SERVICE_PIPELINES_TOPIC": settings.pipelines_topic,
        "SERVICE_CHECKPOINT_INTERVAL_MS": str(settings.checkpoint_interval_ms),
        "KAFKA_SESSION_TIMEOUT_MS": str(settings.kafka_session_timeout_ms),
        "KAFKA_FETCH_MAX_WAIT_MS": str(settings.kafka_fetch_max_wait_ms),
        "SERVICE_INSTANCE_ID": instance_id,
        "SERVICE_MEMBERS_TOPIC": settings.members_topic,
        "SERVICE_STATUS_PUBLISH_INTERVAL_MS": str(settings.status_publish_interval_ms),
        "SERVICE_STORE_APPLY_TIMEOUT_MS": str(settings.store_apply_timeout_ms),
        "SERVICE_LOG_LEVEL": "WARNING",
        "SERVICE_WORKERS": str(workers),
        **(extra_env or {}),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service", env=env, stdin=asyncio.subprocess.DEVNULL
    )
    try:
        yield ServiceProcess(f"http://127.0.0.1:{port}", instance_id, process)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
                raise
            # uvicorn re-raises the signal after its graceful shutdown.
            assert code in (0, -signal.SIGTERM), code


async def two_partitions(bootstrap_servers: str) -> tuple[str, str, Settings]:
    """A new source topic of two partitions, a pipeline name, and the replicas' settings.

    Stopping a pipeline waits for its group's rebalance to settle, which can take
    several session timeouts while replicas come and go: hence the long apply timeout.
    """
    source = f"events-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap_servers, source, partitions=2)
    settings = app_settings(bootstrap_servers, store_apply_timeout_ms=60000)
    return source, f"dedupe-{uuid.uuid4().hex[:8]}", settings


@asynccontextmanager
async def in_process_replica(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """A replica in this process, ready; a client of its API."""
    async with (
        running_app(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        yield client


@asynccontextmanager
async def process_replica(
    settings: Settings,
) -> AsyncIterator[tuple[ServiceProcess, httpx.AsyncClient]]:
    """A replica as its own ``python -m service`` process, ready; a client of its API."""
    async with (
        service_process(settings) as replica,
        httpx.AsyncClient(base_url=replica.url, timeout=30) as client,
    ):
        await wait_ready(client, timeout_s=60)
        yield replica, client


def spec(name: str, source: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [source]},
        "operator": {"type": "keyed_process", "function": "dedupe", "params": {"ttl_ms": 60000}},
        "sink": {"topic": f"{source}.out"},
    }


async def test_two_replicas_share_pipelines_and_a_restart_reloads_them(
    bootstrap_servers: str,
) -> None:
    source, name, settings = await two_partitions(bootstrap_servers)
    async with in_process_replica(settings) as a:
        async with process_replica(settings) as (_, b):
            assert (await a.post("/pipelines", json=spec(name, source))).status_code == 201

            async def on_b() -> dict[str, Any] | None:
                response = await b.get(f"/pipelines/{name}")
                return response.json() if response.status_code == 200 else None

            seen = await eventually(on_b)
            assert seen["spec"]["source"]["topics"] == [source]

            async def partitions_split() -> bool:
                counts = []
                for client in (a, b):
                    status = (await client.get(f"/pipelines/{name}/status?scope=local")).json()
                    counts.append(len(status["partitions"]))
                return sum(counts) == 2

            # One consumer group per pipeline: the two partitions spread over both.
            await eventually(partitions_split, timeout_s=30)

            paused = await b.post(f"/pipelines/{name}/pause")
            assert paused.status_code == 200

            async def paused_on_a() -> bool:
                return (await a.get(f"/pipelines/{name}")).json()["paused"] is True

            await eventually(paused_on_a)

        # B is gone; a new B reads the store from the beginning and runs the pipeline.
        async with process_replica(settings) as (_, b2):
            reloaded = (await b2.get(f"/pipelines/{name}")).json()
            assert reloaded["paused"] is True
            assert [p["name"] for p in (await b2.get("/pipelines")).json()] == [name]

            # Deleted on A, gone from B's view too.
            assert (await a.delete(f"/pipelines/{name}")).status_code == 204

            async def gone_on_b2() -> bool:
                return (await b2.get(f"/pipelines/{name}")).status_code == 404

            await eventually(gone_on_b2)


def held(status: dict[str, Any]) -> dict[int, tuple[str, bool]]:
    """Partition -> (owner, lost), as a whole-pipeline status shows them; each once."""
    numbers = [p["partition"] for p in status["partitions"]]
    assert len(numbers) == len(set(numbers)), status["partitions"]
    return {
        p["partition"]: (p["owner"]["member"], p["owner"]["lost"]) for p in status["partitions"]
    }


async def test_either_replica_shows_the_whole_pipeline_and_after_a_kill_the_survivor_holds_it(
    bootstrap_servers: str,
) -> None:
    source, name, settings = await two_partitions(bootstrap_servers)
    async with in_process_replica(settings) as a, process_replica(settings) as (replica_b, b):
        assert (await a.post("/pipelines", json=spec(name, source))).status_code == 201
        split = {settings.instance_id, replica_b.instance_id}

        async def both_show_the_split() -> bool:
            views = [
                held((await client.get(f"/pipelines/{name}/status")).json()) for client in (a, b)
            ]
            owners = {owner for owner, _ in views[0].values()}
            return views[0] == views[1] and set(views[0]) == {0, 1} and owners == split

        await eventually(both_show_the_split, timeout_s=60)

        replica_b.process.kill()  # -9: no goodbye on the members topic
        await replica_b.process.wait()

        async def survivor_holds_all() -> bool:
            whole = (await a.get(f"/pipelines/{name}/status")).json()
            return held(whole) == {
                0: (settings.instance_id, False),
                1: (settings.instance_id, False),
            }

        await eventually(survivor_holds_all, timeout_s=60)

        async def b_is_lost() -> bool:
            members = (await a.get("/cluster")).json()["members"]
            return {m["member"]: m["lost"] for m in members} == {
                settings.instance_id: False,
                replica_b.instance_id: True,
            }

        await eventually(b_is_lost, timeout_s=60)
