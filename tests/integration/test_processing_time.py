"""Processing-time pipelines end to end against the embedded broker: windows on the
clock, and keyed process timers fired through each partition's one ``call_at`` handle."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from service.runtime.definition import (
    PipelineDefinition,
    SinkSettings,
    TimestampSettings,
    WatermarkSettings,
)
from service.runtime.factories import process_operator_factory
from service.runtime.lifecycle.manager import Runtime
from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    produce,
    read_json,
    runtime_settings,
    unique,
    wait_until,
    window_definition,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

BASE = 1_700_000_000_000
WINDOW_MS = 500
PROCESSING_TUMBLING = {
    "type": "window",
    "time": "processing",
    "assigner": {"type": "tumbling", "size_ms": WINDOW_MS},
    "aggregations": {"n": {"fn": "count"}},
}


async def test_processing_time_tumbling_windows_count_every_record(
    bootstrap_servers: str,
) -> None:
    """Records arrive over ~2 s; every one is counted in exactly one 500 ms window of
    the service's clock, and each window fires once, on time, when the clock passes its
    end (no watermark is involved: the event timestamps are far in the past)."""
    name = unique("proctime")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    definition = window_definition(name, [topic], PROCESSING_TUMBLING, bounded=False, late=False)
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    runtime.start_pipeline(definition)
    chunks, per_chunk = 10, 20
    total = chunks * per_chunk
    try:
        for chunk in range(chunks):
            batch = [
                json_record(k % 2, f"u{k % 4}", {"user": f"u{k % 4}", "ts": BASE + k})
                for k in range(chunk * per_chunk, (chunk + 1) * per_chunk)
            ]
            await produce(bootstrap_servers, topic, batch)
            await asyncio.sleep(0.2)  # spreads the input over ~2 s (workload, not a sync)

        async def all_counted() -> bool:
            results = await read_json(bootstrap_servers, f"{name}.out")
            return sum(r["result"]["n"] for r in results) >= total

        await wait_until(all_counted, timeout_s=30)
        results = await read_json(bootstrap_servers, f"{name}.out")
    finally:
        await runtime.shutdown()
    assert sum(r["result"]["n"] for r in results) == total
    assert {r["fire"] for r in results} == {"on_time"}
    for r in results:
        start, end = r["window"]["start"], r["window"]["end"]
        assert start % WINDOW_MS == 0
        assert end - start == WINDOW_MS
    # One firing per key and window (processing-time windows are never late).
    assert len({(r["key"], r["window"]["start"]) for r in results}) == len(results)
    assert len({r["id"] for r in results}) == len(results)
    per_key = Counter[str]()
    for r in results:
        per_key[r["key"]] += r["result"]["n"]
    assert per_key == {f"u{k}": total // 4 for k in range(4)}


def process_definition(name: str, topic: str, params: dict[str, Any]) -> PipelineDefinition:
    return PipelineDefinition(
        name=name,
        topics=(topic,),
        sink=SinkSettings(topic=f"{name}.out", dead_letter_topic=f"{name}.dlq"),
        operator_factory=process_operator_factory(name, "inactivity_timeout", params),
        key_field="user",
        timestamp=TimestampSettings(source="field", field="ts"),
        watermark=WatermarkSettings(interval_ms=50),
        bounded=False,
        spec={"operator": {"type": "keyed_process", "function": "inactivity_timeout"}},
    )


async def test_processing_time_inactivity_alerts_once_per_silent_key(
    bootstrap_servers: str,
) -> None:
    """Six keys get records, then fall silent: each gets exactly one alert once the
    clock passes its last record + 500 ms, fired by its partition's single processing-time
    wake-up (the ``call_at`` handle), never by the watermark (event time stays put).

    "Exactly one": after the six alerts, a second round of keys is sent to both
    partitions and their alerts are awaited; a duplicate of the first round, fired from
    the same queue, would come before them."""
    name = unique("inactive")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    runtime.start_pipeline(
        process_definition(name, topic, {"timeout_ms": 500, "time": "processing"})
    )

    def records(keys: range) -> list[Any]:
        return [
            json_record(k % 2, f"k{k}", {"user": f"k{k}", "ts": BASE + i})
            for i in range(3)
            for k in keys
        ]

    async def alerts(count: int) -> bool:
        return len(await read_json(bootstrap_servers, f"{name}.out")) >= count

    try:
        await produce(bootstrap_servers, topic, records(range(6)))
        await wait_until(lambda: alerts(6), timeout_s=30)
        await produce(bootstrap_servers, topic, records(range(6, 8)))
        await wait_until(lambda: alerts(8), timeout_s=30)
        results = await read_json(bootstrap_servers, f"{name}.out")
        session = runtime.runner(name)._session
        assert session is not None
        parts = list(session.partitions.values())
        # Every alert came from a wake-up of a partition's one handle; with every key
        # alerted, no timer is left, so no handle is scheduled.
        assert sorted(p.tp.partition for p in parts) == [0, 1]
        assert all(p.timers.fired >= 1 for p in parts)
        assert not any(p.timers.has_handle for p in parts)
    finally:
        await runtime.shutdown()
    assert sorted(r["key"] for r in results) == [f"k{k}" for k in range(8)]
    for r in results:
        assert r["value"]["alert"] == "inactive"
        assert r["value"]["key"] == r["key"]
        assert r["value"]["timeout_ms"] == 500
        # As in Flink, output of a processing-time timer carries no event timestamp.
        assert r["timestamp"] is None
