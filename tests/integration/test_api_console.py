"""The feeds the console reads, through a real server on the embedded broker: the console's
files at /ui, the short history (/history, /pipelines/{name}/history) and the live tail
(server-sent events from /pipelines/{name}/tail)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from service.runtime.kafka.tail import open_tails
from tests.api.server import (
    app_settings,
    create_topic,
    eventually,
    produce,
    running_app,
    wait_ready,
)

pytestmark = pytest.mark.integration


@pytest.fixture
async def client(bootstrap_servers: str) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        yield client


def spec(name: str, source: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [source]},
        "timestamp": {"field": "ts"},
        "watermark": {"interval_ms": 0},
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 1000},
            "aggregations": {"n": {"fn": "count"}},
        },
        "sink": {"topic": f"{name}.out", "late_topic": f"{name}.late"},
    }


async def created(client: httpx.AsyncClient, bootstrap: str) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    source, name = f"in-{suffix}", f"p-{suffix}"
    await create_topic(bootstrap, source, partitions=1)
    response = await client.post("/pipelines", json=spec(name, source))
    assert response.status_code == 201, response.text
    return name, source


async def test_root_and_ui_lead_to_the_console(client: httpx.AsyncClient) -> None:
    for path in ("/", "/ui"):
        response = await client.get(path)
        assert response.status_code == 307
        assert response.headers["location"] == "/ui/"
    page = await client.get("/ui/")
    assert page.status_code == 200
    assert "<title>Clockwork console</title>" in page.text
    for asset in ("js/app.js", "style.css", "vendor/ajv2020.min.js", "examples.json"):
        assert (await client.get(f"/ui/{asset}")).status_code == 200, asset
    refused = await client.post("/ui/js/app.js")
    assert refused.status_code == 405
    assert refused.headers["allow"] == "GET, HEAD"


async def test_history_has_rates_watermark_and_lag(
    client: httpx.AsyncClient, bootstrap_servers: str
) -> None:
    name, source = await created(client, bootstrap_servers)
    now = int(time.time() * 1000)
    await produce(bootstrap_servers, source, [("k", {"ts": now - 5000 + i}) for i in range(50)])

    async def counted() -> list[dict[str, Any]]:
        """Samples after the records, once there is one before each (a rate needs two)."""
        samples: list[dict[str, Any]] = (await client.get(f"/pipelines/{name}/history")).json()[
            "samples"
        ]
        return [s for s in samples[1:] if s["records_in"] >= 50 and s["watermark"] is not None]

    sample = (await eventually(counted))[-1]
    assert sample["watermark"] == now - 5000 + 49 - 1
    assert sample["watermark_lag_ms"] == sample["at_ms"] - sample["watermark"]
    assert sample["records_in_per_s"] is not None
    everything = (await client.get(f"/pipelines/{name}/history")).json()
    assert everything["interval_ms"] == 1000
    assert len(everything["samples"]) <= everything["capacity"]
    newer = (await client.get(f"/pipelines/{name}/history?since_ms={sample['at_ms']}")).json()
    assert all(s["at_ms"] > sample["at_ms"] for s in newer["samples"])
    assert name in (await client.get("/history")).json()["pipelines"]
    assert (await client.get("/pipelines/nope/history")).status_code == 404


async def events(response: httpx.Response) -> AsyncIterator[tuple[str, Any]]:
    kind = None
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            yield kind or "message", json.loads(line.removeprefix("data: "))


async def test_tail_streams_newest_records_with_key_timestamp_and_headers(
    client: httpx.AsyncClient, bootstrap_servers: str
) -> None:
    name, _ = await created(client, bootstrap_servers)
    result = f"{name}.out"
    await create_topic(bootstrap_servers, result, partitions=1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers)
    await producer.start()
    try:
        for i in range(30):  # more than the backlog a tail starts with
            await producer.send(result, key=b"u1", value=json.dumps({"i": i}).encode())
        await producer.send(
            result, key=b"u2", value=b"not json", headers=[("why", b"test")], timestamp_ms=1234
        )
        await producer.flush()
    finally:
        await producer.stop()

    seen: list[dict[str, Any]] = []
    async with client.stream("GET", f"/pipelines/{name}/tail") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        async for kind, data in events(response):
            if kind == "topics":
                assert data == {
                    "result": result,
                    "late": f"{name}.late",
                    "dead_letter": f"{result}.dlq",
                }
            elif kind == "records":
                seen += data["records"]
                if any(r["key"] == "u2" for r in seen):
                    break
        assert open_tails() == 1
    last = seen[-1]
    assert last == {
        "kind": "result",
        "topic": result,
        "partition": 0,
        "offset": 30,
        "timestamp": 1234,
        "key": "u2",
        "key_format": "text",
        "headers": [{"name": "why", "value": "test", "format": "text"}],
        "value": "not json",
        "value_format": "text",
    }
    assert len(seen) <= 21, "a tail starts at most 20 records back per partition"
    assert seen[0]["value"] == {"i": 30 - (len(seen) - 1)}
    await eventually(lambda: open_tails() == 0)  # the client left: the consumer is closed
