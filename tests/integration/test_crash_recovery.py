"""SIGKILL a worker mid-stream, restart it: after de-duplication by id, nothing is missing
and every result equals the uninterrupted result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    latest_by_id,
    produce,
    read_json,
    read_topic,
    unique,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]
BASE = 1_700_000_000_000
KEYS = 16
PARTITIONS = 4


def start_worker(bootstrap: str, name: str, topic: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.worker", bootstrap, name, topic],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop_worker(process: subprocess.Popen[bytes], sig: int) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def dataset(start: int, stop: int) -> list[dict[str, Any]]:
    """Record i of key k at BASE + i seconds: 60 records per key per window."""
    return [
        {"user": f"u{k}", "ts": BASE + i * 1000 + k, "amount": i * k % 7}
        for i in range(start, stop)
        for k in range(KEYS)
    ]


def records(data: list[dict[str, Any]]) -> list[Any]:
    return [json_record(int(e["user"][1:]) % PARTITIONS, e["user"], e) for e in data]


def expected(data: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, int]]:
    out: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: {"n": 0, "total": 0})
    for e in data:
        acc = out[(e["user"], e["ts"] - e["ts"] % 60_000)]
        acc["n"] += 1
        acc["total"] += e["amount"]
    return dict(out)


async def test_sigkill_mid_stream_then_restart(bootstrap_servers: str) -> None:
    name = unique("crash")
    topic = f"{name}.in"
    out = f"{name}.out"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first, second = dataset(0, 600), dataset(600, 1200)  # 20 windows per key in all
    sentinels = [
        json_record(p, f"s{p}", {"user": f"s{p}", "ts": BASE + 10**7, "amount": 0})
        for p in range(PARTITIONS)
    ]
    await produce(bootstrap_servers, topic, records(first))

    async def results() -> list[dict[str, Any]]:
        return await read_json(bootstrap_servers, out)

    worker = start_worker(bootstrap_servers, name, topic)
    try:
        # Mid-stream: some windows were emitted (and checkpoints taken), more are coming.
        async def some_results() -> bool:
            if len(await results()) < 20:
                return False
            changelog = await read_topic(bootstrap_servers, f"clockwork.{name}.changelog")
            return any(r.key.endswith(b"|m") for r in changelog)  # a checkpoint was taken

        await wait_until(some_results, timeout_s=30)
        stop_worker(worker, signal.SIGKILL)
        before_crash = len(await results())
        await produce(bootstrap_servers, topic, records(second) + sentinels)

        worker = start_worker(bootstrap_servers, name, topic)
        want = expected(first + second)

        async def complete() -> bool:
            return len(latest_by_id(await results())) >= len(want)

        await wait_until(complete, timeout_s=45)
    finally:
        stop_worker(worker, signal.SIGTERM)

    emitted = await results()
    final = latest_by_id(emitted)
    got = {(r["key"], r["window"]["start"]): r["result"] for r in final.values()}
    assert got == want  # nothing missing, nothing wrong, nothing extra
    assert before_crash < len(want)  # the kill really was mid-stream
    # at-least-once: a replayed window has the same id and the same result
    by_id: dict[str, list[Any]] = defaultdict(list)
    for r in emitted:
        by_id[r["id"]].append(r["result"])
    assert all(all(v == values[0] for v in values) for values in by_id.values())
