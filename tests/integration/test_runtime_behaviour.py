"""Runtime behaviour against the embedded broker: idleness, dead letters, rebalances,
graceful shutdown."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from service.runtime.definition import PipelineDefinition
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.metrics import build_metrics
from service.runtime.observability.status import PipelineState
from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    latest_by_id,
    produce,
    read_json,
    read_topic,
    runtime_settings,
    unique,
    wait_until,
    window_definition,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

BASE = 1_700_000_000_000
TUMBLING = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": 10_000},
    "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
}


def expected(data: list[dict[str, Any]], size: int = 10_000) -> dict[tuple[str, int], Any]:
    out: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: {"n": 0, "total": 0})
    for e in data:
        acc = out[(e["user"], e["ts"] - e["ts"] % size)]
        acc["n"] += 1
        acc["total"] += e["amount"]
    return dict(out)


def by_window(results: list[dict[str, Any]]) -> dict[tuple[str, int], Any]:
    return {(r["key"], r["window"]["start"]): r["result"] for r in latest_by_id(results).values()}


async def test_idle_partition_lets_windows_fire(bootstrap_servers: str) -> None:
    """Partition 3 never gets a record: without idleness it would hold the watermark at MIN."""
    name = unique("idle")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 4)
    data = [
        {"user": f"u{k}", "ts": BASE + i * 1000, "amount": i} for i in range(30) for k in range(3)
    ]
    closing = [{"user": f"u{k}", "ts": BASE + 100_000, "amount": 0} for k in range(3)]

    def on_own_partition(data: list[dict[str, Any]]) -> list[Any]:  # u0 -> 0, u1 -> 1, u2 -> 2
        return [json_record(int(e["user"][1:]), e["user"], e) for e in data]

    await produce(bootstrap_servers, topic, on_own_partition(data))
    definition = window_definition(name, [topic], TUMBLING, bounded=False, idle_timeout_ms=300)
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    runtime.start_pipeline(definition)
    want = expected(data)
    try:

        async def partition_3_idle() -> bool:
            parts = {p.partition: p for p in runtime.status(name).partitions}
            return len(parts) == 4 and parts[3].idle and all(parts[p].lag == 0 for p in range(3))

        await wait_until(partition_3_idle, timeout_s=20)
        # Records on 0..2 make them active again; 3 stays idle and out of the minimum.
        await produce(bootstrap_servers, topic, on_own_partition(closing))

        async def fired() -> bool:
            return len(await read_json(bootstrap_servers, f"{name}.out")) >= len(want)

        await wait_until(fired, timeout_s=30)
        status = runtime.status(name)
        idle = {p.partition: p.idle for p in status.partitions}
        assert idle[3] is True
        assert status.watermark == BASE + 100_000 - 1
    finally:
        await runtime.shutdown()
    results = await read_json(bootstrap_servers, f"{name}.out")
    assert by_window(results) == want
    assert len(results) == len(want)


async def test_bad_records_go_to_the_dead_letter_topic(bootstrap_servers: str) -> None:
    name = unique("dlq")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 1)
    good = [{"user": "a", "ts": BASE + i, "amount": 1} for i in range(5)]
    bad: list[tuple[bytes | None, bytes | None, str]] = [
        (b"k1", b"{not json", "decode_error"),
        (b"k2", b"[1, 2, 3]", "decode_error"),  # not an object
        (b"k3", orjson.dumps({"ts": BASE, "amount": 1}), "missing_key"),
        (b"k4", orjson.dumps({"user": "a", "amount": 1}), "bad_timestamp"),
        (b"k5", orjson.dumps({"user": "a", "ts": "yesterday", "amount": 1}), "bad_timestamp"),
        (b"k6", orjson.dumps({"user": {"id": 1}, "ts": BASE}), "invalid_key"),
        (b"k7", None, "decode_error"),
    ]
    records = [json_record(0, "a", e) for e in good[:2]]
    records += [(0, key, value, None) for key, value, _ in bad]
    records += [json_record(0, "a", e) for e in good[2:]]
    await produce(bootstrap_servers, topic, records)
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    runtime.start_pipeline(window_definition(name, [topic], TUMBLING))
    try:
        await runtime.runner(name).wait_for_state(PipelineState.FINISHED, timeout_s=30)
    finally:
        await runtime.shutdown()
    dead = await read_topic(bootstrap_servers, f"{name}.dlq")
    assert [(r.key, r.value) for r in dead] == [(k, v) for k, v, _ in bad]
    for record, (_, _, reason) in zip(dead, bad, strict=True):
        headers = dict(record.headers)
        assert headers["clockwork.pipeline"] == name.encode()
        assert headers["clockwork.reason"] == reason.encode()
        assert headers["clockwork.error"]
        assert headers["clockwork.source"].startswith(f"{topic}/0/".encode())
    results = await read_json(bootstrap_servers, f"{name}.out")
    assert [(r["key"], r["result"]) for r in results] == [("a", {"n": 5, "total": 5})]


async def test_late_records_go_to_the_late_topic(bootstrap_servers: str) -> None:
    name = unique("late")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 1)
    data = [
        {"user": "a", "ts": BASE + 1_000, "amount": 1},
        {"user": "a", "ts": BASE + 25_000, "amount": 1},  # watermark passes window 0
        {"user": "a", "ts": BASE + 2_000, "amount": 7},  # late for [0, 10 s)
    ]
    await produce(bootstrap_servers, topic, [json_record(0, "a", e) for e in data])
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    runtime.start_pipeline(window_definition(name, [topic], TUMBLING, interval_ms=0))
    try:
        await runtime.runner(name).wait_for_state(PipelineState.FINISHED, timeout_s=30)
    finally:
        await runtime.shutdown()
    late = await read_topic(bootstrap_servers, f"{name}.late")
    assert [orjson.loads(r.value) for r in late] == [data[2]]
    headers = dict(late[0].headers)
    assert headers["clockwork.reason"] == b"late"
    assert headers["clockwork.watermark"] == str(BASE + 25_000 - 1).encode()
    results = await read_json(bootstrap_servers, f"{name}.out")
    assert by_window(results) == {
        ("a", BASE): {"n": 1, "total": 1},
        ("a", BASE + 20_000): {"n": 1, "total": 1},
    }


KEYS = 8
"""Users of the rebalance tests: u0..u7 over 4 partitions (user number mod 4)."""


def span(start: int, stop: int) -> list[dict[str, Any]]:
    """One event per user per second from second ``start`` to ``stop``."""
    return [
        {"user": f"u{k}", "ts": BASE + i * 1000 + k, "amount": k + i}
        for i in range(start, stop)
        for k in range(KEYS)
    ]


def records(data: list[dict[str, Any]]) -> list[Any]:
    return [json_record(int(e["user"][1:]) % 4, e["user"], e) for e in data]


def closing_records() -> list[Any]:
    """One far-future event per partition: every window of the data closes."""
    return [
        json_record(p, f"z{p}", {"user": f"z{p}", "ts": BASE + 10**6, "amount": 0})
        for p in range(4)
    ]


async def caught_up(runtime: Runtime, name: str, count: int) -> bool:
    """``runtime`` owns ``count`` partitions of pipeline ``name``, none lagging."""
    parts = runtime.status(name).partitions
    return len(parts) == count and all(p.lag == 0 for p in parts)


async def run_until_caught_up(
    bootstrap: str, definition: PipelineDefinition, partitions: int
) -> None:
    """Start a runtime, let it read everything, stop it gracefully (flush, checkpoint,
    commit, leave)."""
    runtime = Runtime(runtime_settings(bootstrap, checkpoint_interval_ms=60_000))
    await runtime.start()
    runtime.start_pipeline(definition)
    try:
        await wait_until(lambda: caught_up(runtime, definition.name, partitions), timeout_s=20)
    finally:
        await runtime.shutdown()


async def wait_for_windows(bootstrap: str, name: str, count: int) -> None:
    """Until pipeline ``name``'s result topic holds ``count`` distinct windows."""

    async def complete() -> bool:
        return len(by_window(await read_json(bootstrap, f"{name}.out"))) >= count

    await wait_until(complete, timeout_s=30)


async def test_rebalance_moves_windows_and_timers(bootstrap_servers: str) -> None:
    """Two runtimes in one group: partitions move from A to B with their open windows."""
    name = unique("rebalance")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 4)
    first, second = span(0, 35), span(35, 70)  # windows [30 s, 40 s) span the move
    closing = closing_records()
    definition = window_definition(name, [topic], TUMBLING, bounded=False)
    a = Runtime(runtime_settings(bootstrap_servers))
    b = Runtime(runtime_settings(bootstrap_servers))
    await a.start()
    await b.start()
    try:
        await produce(bootstrap_servers, topic, records(first))
        a.start_pipeline(definition)

        await wait_until(lambda: caught_up(a, name, 4), timeout_s=20)

        async def a_watermark() -> bool:
            return (a.status(name).watermark or 0) >= BASE + 34_000

        await wait_until(a_watermark, timeout_s=20)
        open_before = sum(p.windows_open for p in a.status(name).partitions)
        assert open_before == KEYS  # window [30 s, 40 s) of every key is open

        b.start_pipeline(definition)

        async def split() -> bool:
            return len(a.status(name).partitions) == 2 and len(b.status(name).partitions) == 2

        await wait_until(split, timeout_s=20)
        moved = b.status(name).partitions
        assert sum(p.windows_open for p in moved) == KEYS // 2  # the windows moved along
        assert sum(p.event_timers for p in moved) == KEYS // 2  # and their timers
        await produce(bootstrap_servers, topic, records(second) + closing)
        want = expected(first + second)
        await wait_for_windows(bootstrap_servers, name, len(want))
    finally:
        await b.shutdown()
        await a.shutdown()
    assert by_window(await read_json(bootstrap_servers, f"{name}.out")) == want


def restored(registry: CollectorRegistry, name: str, source: str) -> float:
    value = registry.get_sample_value(
        "clockwork_partitions_restored_total", {"pipeline": name, "source": source}
    )
    return value or 0.0


async def test_partitions_assigned_straight_back_keep_their_state_in_memory(
    bootstrap_servers: str,
) -> None:
    """A rebalance revokes everything; what comes back unchanged is not read back, what
    another member checkpointed meanwhile is; either way the results stay exact."""
    name = unique("keep")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 4)

    first, second, third = span(0, 25), span(25, 50), span(50, 75)
    closing = closing_records()
    definition = window_definition(name, [topic], TUMBLING, bounded=False)
    registry_a, registry_b = CollectorRegistry(), CollectorRegistry()
    a = Runtime(runtime_settings(bootstrap_servers), metrics=build_metrics(registry_a))
    b = Runtime(runtime_settings(bootstrap_servers), metrics=build_metrics(registry_b))
    await a.start()
    await b.start()
    try:
        await produce(bootstrap_servers, topic, records(first))
        a.start_pipeline(definition)

        await wait_until(lambda: caught_up(a, name, 4), timeout_s=20)
        assert restored(registry_a, name, "changelog") == 4  # the first assignment
        assert restored(registry_a, name, "memory") == 0

        async def split() -> bool:
            return await caught_up(a, name, 2) and await caught_up(b, name, 2)

        b.start_pipeline(definition)
        await wait_until(split, timeout_s=20)
        # A got two of its four back without reading them; B read its two
        assert restored(registry_a, name, "memory") >= 2
        assert restored(registry_b, name, "changelog") >= 2
        await produce(bootstrap_servers, topic, records(second))
        await wait_until(split, timeout_s=20)
        memory_before = restored(registry_a, name, "memory")
        changelog_before = restored(registry_a, name, "changelog")

        await b.shutdown()  # checkpoints its two partitions on the way out
        await wait_until(lambda: caught_up(a, name, 4), timeout_s=20)
        # B wrote their changelog since A last had them: A reads those two back
        assert restored(registry_a, name, "changelog") - changelog_before == 2
        assert restored(registry_a, name, "memory") - memory_before == 2
        await produce(bootstrap_servers, topic, records(third) + closing)
        want = expected(first + second + third)
        await wait_for_windows(bootstrap_servers, name, len(want))
    finally:
        await b.shutdown()
        await a.shutdown()
    assert by_window(await read_json(bootstrap_servers, f"{name}.out")) == want


async def test_graceful_shutdown_then_restart_reemits_nothing(bootstrap_servers: str) -> None:
    name = unique("graceful")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    data = [
        {"user": f"u{k}", "ts": BASE + i * 700, "amount": i} for i in range(100) for k in range(4)
    ]
    await produce(
        bootstrap_servers, topic, [json_record(int(e["user"][1:]) % 2, e["user"], e) for e in data]
    )
    definition = window_definition(name, [topic], TUMBLING, bounded=False)

    await run_until_caught_up(bootstrap_servers, definition, 2)
    first = await read_json(bootstrap_servers, f"{name}.out")
    assert first  # closed windows were emitted
    await run_until_caught_up(bootstrap_servers, definition, 2)
    assert await read_json(bootstrap_servers, f"{name}.out") == first


async def test_graceful_shutdown_delivers_the_watermark_before_its_checkpoint(
    bootstrap_servers: str,
) -> None:
    """With a watermark interval longer than the run, no tick ever comes: the windows
    closed by the input fire only because a graceful stop delivers the watermark of
    everything processed before it checkpoints. Without that, the checkpoint would hold
    operators behind their input, and the next owner would fire those windows (the
    re-emission that made the graceful-restart test flaky when a stop came right after
    a batch)."""
    name = unique("finalwm")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    data = [
        {"user": f"u{k}", "ts": BASE + i * 1000, "amount": i} for i in range(35) for k in range(4)
    ]
    await produce(
        bootstrap_servers, topic, [json_record(int(e["user"][1:]) % 2, e["user"], e) for e in data]
    )
    definition = window_definition(name, [topic], TUMBLING, bounded=False, interval_ms=600_000)

    await run_until_caught_up(bootstrap_servers, definition, 2)
    first = await read_json(bootstrap_servers, f"{name}.out")
    # Watermark 34 s - 1 ms: the windows [0, 10 s), [10, 20 s) and [20, 30 s) are closed.
    closed = {w: r for w, r in expected(data).items() if w[1] < BASE + 30_000}
    assert by_window(first) == closed
    assert len(first) == len(closed)
    await run_until_caught_up(bootstrap_servers, definition, 2)
    assert await read_json(bootstrap_servers, f"{name}.out") == first
