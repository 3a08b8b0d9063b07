"""One replica, two worker processes (``SERVICE_WORKERS=2``): the workers split the
pipeline as two replicas would, the API process shows and counts all of it, and a
worker killed with -9 is started again while the other takes its partitions over,
with results exact after de-duplication by id (and no duplicate at all with
exactly-once delivery, on Apache Kafka). The replica is a real ``python -m service``.

The pipeline is the replica-loss tests' (a 10 s tumbling window over 4 partitions, no
record ever late) behind the keyed shuffle, so both of its stages spread over the
workers; the kill also hits a lookup join running beside it (every worker reads the
whole table again when it starts).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.server import app_settings, eventually, wait_ready
from tests.integration.kafka_utils import create_topic, produce, read_json, unique
from tests.integration.test_api_replicas import service_process
from tests.integration.test_lookup_join import customer, joined, lookup_spec, order, topics
from tests.integration.test_replica_loss import (
    HALF,
    PARTITIONS,
    WINDOW_MS,
    dataset,
    expected,
    send,
    sentinels,
    settle_and_check,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def window_spec(name: str, topic: str, delivery: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [topic]},
        "key": {"field": "user"},
        "timestamp": {"field": "ts"},
        "watermark": {"max_out_of_orderness_ms": 2000, "interval_ms": 50},
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": WINDOW_MS},
            "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
        },
        "sink": {
            "topic": f"{name}.out",
            "late_topic": f"{name}.late",
            "dead_letter_topic": f"{name}.dlq",
        },
        "delivery": delivery,
    }


def owners(status: dict[str, Any]) -> dict[tuple[str, int], int]:
    """(stage, partition) -> the worker that holds it; each partition listed once."""
    keys = [(p.get("stage", "keyed"), p["partition"]) for p in status["partitions"]]
    assert len(keys) == len(set(keys)), status["partitions"]
    return {
        (p.get("stage", "keyed"), p["partition"]): p["owner"]["worker"]
        for p in status["partitions"]
        if not p["owner"]["lost"]
    }


def worker_pids(parent: int) -> set[int]:
    """The worker processes of the replica whose process is ``parent``."""
    found: set[int] = set()
    for task in Path(f"/proc/{parent}/task").iterdir():
        children = (task / "children").read_text().split()
        found.update(int(pid) for pid in children)
    return found


def records_in_by_worker(text: str, pipeline: str) -> dict[str, float]:
    """``clockwork_records_in_total`` of ``pipeline`` summed per ``worker`` label."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "clockwork_records_in":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels["pipeline"] == pipeline:
                worker = sample.labels.get("worker", "")
                out[worker] = out.get(worker, 0.0) + sample.value
    return out


async def start_pipeline(
    client: httpx.AsyncClient, bootstrap: str, delivery: str = "at_least_once"
) -> tuple[str, str]:
    name = unique("workers")
    topic = f"{name}.in"
    await create_topic(bootstrap, topic, PARTITIONS)
    created = await client.post("/pipelines", json=window_spec(name, topic, delivery))
    assert created.status_code == 201, created.text

    async def both_workers_hold_both_stages() -> bool:
        status = (await client.get(f"/pipelines/{name}/status")).json()
        held = owners(status)
        stages = {stage for stage, _ in held}
        return len(held) >= 2 * PARTITIONS and set(held.values()) == {1, 2} and len(stages) == 2

    await eventually(both_workers_hold_both_stages, timeout_s=90)
    return name, topic


async def test_two_workers_split_a_shuffled_pipeline_and_metrics_sum_over_them(
    bootstrap_servers: str,
) -> None:
    settings = app_settings(bootstrap_servers, store_apply_timeout_ms=60000)
    async with (
        service_process(settings, workers=2) as replica,
        httpx.AsyncClient(base_url=replica.url, timeout=30) as client,
    ):
        await wait_ready(client, timeout_s=60)
        name, topic = await start_pipeline(client, bootstrap_servers)
        data = dataset(0, HALF // 3)
        await send(bootstrap_servers, topic, data + sentinels())
        await settle_and_check(bootstrap_servers, name, expected(data))

        async def every_record_counted() -> dict[str, float] | None:
            text = (await client.get("/metrics")).text
            counted = records_in_by_worker(text, name)
            return counted if sum(counted.values()) == len(data) + PARTITIONS else None

        counted = await eventually(every_record_counted, timeout_s=30)
        # The source stage reads each record once, on whichever worker holds its partition.
        assert set(counted) <= {"1", "2"}, counted
        local = (await client.get(f"/pipelines/{name}/status?scope=local")).json()
        assert local["records_in"] == len(data) + PARTITIONS
        cluster = (await client.get("/cluster")).json()
        assert {m["worker"] for m in cluster["members"] if m["replica"] == replica.instance_id} == {
            1,
            2,
        }


async def test_a_worker_killed_mid_stream_is_restarted_and_the_results_are_exact(
    bootstrap_servers: str, broker_name: str
) -> None:
    """Exactly-once where the broker has transactions (Apache Kafka), else at-least-once."""
    delivery = "exactly_once" if broker_name == "kafka" else "at_least_once"
    settings = app_settings(bootstrap_servers, store_apply_timeout_ms=60000)
    async with (
        service_process(settings, workers=2) as replica,
        httpx.AsyncClient(base_url=replica.url, timeout=30) as client,
    ):
        await wait_ready(client, timeout_s=60)
        name, topic = await start_pipeline(client, bootstrap_servers, delivery)
        lookup = unique("workerslookup")
        await topics(bootstrap_servers, lookup)
        people = [customer(i % 3, f"c{i}", f"n{i}") for i in range(5)]
        await produce(bootstrap_servers, f"{lookup}.customers", people)
        created = await client.post("/pipelines", json=lookup_spec(lookup, delivery=delivery))
        assert created.status_code == 201, created.text
        first, second = dataset(0, HALF // 3), dataset(HALF // 3, 2 * HALF // 3)
        await send(bootstrap_servers, topic, first)
        orders = [order(n, f"c{n % 5}") for n in range(400)]
        await produce(bootstrap_servers, f"{lookup}.orders", orders[:200])

        async def some_results() -> bool:
            for out in (name, lookup):
                if not await read_json(bootstrap_servers, f"{out}.out", "read_committed"):
                    return False
            return True

        await eventually(some_results, timeout_s=60)
        before = worker_pids(replica.process.pid)
        assert len(before) == 2
        victim = min(before)
        os.kill(victim, signal.SIGKILL)

        async def restarted() -> bool:
            pids = worker_pids(replica.process.pid)
            return len(pids) == 2 and victim not in pids

        await eventually(restarted, timeout_s=60)
        await send(bootstrap_servers, topic, second + sentinels())
        await produce(bootstrap_servers, f"{lookup}.orders", orders[200:])
        await settle_and_check(bootstrap_servers, name, expected(first + second))

        async def every_order_enriched() -> dict[int, str | None] | None:
            rows = await read_json(bootstrap_servers, f"{lookup}.out", "read_committed")
            found = joined(rows)  # the newest row per order: a replayed row is the same
            return found if len(found) == len(orders) else None

        enriched = await eventually(every_order_enriched, timeout_s=60)
        assert enriched == {n: f"n{n % 5}" for n in range(len(orders))}
        if delivery == "exactly_once":
            for out in (name, lookup):
                committed = await read_json(bootstrap_servers, f"{out}.out", "read_committed")
                ids = [r["id"] for r in committed]
                assert len(ids) == len(set(ids)), f"a result of {out} was written twice"

        async def both_workers_back() -> bool:
            status = (await client.get(f"/pipelines/{name}/status")).json()
            return set(owners(status).values()) == {1, 2}

        await eventually(both_workers_back, timeout_s=90)
        metrics = (await client.get("/metrics")).text
        assert 'clockwork_worker_restarts_total{worker="' in metrics
        restarts = [
            s.value
            for f in text_string_to_metric_families(metrics)
            if f.name == "clockwork_worker_restarts"
            for s in f.samples
            if s.name.endswith("_total")
        ]
        assert sum(restarts) == 1
