"""Replicas share the pipeline store: a pipeline created on one runs on every one, a
restarted replica reloads the pipelines, deletes reach everyone. The second replica is a
real ``python -m service`` process."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from service.runtime.kafka.embedded_broker import free_port
from service.settings import Settings
from tests.api.server import app_settings, create_topic, eventually, running_app, wait_ready

pytestmark = pytest.mark.integration


@asynccontextmanager
async def service_process(settings: Settings) -> AsyncIterator[str]:
    """``python -m service`` with ``settings`` as its environment; SIGTERM at the end."""
    port = free_port()
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers or "",
        "SERVICE_HTTP_HOST": "127.0.0.1",
        "SERVICE_HTTP_PORT": str(port),
        "SERVICE_PIPELINES_TOPIC": settings.pipelines_topic,
        "SERVICE_CHECKPOINT_INTERVAL_MS": str(settings.checkpoint_interval_ms),
        "KAFKA_SESSION_TIMEOUT_MS": str(settings.kafka_session_timeout_ms),
        "KAFKA_FETCH_MAX_WAIT_MS": str(settings.kafka_fetch_max_wait_ms),
        "SERVICE_INSTANCE_ID": f"replica-{uuid.uuid4().hex[:6]}",
        "SERVICE_STORE_APPLY_TIMEOUT_MS": str(settings.store_apply_timeout_ms),
        "SERVICE_LOG_LEVEL": "WARNING",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service", env=env, stdin=asyncio.subprocess.DEVNULL
    )
    try:
        yield f"http://127.0.0.1:{port}"
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
    source = f"events-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap_servers, source, partitions=2)
    # Stopping a pipeline waits for its group's rebalance to settle, which can take
    # several session timeouts while replicas come and go.
    settings = app_settings(bootstrap_servers, store_apply_timeout_ms=60000)
    name = f"dedupe-{uuid.uuid4().hex[:8]}"
    async with (
        running_app(settings) as url_a,
        httpx.AsyncClient(base_url=url_a, timeout=30) as a,
    ):
        await wait_ready(a)
        async with (
            service_process(settings) as url_b,
            httpx.AsyncClient(base_url=url_b, timeout=30) as b,
        ):
            await wait_ready(b, timeout_s=60)
            assert (await a.post("/pipelines", json=spec(name, source))).status_code == 201

            async def on_b() -> dict[str, Any] | None:
                response = await b.get(f"/pipelines/{name}")
                return response.json() if response.status_code == 200 else None

            seen = await eventually(on_b)
            assert seen["spec"]["source"]["topics"] == [source]

            async def partitions_split() -> bool:
                counts = []
                for client in (a, b):
                    status = (await client.get(f"/pipelines/{name}/status")).json()
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
        async with (
            service_process(settings) as url_b2,
            httpx.AsyncClient(base_url=url_b2, timeout=30) as b2,
        ):
            await wait_ready(b2, timeout_s=60)
            reloaded = (await b2.get(f"/pipelines/{name}")).json()
            assert reloaded["paused"] is True
            assert [p["name"] for p in (await b2.get("/pipelines")).json()] == [name]

            # Deleted on A, gone from B's view too.
            assert (await a.delete(f"/pipelines/{name}")).status_code == 204

            async def gone_on_b2() -> bool:
                return (await b2.get(f"/pipelines/{name}")).status_code == 404

            await eventually(gone_on_b2)
