"""The late and dead-letter topics of a shuffled pipeline are the user's: a record there
carries the input record's own key, value and headers, then the documented
``clockwork.*`` headers (pipeline-spec.md, "Late records and dead letters"), never the
shuffle's internal ``clockwork.shuffle`` header, on the real broker."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from service.runtime.lifecycle.manager import Runtime
from tests.integration.kafka_utils import (
    cluster_of,
    create_topic,
    read_topic,
    runtime_settings,
    unique,
    wait_until,
    window_definition,
)
from tests.integration.test_joins import BASE, BOUND_MS, INTERVAL_LEFT, join_definition
from tests.test_docs_headers import documented_headers

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

Headers = list[tuple[str, bytes]]

TUMBLING = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": 10_000},
    "aggregations": {"total": {"fn": "sum", "field": "amount"}},
}
NOT_UTF8 = b"\xff\x00\xfe"


async def send(bootstrap: str, topic: str, partition: int, value: Any, headers: Headers) -> int:
    """One record with headers; its offset."""
    producer = cluster_of(bootstrap).producer()
    await producer.start()
    try:
        sent = await producer.send_and_wait(
            topic,
            value=orjson.dumps(value),
            key=str(value.get("user") or value.get("order_id") or value["order"]).encode(),
            partition=partition,
            headers=headers,
        )
    finally:
        await producer.stop()
    return int(sent.offset)


def names(headers: Headers) -> list[str]:
    return [name for name, _ in headers]


def assert_documented(headers: Headers) -> None:
    written = {name for name in names(headers) if name.startswith("clockwork.")}
    assert written <= documented_headers(), written - documented_headers()


async def test_a_shuffled_pipeline_s_late_records_and_dead_letters_carry_the_input_s_headers(
    bootstrap_servers: str,
) -> None:
    """Two source topics (1 and 2 partitions) keyed by a payload field, so shuffled. Once
    the watermark passed a window, a record for it goes to the late topic, and a record
    whose amount ``sum`` cannot take goes to the dead-letter topic (stage 2 finds both):
    each carries the key, value and headers its producer wrote (a binary one included),
    then the clockwork.* headers, each documented, with ``clockwork.source`` naming the
    input record's topic, partition and offset, not the shuffle's."""
    name = unique("hdrs")
    first, second = f"{name}.a", f"{name}.b"
    await create_topic(bootstrap_servers, first, 1)
    await create_topic(bootstrap_servers, second, 2)
    definition = window_definition(name, [first, second], TUMBLING, bounded=False, shuffle=2)
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    runtime.start_pipeline(definition)
    try:
        ahead = BASE + 60_000
        for topic, partition in ((first, 0), (second, 0), (second, 1)):
            await send(
                bootstrap_servers,
                topic,
                partition,
                {"user": "u1", "ts": ahead, "amount": 1},
                [("trace", b"ahead")],
            )

        async def passed() -> bool:
            return (runtime.status(name).watermark or 0) >= ahead - 1

        await wait_until(passed, timeout_s=60)
        late_value = {"user": "u2", "ts": BASE, "amount": 2}
        late_headers = [("trace", b"t-late"), ("blob", NOT_UTF8)]
        await send(bootstrap_servers, second, 1, late_value, late_headers)
        bad_value = {"user": "u3", "ts": ahead + 1, "amount": "abc"}
        bad_headers = [("trace", b"t-bad")]
        bad_offset = await send(bootstrap_servers, second, 1, bad_value, bad_headers)

        async def written(topic: str) -> bool:
            return len(await read_topic(bootstrap_servers, topic)) >= 1

        await wait_until(lambda: written(f"{name}.late"), timeout_s=60)
        await wait_until(lambda: written(f"{name}.dlq"), timeout_s=60)
    finally:
        await runtime.shutdown()

    (late,) = await read_topic(bootstrap_servers, f"{name}.late")
    assert (late.key, orjson.loads(late.value)) == (b"u2", late_value)
    headers = list(late.headers)
    assert headers[:2] == late_headers  # the input's own, first and unchanged
    assert names(headers[2:]) == [
        "clockwork.pipeline",
        "clockwork.reason",
        "clockwork.watermark",
        "clockwork.timestamp",
    ]
    added = dict(headers[2:])
    assert added["clockwork.pipeline"] == name.encode()
    assert added["clockwork.reason"] == b"late"
    assert int(added["clockwork.watermark"]) >= ahead - 1
    assert added["clockwork.timestamp"] == str(BASE).encode()
    assert_documented(headers)

    (dead,) = await read_topic(bootstrap_servers, f"{name}.dlq")
    assert (dead.key, orjson.loads(dead.value)) == (b"u3", bad_value)
    headers = list(dead.headers)
    assert headers[:1] == bad_headers
    assert names(headers[1:]) == [
        "clockwork.source",
        "clockwork.pipeline",
        "clockwork.reason",
        "clockwork.error",
        "clockwork.field",
        "clockwork.function",
    ]
    added = dict(headers[1:])
    assert added["clockwork.source"] == f"{second}/1/{bad_offset}".encode()
    assert added["clockwork.reason"] == b"bad_value"
    assert (added["clockwork.field"], added["clockwork.function"]) == (b"amount", b"sum")
    assert_documented(headers)


async def test_a_join_s_late_rows_carry_their_input_s_headers_and_name_their_input(
    bootstrap_servers: str,
) -> None:
    """Both inputs of a join cross one shuffle: a late order and a late payment each
    reach the late topic with the headers their producer wrote, then the clockwork.*
    ones naming their input, and without the shuffle's."""
    name = unique("joinhdrs")
    await create_topic(bootstrap_servers, f"{name}.orders", 1)
    await create_topic(bootstrap_servers, f"{name}.payments", 1)
    operator = {**INTERVAL_LEFT, "how": "inner", "between": {"lower_ms": 0, "upper_ms": 1_000}}
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    runtime.start_pipeline(replace(join_definition(name, operator), bounded=False))
    try:
        ahead = BASE + 60_000
        await send(
            bootstrap_servers,
            f"{name}.orders",
            0,
            {"order_id": "o1", "ts": ahead, "n": 1},
            [("trace", b"order-ahead")],
        )
        await send(
            bootstrap_servers,
            f"{name}.payments",
            0,
            {"order": "o1", "paid_at": ahead, "n": 1},
            [("trace", b"payment-ahead")],
        )
        watermark = ahead - BOUND_MS - 1

        async def passed() -> bool:
            return (runtime.status(name).watermark or 0) >= watermark

        await wait_until(passed, timeout_s=60)
        await send(
            bootstrap_servers,
            f"{name}.orders",
            0,
            {"order_id": "o2", "ts": BASE, "n": 2},
            [("trace", b"order-late"), ("blob", NOT_UTF8)],
        )
        await send(
            bootstrap_servers,
            f"{name}.payments",
            0,
            {"order": "o3", "paid_at": BASE, "n": 3},
            [("trace", b"payment-late")],
        )

        async def both_late() -> bool:
            return len(await read_topic(bootstrap_servers, f"{name}.late")) >= 2

        await wait_until(both_late, timeout_s=60)
    finally:
        await runtime.shutdown()

    late = {
        dict(r.headers)["clockwork.input"]: list(r.headers)
        for r in await read_topic(bootstrap_servers, f"{name}.late")
    }
    assert set(late) == {b"orders", b"payments"}
    order, payment = late[b"orders"], late[b"payments"]
    assert order[:2] == [("trace", b"order-late"), ("blob", NOT_UTF8)]
    assert payment[:1] == [("trace", b"payment-late")]
    for headers, own in ((order, 2), (payment, 1)):
        assert names(headers[own:]) == [
            "clockwork.pipeline",
            "clockwork.reason",
            "clockwork.watermark",
            "clockwork.timestamp",
            "clockwork.input",
        ]
        assert_documented(headers)
