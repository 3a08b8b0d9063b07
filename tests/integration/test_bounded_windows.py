"""Tumbling and session pipelines end to end against the embedded broker, bounded mode."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.status import PipelineState
from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    produce,
    read_json,
    read_topic,
    runtime_settings,
    unique,
    window_definition,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

BASE = 1_700_000_000_000  # a minute boundary
SUM_COUNT = {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}}


def events(keys: int, per_key: int, step_ms: int) -> list[dict[str, Any]]:
    out = []
    for i in range(per_key):
        for k in range(keys):
            out.append({"user": f"u{k}", "ts": BASE + i * step_ms + k, "amount": i + k})
    return out


async def run_bounded(bootstrap: str, definition: Any) -> Runtime:
    runtime = Runtime(runtime_settings(bootstrap))
    await runtime.start()
    runtime.start_pipeline(definition)
    try:
        await runtime.runner(definition.name).wait_for_state(PipelineState.FINISHED, timeout_s=30)
    except TimeoutError:
        status = runtime.status(definition.name)
        await runtime.shutdown()
        raise AssertionError(f"not finished: {status}") from None
    return runtime


async def test_tumbling_bounded_exact_results(bootstrap_servers: str) -> None:
    name = unique("tumbling")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    data = events(keys=4, per_key=50, step_ms=5_000)  # 250 s per key -> 5 windows of 60 s
    await produce(
        bootstrap_servers,
        topic,
        [json_record(int(e["user"][1:]) % 2, e["user"], e) for e in data],
    )
    definition = window_definition(
        name,
        [topic],
        {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 60_000},
            "aggregations": SUM_COUNT,
        },
    )
    runtime = await run_bounded(bootstrap_servers, definition)
    try:
        status = runtime.status(name)
        assert status.state is PipelineState.FINISHED, status.reason
        assert status.records_in == len(data)
    finally:
        await runtime.shutdown()

    expected: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: {"n": 0, "total": 0})
    for e in data:
        start = e["ts"] - (e["ts"] % 60_000)
        acc = expected[(e["user"], start)]
        acc["n"] += 1
        acc["total"] += e["amount"]
    results = await read_json(bootstrap_servers, f"{name}.out")
    got = {(r["key"], r["window"]["start"]): r["result"] for r in results}
    assert got == dict(expected)
    assert len(results) == len(expected)  # each window fired exactly once
    sample = results[0]
    assert set(sample) == {"pipeline", "key", "window", "result", "fire", "seq", "watermark", "id"}
    assert sample["pipeline"] == name
    assert {r["fire"] for r in results} == {"on_time"}
    assert all(r["seq"] == 0 for r in results)
    assert all(
        r["id"] == f"{name}|{r['key']}|{r['window']['start']}|{r['window']['end']}" for r in results
    )
    raw = await read_topic(bootstrap_servers, f"{name}.out")
    for record in raw:
        value = record.value
        assert record.key.decode() in value.decode()
        window_end = int(value.decode().split('"end":')[1].split("}")[0])
        assert record.timestamp == window_end - 1
    # results of one key stay in one output partition
    by_key: dict[bytes, set[int]] = defaultdict(set)
    for record in raw:
        by_key[record.key].add(record.partition)
    assert all(len(parts) == 1 for parts in by_key.values())


async def test_session_bounded_exact_results(bootstrap_servers: str) -> None:
    name = unique("session")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    # u0: sessions [0, 10), [40, 55) (gap 5 s) ; u1: one session with out-of-order merge
    t = BASE
    data = [
        {"user": "u0", "ts": t + 0, "amount": 1},
        {"user": "u0", "ts": t + 4_000, "amount": 2},
        {"user": "u1", "ts": t + 1_000, "amount": 10},
        {"user": "u1", "ts": t + 9_000, "amount": 20},
        {"user": "u1", "ts": t + 5_000, "amount": 30},  # bridges the two, out of order
        {"user": "u0", "ts": t + 40_000, "amount": 3},
        {"user": "u0", "ts": t + 50_000, "amount": 4},
        {"user": "u1", "ts": t + 60_000, "amount": 40},
    ]
    await produce(
        bootstrap_servers, topic, [json_record(int(e["user"][1:]), e["user"], e) for e in data]
    )
    definition = window_definition(
        name,
        [topic],
        {
            "type": "window",
            "assigner": {"type": "session", "gap_ms": 5_000},
            "aggregations": SUM_COUNT,
        },
        max_out_of_orderness_ms=10_000,
    )
    runtime = await run_bounded(bootstrap_servers, definition)
    try:
        assert runtime.status(name).state is PipelineState.FINISHED
    finally:
        await runtime.shutdown()
    results = await read_json(bootstrap_servers, f"{name}.out")
    got = sorted(
        (
            r["key"],
            r["window"]["start"] - t,
            r["window"]["end"] - t,
            r["result"]["n"],
            r["result"]["total"],
        )
        for r in results
    )
    assert got == [
        ("u0", 0, 9_000, 2, 3),
        ("u0", 40_000, 45_000, 1, 3),
        ("u0", 50_000, 55_000, 1, 4),
        ("u1", 1_000, 14_000, 3, 60),
        ("u1", 60_000, 65_000, 1, 40),
    ]
