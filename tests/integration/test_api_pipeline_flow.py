"""The whole life of a pipeline through the REST API of a real server (uvicorn on a
loopback port) against the embedded broker: create, results, status, pause, resume,
delete."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.api.server import (
    TopicReader,
    app_settings,
    create_topic,
    eventually,
    produce,
    running_app,
    wait_ready,
)

pytestmark = pytest.mark.integration


def window_spec(name: str, source: str, sink: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [source], "start_from": "earliest"},
        "timestamp": {"field": "ts", "format": "epoch_millis"},
        "watermark": {
            "strategy": "bounded_out_of_orderness",
            "max_out_of_orderness_ms": 0,
            "interval_ms": 0,
            "idle_timeout_ms": 300,
        },
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 1000},
            "aggregations": {
                "orders": {"fn": "count"},
                "revenue": {"fn": "sum", "field": "amount"},
            },
        },
        "sink": {"topic": sink},
    }


async def test_create_results_status_pause_resume_delete(bootstrap_servers: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    source, sink, name = f"orders-{suffix}", f"revenue-{suffix}", f"revenue-{suffix}"
    await create_topic(bootstrap_servers, source, partitions=2)
    settings = app_settings(bootstrap_servers)
    async with (
        running_app(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        created = await client.post("/pipelines", json=window_spec(name, source, sink))
        assert created.status_code == 201, created.text
        body = created.json()
        assert body["name"] == name
        assert body["spec"]["operator"]["assigner"] == {"type": "tumbling", "size_ms": 1000}
        assert (
            await client.post("/pipelines", json=window_spec(name, source, sink))
        ).status_code == 409

        async def assigned_and_idle() -> bool:
            parts = (await client.get(f"/pipelines/{name}/status")).json()["partitions"]
            return len(parts) == 2 and all(p["idle"] for p in parts)

        # A partition that has seen nothing holds the watermark back until it is idle;
        # wait for that, so the outcome does not depend on which partition a key lands in.
        await eventually(assigned_and_idle)
        await produce(
            bootstrap_servers,
            source,
            [
                ("u1", {"ts": 1000, "amount": 2}),
                ("u1", {"ts": 1500, "amount": 3}),
                ("u2", {"ts": 1200, "amount": 10}),
                ("u1", {"ts": 5000, "amount": 1}),
                ("u2", {"ts": 5100, "amount": 1}),
            ],
        )
        async with TopicReader(bootstrap_servers, sink) as reader:

            async def first_window() -> dict[str, Any] | None:
                records = await reader.poll()
                done = {r["key"]: r for r in records if r["window"]["start"] == 1000}
                return done if len(done) == 2 else None

            results = await eventually(first_window)
        assert results["u1"]["result"] == {"orders": 2, "revenue": 5}
        assert results["u2"]["result"] == {"orders": 1, "revenue": 10}
        assert results["u1"]["fire"] == "on_time"
        assert results["u1"]["id"] == f"{name}|u1|1000|2000"

        async def status_with_timers() -> dict[str, Any] | None:
            status = (await client.get(f"/pipelines/{name}/status")).json()
            parts = status["partitions"]
            timers = sum(p["event_timers"] for p in parts)
            return status if len(parts) == 2 and timers >= 2 else None

        status = await eventually(status_with_timers)
        assert status["state"] == "running"
        assert {p["partition"] for p in status["partitions"]} == {0, 1}
        for part in status["partitions"]:
            assert {
                "offset",
                "end_offset",
                "lag",
                "watermark",
                "idle",
                "event_timers",
                "processing_timers",
                "windows_open",
                "last_checkpoint_ms",
            } <= part.keys()
        assert sum(p["windows_open"] for p in status["partitions"]) == 2

        paused = await client.post(f"/pipelines/{name}/pause")
        assert paused.status_code == 200
        assert paused.json()["paused"] is True
        await eventually(
            lambda: client.get(f"/pipelines/{name}/status"),
        )

        async def state_is(expected: str) -> bool:
            return (await client.get(f"/pipelines/{name}/status")).json()["state"] == expected

        await eventually(lambda: state_is("paused"))
        before = (await client.get(f"/pipelines/{name}/status")).json()
        await produce(
            bootstrap_servers,
            source,
            [("u1", {"ts": 9000, "amount": 7}), ("u2", {"ts": 9000, "amount": 7})],
        )

        # Paused, nothing is consumed: the loop turns (20 fetches, each of which would
        # have brought the new records) and records_in stays where it was.
        async def turned() -> Any:
            status = (await client.get(f"/pipelines/{name}/status")).json()
            return status if status["loop_turns"] >= before["loop_turns"] + 20 else None

        status = await eventually(turned)
        assert status["records_in"] == before["records_in"]
        async with TopicReader(bootstrap_servers, sink) as reader:
            await eventually(reader.poll)
            assert not [r for r in await reader.poll() if r["window"]["start"] == 5000]

        resumed = await client.post(f"/pipelines/{name}/resume")
        assert resumed.status_code == 200
        assert resumed.json()["paused"] is False
        async with TopicReader(bootstrap_servers, sink) as reader:

            async def second_window() -> list[dict[str, Any]]:
                return [r for r in await reader.poll() if r["window"]["start"] == 5000]

            assert len(await eventually(second_window)) >= 1

        deleted = await client.delete(f"/pipelines/{name}")
        assert deleted.status_code == 204
        assert (await client.get(f"/pipelines/{name}")).status_code == 404
        assert (await client.get(f"/pipelines/{name}/status")).status_code == 404
        assert (await client.delete(f"/pipelines/{name}")).status_code == 404
        assert name not in [p["name"] for p in (await client.get("/pipelines")).json()]
