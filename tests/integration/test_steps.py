"""Steps and bad values end to end through the broker (issues 19 and 24)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from service.operators.steps import StepProgram
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.metrics import build_metrics
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

BASE_S = 1_700_000_000  # a minute boundary, in seconds

STEPS = [
    {"filter": "status = 'paid'"},
    {"set": {"uid": "LOWER(user)", "ts": "CAST(at_s * 1000 AS BIGINT)"}},
    {"unnest": "items", "as": "item"},
    {"set": {"amount": "item.price * 1.0"}},
]


def orders() -> list[dict[str, Any]]:
    out = []
    for i in range(40):
        items = [{"price": i % 7 + j, "qty": j + 1} for j in range(i % 3 + 1)]
        status = "test" if i % 5 == 4 else "paid"
        out.append({"user": f"U{i % 3}", "at_s": BASE_S + i * 5, "status": status, "items": items})
    return out


@pytest.mark.parametrize("shuffle", [False, True], ids=["keyed-source", "shuffled"])
async def test_filter_set_and_unnest_give_exact_windows_and_dead_letter_failures(
    bootstrap_servers: str, shuffle: bool
) -> None:
    name = unique("steps")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 1)
    data = orders()
    failing_step = {"user": "U1", "at_s": BASE_S, "status": "paid", "items": [{"price": "abc"}]}
    bad_value = {
        "user": "U2",
        "at_s": BASE_S,
        "status": "paid",
        "items": [{"price": 1, "qty": "x"}],
    }
    await produce(
        bootstrap_servers,
        topic,
        [json_record(0, None, e) for e in [*data, failing_step, bad_value]],
    )
    definition = window_definition(
        name,
        [topic],
        {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 60_000},
            "aggregations": {
                "n": {"fn": "count"},
                "revenue": {"fn": "sum", "field": "amount"},
                "units": {"fn": "sum", "field": "item.qty"},
            },
        },
        key_field="uid",
        shuffle=shuffle,
    )
    definition = dataclasses.replace(definition, steps=StepProgram(STEPS))
    registry = CollectorRegistry()
    runtime = Runtime(runtime_settings(bootstrap_servers), metrics=build_metrics(registry))
    await runtime.start()
    try:
        runtime.start_pipeline(definition)
        await runtime.runner(name).wait_for_state(PipelineState.FINISHED, timeout_s=30)
    finally:
        await runtime.shutdown()
    labels = {"pipeline": name, "field": "item.qty", "reason": "not_a_number"}
    assert registry.get_sample_value("clockwork_bad_values_total", labels) == 1

    expected: dict[tuple[str, int], dict[str, Any]] = defaultdict(
        lambda: {"n": 0, "revenue": 0.0, "units": 0}
    )
    for order in data:
        if order["status"] != "paid":
            continue
        ts = order["at_s"] * 1000
        for item in order["items"]:
            acc = expected[(order["user"].lower(), ts - ts % 60_000)]
            acc["n"] += 1
            acc["revenue"] += item["price"] * 1.0
            acc["units"] += item["qty"]
    results = await read_json(bootstrap_servers, f"{name}.out")
    got = {(r["key"], r["window"]["start"]): r["result"] for r in results}
    assert got == dict(expected)
    assert len(results) == len(expected)

    letters = await read_topic(bootstrap_servers, f"{name}.dlq")
    by_reason = {dict(r.headers)["clockwork.reason"]: dict(r.headers) for r in letters}
    assert set(by_reason) == {b"step_failed", b"bad_value"}
    assert by_reason[b"step_failed"]["clockwork.step"] == b"3"
    assert b"STRING" in by_reason[b"step_failed"]["clockwork.error"]
    assert by_reason[b"bad_value"]["clockwork.field"] == b"item.qty"
    assert by_reason[b"bad_value"]["clockwork.function"] == b"sum"
