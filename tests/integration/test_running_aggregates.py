"""A running aggregate end to end (#50): W1's count and sum per user with no window, a
spec built as the API builds it, bounded input through the shuffle; the result topic is
an upsert stream whose records, folded by Kafka key, equal the aggregate of all input.
With exactly-once delivery too (a ``read_committed`` reader; brokers with
transactions)."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import orjson
import pytest

from service.pipeline_spec.build import build_definition
from service.pipeline_spec.models import validate_spec
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.status import PipelineState
from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    produce,
    read_topic,
    runtime_settings,
    unique,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

BASE = 1_700_000_000_000
USERS = 25


def purchases(count: int) -> list[dict[str, Any]]:
    rng = random.Random(50)
    return [
        {"user": f"u{rng.randrange(USERS)}", "ts": BASE + i * 10, "amount": rng.randrange(1, 100)}
        for i in range(count)
    ]


def spec(name: str, topic: str, delivery: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [topic], "bounded": True},
        "key": {"field": "user"},  # not the Kafka key's partitioning: shuffled
        "timestamp": {"field": "ts"},
        "operator": {
            "type": "aggregate",
            "aggregations": {
                "orders": {"fn": "count"},
                "revenue": {"fn": "sum", "field": "amount"},
            },
            "emit_interval_ms": 100,
        },
        "sink": {"topic": f"{name}.out"},
        "delivery": delivery,
    }


async def run_to_the_end(bootstrap: str, definition: Any) -> None:
    runtime = Runtime(runtime_settings(bootstrap))
    await runtime.start()
    runtime.start_pipeline(definition)
    try:
        await runtime.runner(definition.name).wait_for_state(PipelineState.FINISHED, timeout_s=60)
        status = runtime.status(definition.name)
        assert status.state is PipelineState.FINISHED, status.reason
    finally:
        await runtime.shutdown()


@pytest.mark.parametrize(
    "delivery",
    [
        "at_least_once",
        pytest.param("exactly_once", marks=pytest.mark.requires_broker("transactions")),
    ],
)
async def test_the_upserts_folded_by_key_equal_the_aggregate_of_all_input(
    bootstrap_servers: str, delivery: str
) -> None:
    name = unique("running")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 3)
    data = purchases(3000)
    # Produced round-robin, not by user: the pipeline shuffles by its key.
    await produce(
        bootstrap_servers, topic, [json_record(i % 3, None, e) for i, e in enumerate(data)]
    )
    definition = build_definition(validate_spec(spec(name, topic, delivery), ()), ())
    await run_to_the_end(bootstrap_servers, definition)

    want: dict[str, dict[str, int]] = defaultdict(lambda: {"orders": 0, "revenue": 0})
    for e in data:
        row = want[e["user"]]
        row["orders"] += 1
        row["revenue"] += e["amount"]
    isolation = "read_committed" if delivery == "exactly_once" else "read_uncommitted"
    records = await read_topic(bootstrap_servers, f"{name}.out", isolation_level=isolation)
    table: dict[str, dict[str, int]] = {}
    seqs: dict[str, list[int]] = defaultdict(list)
    partitions: dict[bytes, set[int]] = defaultdict(set)
    for record in records:  # by partition and offset: each key's in its order
        assert record.value is not None  # no TTL: nothing is deleted
        value = orjson.loads(record.value)
        assert set(value) == {"pipeline", "key", "result", "op", "seq", "id"}
        assert record.key == value["key"].encode()
        assert value["op"] == "upsert" and value["pipeline"] == name
        assert value["id"] == f"{name}|{value['key']}"
        seqs[value["key"]].append(value["seq"])
        partitions[record.key].add(record.partition)
        table[value["key"]] = value["result"]
    assert table == dict(want)
    assert all(len(found) == 1 for found in partitions.values())  # a key in one partition
    if delivery == "exactly_once":  # committed once each: 0, 1, 2, ... without a repeat
        assert all(s == list(range(len(s))) for s in seqs.values()), seqs
    else:  # no restart here either: each key's seq goes 0, 1, 2, ...
        assert all(s == list(range(len(s))) for s in seqs.values()), seqs
