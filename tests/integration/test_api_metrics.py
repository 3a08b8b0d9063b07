"""``/metrics`` through a real server: it parses as Prometheus text, and the timer-queue
gauges follow timers as they are registered and fired."""

from __future__ import annotations

import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.server import (
    app_settings,
    create_topic,
    eventually,
    produce,
    running_app,
    wait_ready,
)

pytestmark = pytest.mark.integration


async def scrape(client: httpx.AsyncClient) -> dict[str, list[tuple[dict[str, str], float]]]:
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


async def test_metrics_parse_and_timer_gauges_move(bootstrap_servers: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    source, name = f"clicks-{suffix}", f"clicks-{suffix}"
    await create_topic(bootstrap_servers, source, partitions=1)
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        spec = {
            "name": name,
            "source": {"topics": [source]},
            "timestamp": {"field": "ts"},
            "watermark": {"strategy": "ascending", "interval_ms": 0},
            "operator": {
                "type": "window",
                "assigner": {"type": "tumbling", "size_ms": 1000},
                "aggregations": {"n": {"fn": "count"}},
            },
            "sink": {"topic": f"{source}.out"},
        }
        assert (await client.post("/pipelines", json=spec)).status_code == 201

        async def event_timers() -> float | None:
            samples = await scrape(client)
            values = [
                value
                for labels, value in samples.get("clockwork_timers_queued", [])
                if labels["pipeline"] == name and labels["domain"] == "event"
            ]
            return sum(values) if values else None

        # One window per key: three keys, three event-time timers at 1999.
        await produce(
            bootstrap_servers,
            source,
            [("a", {"ts": 1000}), ("b", {"ts": 1200}), ("c", {"ts": 1300})],
        )
        await eventually(lambda: _equals(event_timers, 3))
        # Event time 5000 fires those three and registers one for the new window.
        await produce(bootstrap_servers, source, [("a", {"ts": 5000})])
        await eventually(lambda: _equals(event_timers, 1))

        samples = await scrape(client)
        ins = [
            v for labels, v in samples["clockwork_records_in_total"] if labels["pipeline"] == name
        ]
        assert sum(ins) == 4
        firings = samples["clockwork_window_firings_total"]
        assert sum(v for labels, v in firings if labels["pipeline"] == name) == 3
        assert "process_cpu_seconds_total" in samples
        assert (await client.delete(f"/pipelines/{name}")).status_code == 204


async def _equals(read: object, expected: float) -> bool:
    value = await read()  # type: ignore[operator]
    return value == expected
