"""Reading the source during the group join (prefetch.py).

How long a join takes depends on the broker (Tansu answers after half the session
timeout, a test's Apache Kafka at once), so the tests make it long on every broker:
another member of the pipeline's group holds the rebalance the pipeline's join starts
(a rebalance waits for every known member) until the prefetch has read what it may.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from prometheus_client import CollectorRegistry

from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.metrics import build_metrics
from service.runtime.observability.status import PipelineState
from tests.integration.kafka_utils import (
    create_topic,
    join_held,
    json_record,
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


async def run(bootstrap: str, name: str, topic: str, prefetch: int) -> tuple[int, float]:
    """Run the bounded pipeline to its end, its join held until the prefetch has read
    ``prefetch`` records or the input: (records in, records taken from the prefetch)."""
    registry = CollectorRegistry()
    settings = runtime_settings(bootstrap, prefetch_max_records=prefetch)
    runtime = Runtime(settings, metrics=build_metrics(registry))
    definition = window_definition(name, [topic], TUMBLING)
    wanted = min(prefetch, len(await read_topic(bootstrap, topic)))
    await runtime.start()
    try:
        async with join_held(bootstrap, definition.group_id, f"{name}.other") as release:
            runtime.start_pipeline(definition)
            runner = runtime.runner(name)

            async def prefetched() -> bool:
                session = runner.stages[0].session
                prefetcher = session.prefetcher if session is not None else None
                read = prefetcher.records_read if prefetcher is not None else 0
                return read >= wanted

            await wait_until(prefetched, timeout_s=30)
            release.set()
            await runner.wait_for_state(PipelineState.FINISHED, timeout_s=30)
        records_in = runtime.status(name).records_in
    finally:
        await runtime.shutdown()
    taken = registry.get_sample_value("clockwork_prefetched_records_total", {"pipeline": name})
    return records_in, taken or 0.0


async def test_records_waiting_at_the_start_are_read_during_the_join_and_counted_once(
    bootstrap_servers: str,
) -> None:
    topic = unique("prefetch") + ".in"
    await create_topic(bootstrap_servers, topic, 3)
    data = [
        {"user": f"u{k}", "ts": BASE + i * 1_000 + k, "amount": i + k}
        for i in range(60)
        for k in range(6)
    ]
    await produce(
        bootstrap_servers,
        topic,
        [json_record(k % 3, f"u{k}", e) for e in data for k in [int(e["user"][1:])]],
    )
    want: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: {"n": 0, "total": 0})
    for e in data:
        acc = want[(e["user"], e["ts"] - e["ts"] % 10_000)]
        acc["n"] += 1
        acc["total"] += e["amount"]
    for prefetch in (100_000, 0):
        name = unique("prefetch")
        records_in, taken = await run(bootstrap_servers, name, topic, prefetch)
        results = await read_json(bootstrap_servers, f"{name}.out")
        assert records_in == len(data)
        # the join was held until everything was read
        assert taken == (len(data) if prefetch else 0)
        assert {(r["key"], r["window"]["start"]): r["result"] for r in results} == dict(want)
        assert len(results) == len(want)  # every window fired once


async def test_a_prefetch_smaller_than_the_input_hands_over_to_the_consumer(
    bootstrap_servers: str,
) -> None:
    topic = unique("prefetchpart") + ".in"
    await create_topic(bootstrap_servers, topic, 2)
    data = [{"user": f"u{i % 4}", "ts": BASE + i * 100, "amount": 1} for i in range(2_000)]
    await produce(
        bootstrap_servers, topic, [json_record(i % 2, e["user"], e) for i, e in enumerate(data)]
    )
    name = unique("prefetchpart")
    records_in, taken = await run(bootstrap_servers, name, topic, 200)
    results = await read_json(bootstrap_servers, f"{name}.out")
    assert records_in == len(data)
    assert taken == 200  # an even share of each partition, then the consumer
    assert sum(r["result"]["n"] for r in results) == len(data)
    windows = {(r["key"], r["window"]["start"]) for r in results}
    assert len(windows) == len(results)  # no window twice
