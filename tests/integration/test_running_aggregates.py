"""A running aggregate end to end (#50): W1's count and sum per user with no window, a
spec built as the API builds it, bounded input through the shuffle; the result topic is
an upsert stream whose records, folded by Kafka key, equal the aggregate of all input.
With exactly-once delivery too (a ``read_committed`` reader; brokers with
transactions)."""

from __future__ import annotations

import random
import signal
from collections import Counter, defaultdict
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from service.pipeline_spec.build import build_definition
from service.pipeline_spec.models import validate_spec
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.metrics import METRICS, RuntimeMetrics
from service.runtime.observability.status import PipelineState
from tests.api.server import app_settings, eventually, running_app, wait_ready
from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    produce,
    read_json,
    read_topic,
    runtime_settings,
    unique,
    wait_until,
)
from tests.integration.replicas import Replica, replicas
from tests.integration.test_replica_loss import HALF, PARTITIONS, dataset, send

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

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


async def run_to_the_end(
    bootstrap: str,
    definition: Any,
    state_dir: str = "",
    metrics: RuntimeMetrics = METRICS,
    **settings: Any,
) -> None:
    """``definition`` run on a runtime of its own until it finished (``settings``: over
    ``runtime_settings``')."""
    runtime = Runtime(runtime_settings(bootstrap, state_dir=state_dir, **settings), metrics=metrics)
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


RUNNING = {
    "type": "aggregate",
    "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
    "emit_interval_ms": 100,
}


async def folds_to(bootstrap: str, topic: str, isolation: str, want: dict[str, Any]) -> bool:
    """Whether ``topic``'s upserts, folded by Kafka key, are ``want``."""
    try:
        records = await read_topic(bootstrap, topic, isolation_level=isolation)
    except TimeoutError:  # a transaction open for the whole read: look again
        return False
    folded = {r.key.decode(): orjson.loads(r.value)["result"] for r in records}
    return folded == want


@pytest.mark.parametrize(
    "delivery",
    [
        "at_least_once",
        pytest.param("exactly_once", marks=pytest.mark.requires_broker("transactions")),
    ],
)
async def test_unbounded_input_emits_on_the_ticks_or_at_the_checkpoints(
    bootstrap_servers: str, delivery: str
) -> None:
    """No end of input: the upserts come from the processing-time ticks (at least once)
    or from the checkpoints (exactly once), never from a final watermark; two waves of
    input, and after each the folded topic equals the aggregate so far."""
    name = unique("runningu")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    data = purchases(1000)
    data_spec = spec(name, topic, delivery)
    data_spec["source"]["bounded"] = False
    definition = build_definition(validate_spec(data_spec, ()), ())
    isolation = "read_committed" if delivery == "exactly_once" else "read_uncommitted"
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    runtime.start_pipeline(definition)
    try:
        for begin, end in ((0, 600), (600, len(data))):
            wave = data[begin:end]
            await produce(
                bootstrap_servers, topic, [json_record(i % 2, None, e) for i, e in enumerate(wave)]
            )
            seen = data[:end]
            want: dict[str, dict[str, int]] = defaultdict(lambda: {"orders": 0, "revenue": 0})
            for e in seen:
                want[e["user"]]["orders"] += 1
                want[e["user"]]["revenue"] += e["amount"]
            caught_up = partial(folds_to, bootstrap_servers, f"{name}.out", isolation, dict(want))
            await wait_until(caught_up, timeout_s=45, interval_s=0.3)
        records = await read_topic(bootstrap_servers, f"{name}.out", isolation_level=isolation)
        seqs: dict[str, list[int]] = defaultdict(list)
        for record in records:
            seqs[record.key.decode()].append(orjson.loads(record.value)["seq"])
        assert all(s == list(range(len(s))) for s in seqs.values()), seqs
        assert any(len(s) > 1 for s in seqs.values())  # the second wave updated keys
    finally:
        await runtime.shutdown()


async def committed_or_crashed(bootstrap: str, topic: str, crashing: Replica) -> bool:
    """Whether a read_committed reader sees output in ``topic``, or the worker died. Should
    the input sent so far hold both checkpoints with outputs (a slow machine, a shuffle's
    several fetches), the worker dies at the second with its transaction open, which a
    read_committed reader waits behind until the restart aborts it: one checkpoint
    committed before the crash either way."""
    if crashing.exited:
        return True
    try:
        return bool(await read_topic(bootstrap, topic, isolation_level="read_committed"))
    except TimeoutError:  # a transaction open for the whole read: look again
        return False


async def crash_before_the_commit(
    bootstrap: str,
    name: str,
    topic: str,
    tmp_path: Path,
    options: dict[str, Any],
    at: int,
    stage: str = "keyed",
) -> list[tuple[int, dict[str, Any]]]:
    """Run the worker (``options``) over two halves of the input until it kills itself at
    its ``at``-th checkpoint with outputs (1 or 2) of ``stage`` (the one that writes the
    results: ``keyed``, or ``shuffled`` behind a shuffle), after the broker took them and before
    the transaction committed; returns the whole input. The second half is sent after the
    first commit is visible when ``at`` is 2: all input could otherwise fit in the first
    checkpoint, and the second never come."""
    first, second = dataset(0, HALF // 2), dataset(HALF // 2, HALF)
    await send(bootstrap, topic, first)
    crash = {"stage": stage, "point": "after_outputs", "at": at}
    crashing = Replica(bootstrap, name, topic, tmp_path / "crash.json", crash=crash, **options)

    async def crashed() -> bool:
        return crashing.exited

    try:
        if at == 2:
            await wait_until(partial(committed_or_crashed, bootstrap, f"{name}.out", crashing), 60)
        await send(bootstrap, topic, second)
        await wait_until(crashed, timeout_s=60)
    finally:
        crashing.stop(signal.SIGKILL)
    assert crashing.process.returncode == -signal.SIGKILL
    return first + second


@pytest.mark.requires_broker("transactions")
@pytest.mark.parametrize("at", [1, 2], ids=["first", "second"])
async def test_a_crash_before_the_commit_never_shows_a_key_s_seq_twice(
    bootstrap_servers: str, tmp_path: Path, at: int
) -> None:
    """Exactly-once: the worker kills itself at its first (or second: one committed
    before it) checkpoint with outputs, after the broker took them and before the
    transaction committed. A read_uncommitted reader sees those upserts; a
    read_committed one never does, and after the restart (from the committed state,
    its seqs) sees each key's seq 0, 1, 2, ... once, folding to the aggregate of all
    input."""
    name = unique("runningeo")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    options: dict[str, Any] = {"delivery": "exactly_once", "running": RUNNING}
    data = await crash_before_the_commit(bootstrap_servers, name, topic, tmp_path, options, at)
    written = await read_json(bootstrap_servers, f"{name}.out")  # read_uncommitted
    assert written, "the crash came after outputs were written"
    want: dict[str, dict[str, int]] = defaultdict(lambda: {"n": 0, "total": 0})
    for _, e in data:
        want[e["user"]]["n"] += 1
        want[e["user"]]["total"] += e["amount"]
    with replicas(bootstrap_servers, name, topic, tmp_path, 1, **options):
        caught_up = partial(folds_to, bootstrap_servers, f"{name}.out", "read_committed", want)
        await wait_until(caught_up, timeout_s=90, interval_s=0.3)
    committed = await read_json(bootstrap_servers, f"{name}.out", "read_committed")
    seqs: dict[str, list[int]] = defaultdict(list)
    for value in committed:
        seqs[value["key"]].append(value["seq"])
    assert all(s == list(range(len(s))) for s in seqs.values()), seqs
    # the aborted upserts are in the log: a read_uncommitted reader sees some key's seq
    # twice, the committed one after the restart beside the aborted one
    everything = await read_json(bootstrap_servers, f"{name}.out")
    assert len(everything) > len(committed)
    uncommitted = Counter((value["key"], value["seq"]) for value in everything)
    assert max(uncommitted.values()) == 2


RUNNING_SQL = """CREATE SOURCE purchases (
  "user" VARCHAR, amount BIGINT, ts BIGINT
) WITH (topic = '{source}', bounded = true);
SET emit_interval = INTERVAL '200' MILLISECOND;
INSERT INTO "{sink}"
SELECT "user", COUNT(*) AS orders, SUM(amount) AS revenue FROM purchases GROUP BY "user";
"""


async def test_a_sql_group_by_without_a_window_over_the_api(bootstrap_servers: str) -> None:
    """The same pipeline as SQL (a GROUP BY without a window) created over the REST API:
    it runs to the end of its bounded input and its upserts fold to the aggregate."""
    name = unique("runningsql")
    source = f"{name}.in"
    await create_topic(bootstrap_servers, source, 2)
    data = purchases(500)
    await produce(
        bootstrap_servers, source, [json_record(i % 2, None, e) for i, e in enumerate(data)]
    )
    script = RUNNING_SQL.format(source=source, sink=f"{name}.out")
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        created = await client.post("/pipelines", json={"name": name, "sql": script})
        assert created.status_code == 201, created.text
        operator = created.json()["spec"]["operator"]
        assert operator["type"] == "aggregate" and operator["emit_interval_ms"] == 200

        async def finished() -> bool:
            status = (await client.get(f"/pipelines/{name}/status")).json()
            return bool(status["state"] == "finished")

        await eventually(finished, timeout_s=60)
    want: dict[str, dict[str, int]] = defaultdict(lambda: {"orders": 0, "revenue": 0})
    for e in data:
        want[e["user"]]["orders"] += 1
        want[e["user"]]["revenue"] += e["amount"]
    assert await folds_to(bootstrap_servers, f"{name}.out", "read_uncommitted", dict(want))
