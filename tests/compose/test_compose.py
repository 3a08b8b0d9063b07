"""docker-compose.yml as a whole under podman: Kafka, two replicas, the demo producer and
Prometheus come up (Grafana has no image that can be built here, deploy/compose/podman.yml),
Prometheus loads the alert rules and scrapes both replicas, and the demo's pipeline writes
results to Kafka.
Run by ``make compose-test``; never part of ``make test``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from tests.compose.compose import PROMETHEUS_URL, ROOT, logs, read_topic
from tests.integration.kafka_utils import wait_until

# The first run may build every image (minutes when nothing is cached).
pytestmark = [pytest.mark.compose, pytest.mark.timeout(2400)]

REPLICAS = ("clockwork-1:8000", "clockwork-2:8000")
"""deploy/prometheus/prometheus.yml's targets."""
RESULTS_TOPIC = "demo-orders-per-user"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"


async def prometheus_query(promql: str) -> list[dict[str, Any]]:
    """The instant vector of ``promql`` ([] while Prometheus does not answer yet)."""
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            answer = await client.get(f"{PROMETHEUS_URL}/api/v1/query", params={"query": promql})
    except httpx.TransportError:
        return []
    if answer.status_code != 200:
        return []
    result: list[dict[str, Any]] = answer.json()["data"]["result"]
    return result


async def eventually(
    holds: Callable[[], Awaitable[bool]], what: Callable[[], str], timeout_s: float
) -> None:
    """Wait until ``holds``; at the deadline fail with ``what()`` (what was seen last)
    and the services' logs."""
    try:
        await wait_until(holds, timeout_s=timeout_s, interval_s=1.0)
    except TimeoutError:
        services = ("kafka", "clockwork-1", "clockwork-2", "demo-producer", "prometheus")
        raise AssertionError(
            f"{what()} within {timeout_s:.0f} s\n" + "\n".join(logs(s) for s in services)
        ) from None


async def test_prometheus_scrapes_both_replicas(stack: None) -> None:
    seen: dict[str, str] = {}

    async def both_up() -> bool:
        result = await prometheus_query('up{job="clockwork"}')
        seen.clear()
        seen.update({r["metric"]["instance"]: r["value"][1] for r in result})
        return seen == dict.fromkeys(REPLICAS, "1")

    await eventually(both_up, lambda: f"up{{job=clockwork}} was {seen}, not 1 for both", 300)


async def test_prometheus_loads_the_alert_rules(stack: None) -> None:
    expected = ALERTS.read_text().count("- alert:")
    loaded: list[int] = []

    async def all_loaded() -> bool:
        try:
            async with httpx.AsyncClient(timeout=5) as client:
                answer = await client.get(f"{PROMETHEUS_URL}/api/v1/rules")
        except httpx.TransportError:
            return False
        loaded[:] = [len(g["rules"]) for g in answer.json()["data"]["groups"]]
        return sum(loaded) == expected

    await eventually(all_loaded, lambda: f"rules loaded per group {loaded}, not {expected}", 120)


async def test_the_demo_pipeline_writes_results(stack: None) -> None:
    query = f'sum(clockwork_records_out_total{{pipeline="{RESULTS_TOPIC}",output="result"}})'

    async def results_counted() -> bool:
        return any(float(r["value"][1]) > 0 for r in await prometheus_query(query))

    await eventually(results_counted, lambda: f"no {RESULTS_TOPIC} result counted", 300)

    # What the replicas counted is on the result topic.
    values = [json.loads(line) for line in await asyncio.to_thread(read_topic, RESULTS_TOPIC)]
    assert values, f"{RESULTS_TOPIC} is empty"
    for value in values:
        # A window's firing: its key, bounds and the pipeline's two aggregations.
        assert {"pipeline", "key", "window", "result"} <= set(value), value
        assert value["pipeline"] == RESULTS_TOPIC, value
        assert value["window"]["end"] > value["window"]["start"], value
        assert {"orders", "revenue"} <= set(value["result"]), value
        assert value["result"]["orders"] >= 1, value
