"""Issue 10 against the embedded broker: idle advance and watermark alignment.

Idle advance: the last windows of a quiet stream fire about ``idle_timeout_ms`` after its
last record, with the results a later record would have given, and a record that then
arrives behind the advanced watermark is late. Alignment: in a backfill where one
partition holds 10x the data, pausing the partitions that race ahead keeps the number of
open windows bounded, with unchanged results, and the pauses are counted in metrics.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from service.runtime.manager import Runtime
from service.runtime.metrics import build_metrics
from service.runtime.status import PipelineState
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

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

BASE = 1_700_000_000_000  # a minute boundary
TUMBLING_10S = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": 10_000},
    "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
}
TUMBLING_1S = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": 1_000},
    "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
}


def expected(data: list[dict[str, Any]], size: int) -> dict[tuple[str, int], Any]:
    out: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: {"n": 0, "total": 0})
    for e in data:
        acc = out[(e["user"], e["ts"] - e["ts"] % size)]
        acc["n"] += 1
        acc["total"] += e["amount"]
    return dict(out)


def by_window(results: list[dict[str, Any]]) -> dict[tuple[str, int], Any]:
    return {(r["key"], r["window"]["start"]): r["result"] for r in latest_by_id(results).values()}


def quiet_stream() -> list[dict[str, Any]]:
    """Three 10 s windows per key; the last record is 100 ms before its window's end, so
    once idle for 500 ms the advanced watermark has passed every window."""
    data = [
        {"user": f"u{k}", "ts": BASE + i * 1_000 + k, "amount": i + k}
        for i in range(29)
        for k in range(2)
    ]
    data += [{"user": f"u{k}", "ts": BASE + 29_900, "amount": 100} for k in range(2)]
    return data


def records(data: list[dict[str, Any]]) -> list[Any]:
    return [json_record(int(e["user"][1:]), e["user"], e) for e in data]


async def test_idle_advance_fires_the_last_windows_of_a_quiet_stream(
    bootstrap_servers: str,
) -> None:
    """Same results as a run whose last windows a later record closed; no record needed."""
    name = unique("idleadv")
    closed = unique("closed")
    data = quiet_stream()
    want = expected(data, 10_000)
    for pipeline in (name, closed):
        await create_topic(bootstrap_servers, f"{pipeline}.in", 2)
    await produce(bootstrap_servers, f"{name}.in", records(data))
    closing = [{"user": f"u{k}", "ts": BASE + 100_000, "amount": 0} for k in range(2)]
    await produce(bootstrap_servers, f"{closed}.in", records(data + closing))
    registry = CollectorRegistry()
    runtime = Runtime(runtime_settings(bootstrap_servers), metrics=build_metrics(registry))
    await runtime.start()
    runtime.start_pipeline(
        window_definition(
            name,
            [f"{name}.in"],
            TUMBLING_10S,
            bounded=False,
            idle_timeout_ms=500,
            idle_advance=True,
        )
    )
    runtime.start_pipeline(window_definition(closed, [f"{closed}.in"], TUMBLING_10S, bounded=False))
    try:

        async def consumed() -> bool:
            return runtime.status(name).records_in == len(data)

        await wait_until(consumed, timeout_s=30, interval_s=0.01)
        caught_up = time.monotonic()

        async def fired() -> bool:
            return len(await read_json(bootstrap_servers, f"{name}.out")) >= len(want)

        await wait_until(fired, timeout_s=15, interval_s=0.05)
        delay = time.monotonic() - caught_up
        print(f"\nidle advance: last windows fired {delay:.2f}s after the last record")

        async def closed_fired() -> bool:
            return len(await read_json(bootstrap_servers, f"{closed}.out")) >= len(want)

        await wait_until(closed_fired, timeout_s=30)
        status = runtime.status(name)
        assert status.idle_advancing is True
        assert status.watermark is not None and status.watermark >= BASE + 30_000
        assert runtime.status(closed).idle_advancing is False

        async def metric_says_advancing() -> bool:
            value = registry.get_sample_value(
                "clockwork_watermark_idle_advancing", {"pipeline": name}
            )
            return value == 1.0

        await wait_until(metric_says_advancing, timeout_s=10)
        # one event-time timer per (key, window), each fired once, none deleted
        timers = {
            kind: registry.get_sample_value(
                f"clockwork_timers_{kind}_total", {"pipeline": name, "domain": "event"}
            )
            for kind in ("registered", "fired", "deleted")
        }
        assert timers == {"registered": len(want), "fired": len(want), "deleted": None}
    finally:
        await runtime.shutdown()
    results = await read_json(bootstrap_servers, f"{name}.out")
    assert by_window(results) == want
    assert len(results) == len(want)
    assert by_window(await read_json(bootstrap_servers, f"{closed}.out")) == by_window(results)


async def test_a_record_behind_the_advanced_watermark_is_late(bootstrap_servers: str) -> None:
    name = unique("idlelate")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    data = quiet_stream()
    want = expected(data, 10_000)
    await produce(bootstrap_servers, topic, records(data))
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    runtime.start_pipeline(
        window_definition(
            name, [topic], TUMBLING_10S, bounded=False, idle_timeout_ms=500, idle_advance=True
        )
    )
    straggler = {"user": "u1", "ts": BASE + 29_950, "amount": 7}  # in the last window
    try:

        async def fired() -> bool:
            return len(await read_json(bootstrap_servers, f"{name}.out")) >= len(want)

        await wait_until(fired, timeout_s=30)
        assert (runtime.status(name).watermark or 0) >= BASE + 30_000
        await produce(bootstrap_servers, topic, records([straggler]))

        async def late_arrived() -> bool:
            return len(await read_topic(bootstrap_servers, f"{name}.late")) >= 1

        await wait_until(late_arrived, timeout_s=30)
    finally:
        await runtime.shutdown()
    late = await read_topic(bootstrap_servers, f"{name}.late")
    assert [orjson.loads(r.value) for r in late] == [straggler]
    assert dict(late[0].headers)["clockwork.reason"] == b"late"
    results = await read_json(bootstrap_servers, f"{name}.out")
    assert by_window(results) == want
    assert len(results) == len(want)


def backfill() -> list[dict[str, Any]]:
    """400 s of event time on 4 partitions, 2 keys each; partition 0 holds 10x the records."""
    data = []
    for second in range(400):
        for p in range(4):
            per_key = 10 if p == 0 else 1
            for k in range(2):
                for j in range(per_key):
                    ts = BASE + second * 1_000 + j * 90 + k
                    data.append({"user": f"p{p}k{k}", "ts": ts, "amount": j + 1, "p": p})
    return data


async def test_alignment_bounds_open_windows_in_a_skewed_backfill(bootstrap_servers: str) -> None:
    """Without alignment, partitions 1-3 run ahead and keep ~all their windows open until
    partition 0 catches up; with ``max_drift_ms`` they are paused instead. Same results;
    the pauses and resumes are counted in metrics."""
    topic = unique("skew") + ".in"
    await create_topic(bootstrap_servers, topic, 4)
    data = backfill()
    # Small record batches and fetches: a consumer fetches whole batches, so they are
    # the step by which a partition can overshoot the drift. (Until every partition has
    # a watermark the combined one is MIN and nothing is paused; small fetches keep
    # that start short too.)
    await produce(
        bootstrap_servers,
        topic,
        [(e["p"], e["user"].encode(), orjson.dumps(e), None) for e in data],
        max_batch_size=512,
    )
    want = expected(data, 1_000)
    aligned, free = unique("aligned"), unique("free")
    registry = CollectorRegistry()
    settings = runtime_settings(
        bootstrap_servers,
        max_partition_fetch_bytes=1024,
        fetch_max_bytes=1024,  # Tansu ignores the per-partition limit, not this one
        max_records=50,
        checkpoint_interval_ms=1000,
        # The free pipeline's skew is the fetches' (the sizes above); reading during the
        # join (prefetch.py) takes an even share per partition and would pace it too.
        prefetch_max_records=0,
    )
    runtime = Runtime(settings, metrics=build_metrics(registry))
    await runtime.start()
    for name, drift in ((aligned, 5_000), (free, None)):
        runtime.start_pipeline(
            window_definition(name, [topic], TUMBLING_1S, interval_ms=20, max_drift_ms=drift)
        )
    peak = {aligned: 0, free: 0}
    saw_paused = False
    try:

        async def finished() -> bool:
            nonlocal saw_paused
            done = True
            for name in (aligned, free):
                status = runtime.status(name)
                open_now = sum(p.windows_open for p in status.partitions)
                peak[name] = max(peak[name], open_now)
                if name == aligned and any(p.aligned_paused for p in status.partitions):
                    saw_paused = True
                done = done and status.state is PipelineState.FINISHED
            return done

        await wait_until(finished, timeout_s=60, interval_s=0.005)
        session = runtime.runner(aligned)._session
        assert session is not None and session.alignment is not None
        pauses, resumes = session.alignment.pauses, session.alignment.resumes
    finally:
        await runtime.shutdown()
    print(f"\nmax windows open: with alignment {peak[aligned]}, without {peak[free]}")
    print(f"alignment: {pauses} pauses, {resumes} resumes")
    for name in (aligned, free):
        results = await read_json(bootstrap_servers, f"{name}.out")
        assert by_window(results) == want
        assert len(results) == len(want)
    # 8 keys x 400 windows in all; without alignment partitions 1-3 open most of theirs.
    assert peak[free] > 1_000
    assert peak[aligned] < peak[free] / 4
    assert saw_paused
    assert pauses >= resumes >= 1
    sample = registry.get_sample_value
    assert sample("clockwork_alignment_pauses_total", {"pipeline": aligned}) == pauses
    assert sample("clockwork_alignment_resumes_total", {"pipeline": aligned}) == resumes
    assert sample("clockwork_alignment_pauses_total", {"pipeline": free}) is None
