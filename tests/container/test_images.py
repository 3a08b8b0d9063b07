"""The images as users run them: the service image with a read-only root filesystem
answers its probes and stops on SIGTERM; two service containers are two replicas of a
pipeline on Apache Kafka, and one killed with ``podman kill`` loses nothing (the
results are exact after de-duplication by id); the compaction image compacts a result
topic. Kept small: each container start costs seconds on a shared machine."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from service.runtime.kafka.embedded_broker import free_port
from tests.container.podman import Container, podman, running
from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    latest_by_id,
    produce,
    read_json,
    read_topic,
    wait_until,
)

# The first test of a session may build the images (minutes when nothing is cached).
pytestmark = [pytest.mark.container, pytest.mark.timeout(1500)]

GRACE_S = 30
"""The stop grace period, as docker-compose.yml's ``stop_grace_period``."""
PARTITIONS = 4
WINDOW_MS = 10_000
BASE = 1_700_000_000_000
HALF = 500
"""Records per partition in each half of the replicas' input."""


def replica_env(bootstrap: str, suffix: str, port: int, instance: str) -> dict[str, str]:
    """A replica on ``bootstrap`` with this test's own store and members topics and the
    integration tests' quick timings."""
    return {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SERVICE_HTTP_PORT": str(port),
        "SERVICE_INSTANCE_ID": instance,
        "SERVICE_PIPELINES_TOPIC": f"clockwork.pipelines.ct-{suffix}",
        "SERVICE_MEMBERS_TOPIC": f"clockwork.members.ct-{suffix}",
        "SERVICE_CHECKPOINT_INTERVAL_MS": "300",
        "SERVICE_STATUS_PUBLISH_INTERVAL_MS": "300",
        "KAFKA_SESSION_TIMEOUT_MS": "2000",
        "SERVICE_STORE_APPLY_TIMEOUT_MS": "60000",
    }


async def ready(url: str, container: Container, timeout_s: float = 60) -> float:
    """Wait until ``/readyz`` answers 200; the seconds it took."""
    start = time.monotonic()

    async def answers() -> bool:
        if container.state() != "running":
            raise AssertionError(f"{container.name} stopped:\n{container.logs()[-3000:]}")
        try:
            async with httpx.AsyncClient(timeout=2) as client:
                return (await client.get(f"{url}/readyz")).status_code == 200
        except httpx.TransportError:
            return False

    await wait_until(answers, timeout_s=timeout_s, interval_s=0.1)
    return time.monotonic() - start


def assert_stops_gracefully(container: Container) -> None:
    """SIGTERM, SIGKILL after the grace period: the exit code tells which ended it (137,
    128 + SIGKILL, would be the grace period running out)."""
    container.stop(GRACE_S)
    # uvicorn re-raises SIGTERM after its graceful shutdown: 143 is 128 + SIGTERM.
    assert container.exit_code() in (0, 143), container.logs()[-3000:]
    assert "Application shutdown complete" in container.logs()


async def test_the_service_image_runs_read_only_answers_its_probes_and_stops_on_sigterm(
    images: dict[str, str],
) -> None:
    """Without KAFKA_BOOTSTRAP_SERVERS the service starts its embedded broker, whose
    binary must run from the read-only image; the image's HEALTHCHECK passes."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with running(images["service"], env_vars={"SERVICE_HTTP_PORT": str(port)}) as container:
        took = await ready(url, container)
        async with httpx.AsyncClient(base_url=url, timeout=5) as client:
            for path in ("/healthz", "/readyz", "/metrics"):
                assert (await client.get(path)).status_code == 200, path
            assert "clockwork_" in (await client.get("/metrics")).text
        podman("healthcheck", "run", container.name)  # the image's HEALTHCHECK
        assert_stops_gracefully(container)
    print(f"service container ready in {took:.1f} s")  # shown with -s


def dataset(start: int, stop: int) -> list[tuple[int, dict[str, Any]]]:
    """Records ``start..stop-1`` of every partition, 100 ms apart and up to 1.5 s out of
    order (within the pipeline's 2 s bound, so none is late)."""
    return [
        (p, {"user": f"u{p}-{i % 4}", "ts": BASE + i * 100 - (i * 7919 % 1_500), "amount": i % 13})
        for p in range(PARTITIONS)
        for i in range(start, stop)
    ]


def sentinels() -> list[tuple[int, dict[str, Any]]]:
    """One record per partition far past the data: it closes every window before it."""
    return [(p, {"user": f"s{p}", "ts": BASE + 10**8, "amount": 0}) for p in range(PARTITIONS)]


def expected(data: list[tuple[int, dict[str, Any]]]) -> dict[tuple[str, int], dict[str, int]]:
    out: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: {"n": 0, "total": 0})
    for _, e in data:
        acc = out[(e["user"], e["ts"] - e["ts"] % WINDOW_MS)]
        acc["n"] += 1
        acc["total"] += e["amount"]
    return dict(out)


def pipeline(name: str, topic: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [topic], "format": "json", "start_from": "earliest"},
        "key": {"field": "user", "partitioned": True},
        "timestamp": {"field": "ts", "format": "epoch_millis"},
        "watermark": {"strategy": "bounded_out_of_orderness", "max_out_of_orderness_ms": 2000},
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": WINDOW_MS},
            "time": "event",
            "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
        },
        "sink": {
            "topic": f"{name}.out",
            "late_topic": f"{name}.late",
            "dead_letter_topic": f"{name}.dlq",
        },
    }


async def send(bootstrap: str, topic: str, data: list[tuple[int, dict[str, Any]]]) -> None:
    await produce(bootstrap, topic, [json_record(p, e["user"], e) for p, e in data])


async def local_partitions(client: httpx.AsyncClient, name: str) -> dict[int, int]:
    """Partition -> next offset, of the partitions this replica holds."""
    response = await client.get(f"/pipelines/{name}/status", params={"scope": "local"})
    if response.status_code != 200:
        return {}
    return {p["partition"]: p["offset"] or 0 for p in response.json()["partitions"]}


async def two_replicas_one_killed(
    a: Container,
    b: Container,
    client_a: httpx.AsyncClient,
    client_b: httpx.AsyncClient,
    name: str,
    topic: str,
    bootstrap: str,
) -> None:
    """Both replicas hold two partitions and have read the first half of the input; b is
    killed; a takes its partitions over and emits every window; a stops on SIGTERM."""
    first, second = dataset(0, HALF), dataset(HALF, 2 * HALF)
    want = expected(first + second)
    for client, container in ((client_a, a), (client_b, b)):
        await ready(str(client.base_url).rstrip("/"), container)
    created = await client_a.post("/pipelines", json=pipeline(name, topic))
    assert created.status_code == 201, created.text

    async def balanced() -> bool:
        held = [await local_partitions(c, name) for c in (client_a, client_b)]
        return [len(h) for h in held] == [2, 2]

    await wait_until(balanced, timeout_s=90)
    await send(bootstrap, topic, first)

    async def first_half_read() -> bool:
        held = [await local_partitions(c, name) for c in (client_a, client_b)]
        return all(len(h) == 2 and min(h.values()) >= HALF for h in held)

    await wait_until(first_half_read, timeout_s=60)
    b.kill()
    assert b.wait(timeout_s=30) == 137  # 128 + SIGKILL
    await send(bootstrap, topic, second + sentinels())

    async def complete() -> bool:
        emitted = await read_json(bootstrap, f"{name}.out")
        return len(latest_by_id(emitted)) >= len(want)

    await wait_until(complete, timeout_s=120)

    async def a_holds_all() -> bool:
        # the replica's part is its workers' reports (published every 300 ms here)
        return len(await local_partitions(client_a, name)) == PARTITIONS

    try:
        await wait_until(a_holds_all, timeout_s=30)
    except TimeoutError:
        status = await client_a.get(f"/pipelines/{name}/status", params={"scope": "local"})
        logs = a.logs()[-4000:]
        raise AssertionError(f"a holds only part: {status.text}\n{logs}") from None
    assert_stops_gracefully(a)


async def test_two_service_containers_are_two_replicas_and_a_killed_one_loses_nothing(
    images: dict[str, str], kafka_bootstrap: str
) -> None:
    suffix = uuid.uuid4().hex[:8]
    name = f"ct-{suffix}"
    topic = f"{name}.in"
    await create_topic(kafka_bootstrap, topic, PARTITIONS)
    ports = [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    env_a = replica_env(kafka_bootstrap, suffix, ports[0], "ct-a")
    env_b = replica_env(kafka_bootstrap, suffix, ports[1], "ct-b")
    with (
        running(images["service"], env_vars=env_a) as a,
        running(images["service"], env_vars=env_b) as b,
    ):
        client_a = httpx.AsyncClient(base_url=urls[0], timeout=10)
        client_b = httpx.AsyncClient(base_url=urls[1], timeout=10)
        async with client_a, client_b:
            await two_replicas_one_killed(a, b, client_a, client_b, name, topic, kafka_bootstrap)
    want = expected(dataset(0, 2 * HALF))
    emitted = await read_json(kafka_bootstrap, f"{name}.out")
    final = latest_by_id(emitted)
    assert {(r["key"], r["window"]["start"]): r["result"] for r in final.values()} == want
    by_id: dict[str, list[Any]] = defaultdict(list)
    for r in emitted:
        by_id[r["id"]].append(r["result"])
    assert all(all(v == values[0] for v in values) for values in by_id.values())
    assert await read_topic(kafka_bootstrap, f"{name}.late") == []
    assert await read_topic(kafka_bootstrap, f"{name}.dlq") == []


def firing(pipeline: str, key: str, start: int, seq: int, n: int) -> dict[str, Any]:
    """A window result as the service writes it (README, "Results look like this")."""
    end = start + 60_000
    return {
        "pipeline": pipeline,
        "key": key,
        "window": {"start": start, "end": end},
        "result": {"n": n},
        "fire": "on_time" if seq == 0 else "late",
        "seq": seq,
        "watermark": end - 1,
        "id": f"{pipeline}|{key}|{start}|{end}",
    }


async def test_the_compaction_image_compacts_a_result_topic(
    images: dict[str, str], kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Two firings of each of 4 windows, the late one replayed once: 12 records, 4 rows
    (the newest seq of each id) in the Delta table (the job's default) it writes to a
    mounted dir, read back by delta-rs."""
    topic = f"ct-results-{uuid.uuid4().hex[:8]}"
    await create_topic(kafka_bootstrap, topic, 2)
    firings = [
        firing("cmp", key, BASE + w * 60_000, seq, seq + 1)
        for key in ("a", "b")
        for w in range(2)
        for seq in (0, 1, 1)
    ]
    await produce(
        kafka_bootstrap, topic, [json_record(i % 2, f["key"], f) for i, f in enumerate(firings)]
    )
    tables = tmp_path / "tables"
    tables.mkdir()
    tables.chmod(0o777)  # the job runs as the image's user, 10001
    args = [
        f"--bootstrap-servers={kafka_bootstrap}",
        f"--topics={topic}",
        "--output=/data/tables",
        "--master=local[1]",
        "--result-schema=cmp=n long",
        "--conf=spark.sql.shuffle.partitions=2",
        "--conf=spark.ui.enabled=false",
    ]
    # Spark needs a writable /tmp (its local dir), as the CronJob's pod has.
    volume = ["--volume", f"{tables}:/data/tables"]
    with running(images["compaction"], options=volume, command=args, writable_tmp=True) as job:
        code = job.wait(timeout_s=300)
        logs = job.logs()
    assert code == 0, logs[-3000:]
    assert "rows written       4" in logs, logs[-3000:]
    batches = QueryBuilder().register("t", DeltaTable(str(tables))).execute("SELECT * FROM t")
    rows = [r for r in pa.table(batches).to_pylist() if r["pipeline"] == "cmp"]
    assert sorted((r["key"], r["seq"], r["result"]["n"]) for r in rows) == [
        ("a", 1, 2),
        ("a", 1, 2),
        ("b", 1, 2),
        ("b", 1, 2),
    ]
