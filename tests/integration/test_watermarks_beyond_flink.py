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
from dataclasses import replace
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

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


def max_step(data: list[dict[str, Any]]) -> int:
    """The largest jump of one partition's maximum timestamp from one record to the next:
    how far past the bound one record can carry its partition's watermark."""
    step = 0
    top: dict[int, int] = {}
    for e in data:
        before = top.get(e["p"])
        if before is not None and e["ts"] > before:
            step = max(step, e["ts"] - before)
        top[e["p"]] = max(before if before is not None else e["ts"], e["ts"])
    return step


async def run_skewed_backfill(
    bootstrap_servers: str, **fetch: Any
) -> tuple[dict[str, Any], list[dict[str, Any]], CollectorRegistry]:
    """The skewed backfill through an aligned (D = 5 s) and a free pipeline at once;
    returns both pipelines' last status (by name), the data and the metrics."""
    topic = unique("skew") + ".in"
    await create_topic(bootstrap_servers, topic, 4)
    data = backfill()
    records = [(e["p"], e["user"].encode(), orjson.dumps(e), None) for e in data]
    # The first second of every partition goes first, and the rest only once both
    # pipelines have a watermark on every partition: a partition's lead is measured
    # over the others' minimum, which a partition with no record yet leaves undefined,
    # so a free run that happened to read its partitions one after the other would
    # measure none. The ends are pinned as the API pins them, for all of it.
    opening = [r for r, e in zip(records, data, strict=True) if e["ts"] < BASE + 1_000]
    rest = [r for r, e in zip(records, data, strict=True) if e["ts"] >= BASE + 1_000]
    ends = tuple((topic, p, sum(1 for e in data if e["p"] == p)) for p in range(4))
    await produce(bootstrap_servers, topic, opening)
    aligned, free = unique("aligned"), unique("free")
    registry = CollectorRegistry()
    settings = runtime_settings(
        bootstrap_servers,
        checkpoint_interval_ms=1000,
        # The free pipeline's skew is the fetches'; reading during the join (prefetch.py)
        # takes an even share per partition and would pace it too.
        prefetch_max_records=0,
        **fetch,
    )
    runtime = Runtime(settings, metrics=build_metrics(registry))
    await runtime.start()
    for name, drift in ((aligned, 5_000), (free, None)):
        definition = window_definition(
            name, [topic], TUMBLING_1S, interval_ms=20, max_drift_ms=drift
        )
        runtime.start_pipeline(replace(definition, end_offsets=ends))
    try:

        async def every_partition_has_a_watermark() -> bool:
            return all(
                len(parts := runtime.status(name).partitions) == 4
                and all(p.watermark is not None for p in parts)
                for name in (aligned, free)
            )

        await wait_until(every_partition_has_a_watermark, timeout_s=60)
        await produce(bootstrap_servers, topic, rest)

        async def finished() -> bool:
            return all(
                runtime.status(name).state is PipelineState.FINISHED for name in (aligned, free)
            )

        await wait_until(finished, timeout_s=60)
        statuses = {"aligned": runtime.status(aligned), "free": runtime.status(free)}
        want = expected(data, 1_000)
        for name in (aligned, free):
            results = await read_json(bootstrap_servers, f"{name}.out")
            assert by_window(results) == want
            assert len(results) == len(want)
    finally:
        await runtime.shutdown()
    return {**statuses, "names": {"aligned": aligned, "free": free}}, data, registry


SMALL_FETCHES = {"max_partition_fetch_bytes": 1024, "fetch_max_bytes": 1024, "max_records": 50}


@pytest.mark.parametrize(
    "fetch",
    [pytest.param({}, id="whole-fetches"), pytest.param(SMALL_FETCHES, id="small-fetches")],
)
async def test_alignment_keeps_every_partition_within_max_drift_whatever_the_fetch_size(
    bootstrap_servers: str, fetch: dict[str, Any]
) -> None:
    """In a backfill where partition 0 holds 10x the records, no aligned partition
    processes a batch that leaves it more than D (plus one record's step) ahead of the
    others' minimum, whether a fetch brings all of a partition's records (whole) or a
    few (small); the free pipeline runs far ahead on the same data either way (the bound
    is alignment's doing, not the data's). Both give every window exactly; holds and
    pauses are counted in metrics."""
    runs, data, registry = await run_skewed_backfill(bootstrap_servers, **fetch)
    bound = 5_000 + max_step(data)
    aligned_leads = [p.max_lead_ms for p in runs["aligned"].partitions]
    free_leads = [p.max_lead_ms for p in runs["free"].partitions]
    print(f"\nmax lead per partition: aligned {aligned_leads}, free {free_leads}")
    assert all(lead is not None and lead <= bound for lead in aligned_leads)
    assert max(lead or 0 for lead in free_leads) > 10 * bound  # the data is skewed
    names = runs["names"]
    sample = registry.get_sample_value
    held = sample("clockwork_alignment_records_held_total", {"pipeline": names["aligned"]})
    assert held is not None and held > 0
    pauses = sample("clockwork_alignment_pauses_total", {"pipeline": names["aligned"]})
    resumes = sample("clockwork_alignment_resumes_total", {"pipeline": names["aligned"]})
    assert pauses is not None and resumes is not None and pauses >= resumes >= 1
    assert sample("clockwork_alignment_pauses_total", {"pipeline": names["free"]}) is None
