"""Exactly-once delivery (``"delivery": "exactly_once"``): a ``read_committed`` reader of
the result topic sees every window fire exactly once -- not one duplicate record, none
missing -- whatever dies where: a replica killed mid-stream, a process killed with its
outputs written and its transaction not committed, a rebalance, either stage of a
shuffled pipeline. The replicas are worker processes (tests/integration/worker.py) on a
broker with transactions; the broker's refusal elsewhere is the API's business
(test_a_spec_asking_for_exactly_once_is_refused_by_a_broker_without_transactions).
"""

from __future__ import annotations

import signal
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry

from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.metrics import build_metrics
from tests.api.server import app_settings, running_app, wait_ready
from tests.integration.kafka_utils import (
    create_topic,
    read_json,
    runtime_settings,
    unique,
    wait_until,
    window_definition,
)
from tests.integration.replicas import Replica, replicas
from tests.integration.test_replica_loss import (
    HALF,
    PARTITIONS,
    balanced,
    dataset,
    expected,
    send,
    sentinels,
    two_checkpointed,
)
from tests.integration.worker import REPLICA_OPERATOR

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

EXACTLY_ONCE = "exactly_once"


async def committed_results(bootstrap: str, name: str) -> list[dict[str, Any]]:
    return await read_json(bootstrap, f"{name}.out", isolation_level="read_committed")


async def check_exactly_once(
    bootstrap: str, name: str, want: dict[tuple[str, int], dict[str, int]]
) -> list[dict[str, Any]]:
    """Wait until a read_committed reader sees as many results as windows, then: each
    window exactly once, with its exact result. Returns what it read."""

    async def complete() -> bool:
        try:
            return len(await committed_results(bootstrap, name)) >= len(want)
        except TimeoutError:  # a transaction stayed open for the whole read: look again
            return False

    await wait_until(complete, timeout_s=90)
    emitted = await committed_results(bootstrap, name)
    windows = Counter((r["key"], r["window"]["start"]) for r in emitted)
    assert [w for w, n in windows.items() if n > 1] == []  # no duplicate at all
    assert {(r["key"], r["window"]["start"]): r["result"] for r in emitted} == want
    assert len(emitted) == len(want)
    assert len({r["id"] for r in emitted}) == len(emitted)
    assert await read_json(bootstrap, f"{name}.dlq", isolation_level="read_committed") == []
    return emitted


@pytest.mark.requires_broker("transactions")
async def test_a_killed_replica_s_partitions_are_taken_over_with_every_window_once(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    name = unique("eosloss")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first, second = dataset(0, HALF), dataset(HALF, 2 * HALF)
    with replicas(bootstrap_servers, name, topic, tmp_path, 2, delivery=EXACTLY_ONCE) as pair:
        await balanced(pair)
        await send(bootstrap_servers, topic, first)
        await two_checkpointed(pair)
        dead, survivor = pair
        dead.stop(signal.SIGKILL)
        await send(bootstrap_servers, topic, second + sentinels())

        async def took_over() -> bool:
            return survivor.checkpointed(4, processed=False)

        await wait_until(took_over, timeout_s=60)
        await check_exactly_once(bootstrap_servers, name, expected(first + second))
        assert survivor.status()["taken_over"] == 2


@pytest.mark.requires_broker("transactions")
async def test_a_replica_joining_mid_stream_moves_partitions_with_every_window_once(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    name = unique("eosjoin")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first, second = dataset(0, HALF), dataset(HALF, 2 * HALF)
    await send(bootstrap_servers, topic, first)
    with replicas(bootstrap_servers, name, topic, tmp_path, 1, delivery=EXACTLY_ONCE) as started:
        (first_replica,) = started

        async def alone() -> bool:
            return first_replica.checkpointed(4)

        await wait_until(alone, timeout_s=60)
        newcomer = Replica(
            bootstrap_servers, name, topic, tmp_path / "new.json", delivery=EXACTLY_ONCE
        )
        started.append(newcomer)
        await two_checkpointed(started, processed=False)
        await send(bootstrap_servers, topic, second + sentinels())
        await check_exactly_once(bootstrap_servers, name, expected(first + second))


@pytest.mark.requires_broker("transactions")
@pytest.mark.parametrize("shuffle", [False, True], ids=["keyed", "shuffled"])
async def test_a_crash_with_outputs_written_and_not_committed_aborts_them(
    bootstrap_servers: str, tmp_path: Path, shuffle: bool
) -> None:
    """The process kills itself at its first checkpoint with outputs, after they were
    acknowledged by the broker and before its transaction committed (for a
    shuffled pipeline, in the stage that writes the shuffle topic). A read_uncommitted
    reader sees those outputs; a read_committed one never does, and after the restart
    sees every window once."""
    name = unique("eosabort")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    data = dataset(0, 2 * HALF)
    await send(bootstrap_servers, topic, data + sentinels())
    stage = "route" if shuffle else "keyed"
    crash = {"stage": stage, "point": "after_outputs", "at": 1}
    crashing = Replica(
        bootstrap_servers,
        name,
        topic,
        tmp_path / "crash.json",
        delivery=EXACTLY_ONCE,
        shuffle=shuffle,
        crash=crash,
    )

    async def crashed() -> bool:
        return crashing.exited

    try:
        await wait_until(crashed, timeout_s=60)
    finally:
        crashing.stop(signal.SIGKILL)
    assert crashing.process.returncode == -signal.SIGKILL
    written = await read_json(bootstrap_servers, f"{name}.out")  # read_uncommitted
    with replicas(
        bootstrap_servers, name, topic, tmp_path, 1, delivery=EXACTLY_ONCE, shuffle=shuffle
    ):
        want = expected(data)
        await check_exactly_once(bootstrap_servers, name, want)
    if not shuffle:  # what the crash had written is in the log, and was never counted
        assert written
        everything = await read_json(bootstrap_servers, f"{name}.out")
        assert len(everything) == len(want) + len(written)


def eos_spec(name: str, topic: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [topic]},
        "operator": {"type": "keyed_process", "function": "dedupe", "params": {"ttl_ms": 1000}},
        "sink": {"topic": f"{topic}.out"},
        "delivery": EXACTLY_ONCE,
    }


async def test_a_spec_asking_for_exactly_once_is_refused_by_a_broker_without_transactions(
    bootstrap_servers: str, broker_name: str
) -> None:
    """Asked of the broker, not of its name: Tansu refuses InitProducerId, Apache Kafka
    runs the probe's transaction."""
    name = unique("eosapi")
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        response = await client.post("/pipelines", json=eos_spec(name, f"{name}.in"))
        if broker_name == "tansu":
            assert response.status_code == 422
            (problem,) = response.json()["detail"]
            assert (problem["loc"], problem["type"]) == (["body", "delivery"], "broker_unsupported")
            assert "transaction" in problem["msg"]
        else:
            assert response.status_code == 201, response.text
            assert response.json()["spec"]["delivery"] == EXACTLY_ONCE
            assert (await client.delete(f"/pipelines/{name}")).status_code == 204


@pytest.mark.requires_broker("transactions")
async def test_a_partition_read_to_the_end_of_its_transactions_reports_no_lag(
    bootstrap_servers: str,
) -> None:
    """Read read_committed, a source written in transactions ends with a commit marker:
    the partition's position moves past it, and status (and the lag metric) say 0."""
    name = unique("eoslag")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, transactional_id=name)
    await producer.start()
    try:
        for round_ in range(3):
            await producer.begin_transaction()
            for i in range(10):
                ts = 1_700_000_000_000 + (round_ * 10 + i) * 1_000
                value = orjson.dumps({"user": f"u{i % 3}", "ts": ts, "amount": i})
                await (await producer.send(topic, value=value, key=b"k", partition=0))
            await producer.commit_transaction()
    finally:
        await producer.stop()
    definition = replace(
        window_definition(name, [topic], REPLICA_OPERATOR, bounded=False, key_field=None),
        delivery=EXACTLY_ONCE,
    )
    registry = CollectorRegistry()
    runtime = Runtime(runtime_settings(bootstrap_servers), metrics=build_metrics(registry))
    await runtime.start()
    runtime.start_pipeline(definition)
    try:

        async def read_to_the_end() -> bool:
            (part,) = runtime.status(name).partitions or [None]
            return part is not None and part.records_in == 30 and part.lag == 0

        await wait_until(read_to_the_end, timeout_s=60)
        (part,) = runtime.status(name).partitions
        assert part.offset == part.end_offset == 33  # 30 records and 3 commit markers
        lag = {"pipeline": name, "partition": f"{topic}/0"}
        await wait_until(
            lambda: _metric_is(registry, "clockwork_consumer_lag_records", lag, 0.0), 30
        )
    finally:
        await runtime.shutdown()


async def _metric_is(
    registry: CollectorRegistry, metric: str, labels: dict[str, str], value: float
) -> bool:
    return registry.get_sample_value(metric, labels) == value


@pytest.mark.requires_broker("transactions")
async def test_two_source_topics_take_a_killed_replica_s_partitions_over_with_every_window_once(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Partitions of the same number in two topics have their own transactions (their
    outputs never share one): two topics of 2 partitions each, a replica killed
    mid-stream, and a read_committed reader sees every window once."""
    name = unique("eostwo")
    topics = [f"{name}.a", f"{name}.b"]
    for topic in topics:
        await create_topic(bootstrap_servers, topic, 2)
    first, second = dataset(0, HALF), dataset(HALF, 2 * HALF)

    async def send_split(data: list[tuple[int, dict[str, Any]]]) -> None:
        # source partitions 0-3 of the dataset: topic a's 0 and 1, then topic b's
        for index, topic in enumerate(topics):
            part = [(p - 2 * index, e) for p, e in data if p // 2 == index]
            await send(bootstrap_servers, topic, part)

    with replicas(
        bootstrap_servers, name, ",".join(topics), tmp_path, 2, delivery=EXACTLY_ONCE
    ) as pair:

        async def two_each() -> bool:  # (topic, partition) pairs: holds() counts numbers
            return all(len(r.status()["partitions"]) == 2 for r in pair)

        await wait_until(two_each, timeout_s=45)
        await send_split(first)
        await two_checkpointed(pair)
        dead, survivor = pair
        dead.stop(signal.SIGKILL)
        await send_split(second + sentinels())

        async def took_over() -> bool:
            return survivor.checkpointed(4, processed=False)

        await wait_until(took_over, timeout_s=60)
        await check_exactly_once(bootstrap_servers, name, expected(first + second))
