"""The rocksdb state backend end to end (#53): a running aggregate's keys, a window's
(tumbling through the fast operator, sessions and triggers through the general one), a
join's rows (an interval join, a full outer regular join), a keyed process function's
states and a Top-N's rankings, in RocksDB behind a small write-back cache give the
memory backend's results; a restart on the same disk restores locally (fewer changelog
records read than the state holds); a corrupt local store falls back to the changelog;
kill -9 in the middle of an exactly-once checkpoint stays exact."""

from __future__ import annotations

import asyncio
import random
import signal
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from service.pipeline_spec.build import build_definition
from service.pipeline_spec.models import validate_spec
from service.runtime.consumer_group import changelog
from service.runtime.definition import PipelineDefinition, StateSettings
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.metrics import build_metrics
from service.runtime.observability.status import PipelineState
from service.runtime.partition.rocksdb_store import CHECKPOINT_FILE, DB_DIR
from service.runtime.pipeline_topics.names import changelog_topic
from tests.integration.kafka_utils import (
    cluster_of,
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
from tests.integration.replicas import Replica, replicas
from tests.integration.test_exactly_once import EXACTLY_ONCE, check_exactly_once
from tests.integration.test_joins import (
    INTERVAL_LEFT,
    interval_left,
    join_definition,
    orders_and_payments,
)
from tests.integration.test_joins import pair_of as join_pair
from tests.integration.test_outer_regular_joins import (
    crash_before_the_commit_and_restart,
    sql_answer,
)
from tests.integration.test_outer_regular_joins import folded as folded_upserts
from tests.integration.test_outer_regular_joins import orders_and_payments as outer_inputs
from tests.integration.test_replica_loss import HALF as REPLICA_HALF
from tests.integration.test_replica_loss import PARTITIONS, dataset, expected, sentinels
from tests.integration.test_replica_loss import send as send_by_user
from tests.integration.test_running_aggregates import (
    RUNNING,
    crash_before_the_commit,
    folds_to,
    run_to_the_end,
    spec,
)
from tests.integration.test_shuffle import run_to_finish
from tests.integration.test_top_n import TOP_N, N, sales
from tests.integration.test_top_n import folds_to as top_n_folds_to
from tests.integration.test_top_n import spec as top_n_spec
from tests.integration.test_top_n import top_n as top_n_of
from tests.integration.worker import REPLICA_OPERATOR

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

SMALL_CACHE = StateSettings("rocksdb", cache_bytes=4000)
"""A cache of a dozen keys: most of the state is in RocksDB, evicted and read back."""


def purchases(count: int, users: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "user": f"u{rng.randrange(users)}",
            "ts": 1_700_000_000_000 + i,
            "amount": rng.randrange(9),
        }
        for i in range(count)
    ]


def aggregate(data: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    want: dict[str, dict[str, int]] = defaultdict(lambda: {"orders": 0, "revenue": 0})
    for e in data:
        want[e["user"]]["orders"] += 1
        want[e["user"]]["revenue"] += e["amount"]
    return dict(want)


def definition_of(name: str, topic: str, bounded: bool, state: StateSettings) -> PipelineDefinition:
    data_spec = spec(name, topic, "at_least_once")
    data_spec["source"]["bounded"] = bounded
    return replace(build_definition(validate_spec(data_spec, ()), ()), state=state)


DEDUPE = {
    "type": "keyed_process",
    "function": "dedupe",
    "params": {"ttl_ms": 3_600_000, "fields": ["amount"]},
}
"""Per user, each amount forwarded once (the TTL outlasts the input): which of a user's
records with that amount comes first depends on arrival, the (user, amount) pairs do not.
Its state: map state ``seen`` per user, and a timer per forwarded record."""


def dedupe_definition(
    name: str, topic: str, bounded: bool, state: StateSettings
) -> PipelineDefinition:
    data_spec = spec(name, topic, "at_least_once")
    data_spec["source"]["bounded"] = bounded
    data_spec["operator"] = DEDUPE
    return replace(build_definition(validate_spec(data_spec, ()), ()), state=state)


def first_amounts(data: list[dict[str, Any]]) -> set[tuple[str, int]]:
    """The oracle of :data:`DEDUPE`: every (user, amount) of the input."""
    return {(e["user"], e["amount"]) for e in data}


async def forwarded(bootstrap: str, topic: str) -> list[tuple[str, int]]:
    """The (user, amount) of each output of :data:`DEDUPE`, once per id."""
    by_id = {v["id"]: (v["key"], v["value"]["amount"]) for v in await read_json(bootstrap, topic)}
    return list(by_id.values())


async def forwards(bootstrap: str, topic: str, want: set[tuple[str, int]]) -> bool:
    """Whether ``topic`` holds exactly one output per pair of ``want``."""
    got = await forwarded(bootstrap, topic)
    return len(got) == len(want) and set(got) == want


async def folded(bootstrap: str, topic: str) -> tuple[dict[str, Any], dict[str, list[int]]]:
    table: dict[str, Any] = {}
    seqs: dict[str, list[int]] = defaultdict(list)
    for record in await read_topic(bootstrap, topic):
        value = orjson.loads(record.value)
        table[value["key"]] = value["result"]
        seqs[value["key"]].append(value["seq"])
    return table, seqs


async def test_rocksdb_results_equal_the_memory_backend_s(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    data = purchases(3000, 300, 53)
    tables = []
    for backend in (StateSettings("memory"), SMALL_CACHE):
        name = unique("rocks")
        topic = f"{name}.in"
        await create_topic(bootstrap_servers, topic, 3)
        await produce(
            bootstrap_servers, topic, [json_record(i % 3, None, e) for i, e in enumerate(data)]
        )
        definition = definition_of(name, topic, True, backend)
        await run_to_the_end(bootstrap_servers, definition, state_dir=str(tmp_path))
        table, seqs = await folded(bootstrap_servers, f"{name}.out")
        assert all(s == list(range(len(s))) for s in seqs.values()), seqs
        tables.append(table)
    assert tables[0] == tables[1] == aggregate(data)


async def test_a_process_function_with_rocksdb_gives_the_memory_backend_s_outputs(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    data = purchases(3000, 300, 57)
    outputs = []
    for backend in (StateSettings("memory"), SMALL_CACHE):
        name = unique("rocksproc")
        topic = f"{name}.in"
        await create_topic(bootstrap_servers, topic, 3)
        await produce(
            bootstrap_servers, topic, [json_record(i % 3, None, e) for i, e in enumerate(data)]
        )
        definition = dedupe_definition(name, topic, True, backend)
        await run_to_the_end(bootstrap_servers, definition, state_dir=str(tmp_path))
        got = await forwarded(bootstrap_servers, f"{name}.out")
        assert len(got) == len(set(got))  # one output per pair
        outputs.append(set(got))
    assert outputs[0] == outputs[1] == first_amounts(data)


async def test_a_top_n_with_rocksdb_gives_the_memory_backend_s_rank_rows(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """A Top-N with a row key (every row of a category kept), over both backends."""
    data = sales(3000)
    tables = []
    for backend in (StateSettings("memory"), SMALL_CACHE):
        name = unique("rockstopn")
        topic = f"{name}.in"
        await create_topic(bootstrap_servers, topic, 3)
        records = [json_record(int(e["category"][1:]) % 3, e["category"], e) for e in data]
        await produce(bootstrap_servers, topic, records)
        data_spec = top_n_spec(name, topic, "at_least_once", keyed=True)
        definition = replace(build_definition(validate_spec(data_spec, ()), ()), state=backend)
        await run_to_the_end(bootstrap_servers, definition, state_dir=str(tmp_path))
        table: dict[str, Any] = {}
        seqs: dict[str, list[int]] = defaultdict(list)
        for record in await read_topic(bootstrap_servers, f"{name}.out"):
            key = record.key.decode()
            if record.value is None:
                table.pop(key, None)
                continue
            value = orjson.loads(record.value)
            table[key] = value["result"]["row"]
            seqs[key].append(value["seq"])
        assert all(s == list(range(len(s))) for s in seqs.values()), seqs
        tables.append(table)
    assert tables[0] == tables[1] == top_n_of(data, keyed=True)


def restored(registry: CollectorRegistry, name: str, metric: str, source: str) -> float:
    value = registry.get_sample_value(
        f"clockwork_{metric}_total", {"pipeline": name, "source": source}
    )
    return value or 0.0


def local_positions(directory: Path) -> dict[int, int]:
    """Each store's checkpoint file's position (-1: none), by partition."""
    out = {}
    for store in directory.glob("*/*"):
        partition = int(store.name.rpartition("-")[2])
        try:
            out[partition] = orjson.loads((store / CHECKPOINT_FILE).read_bytes())["position"]
        except (FileNotFoundError, orjson.JSONDecodeError):
            out[partition] = -1
    return out


async def changelog_ends(bootstrap: str, changelog: str, partitions: int = 2) -> dict[int, int]:
    consumer = cluster_of(bootstrap).consumer(group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(changelog, p) for p in range(partitions)]
        ends = {tp.partition: offset for tp, offset in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()
    return ends


async def checkpointed_past(ends: dict[int, int], directory: Path, stores: int = 2) -> None:
    """Wait for a local checkpoint of every store (``stores`` of them) written after
    ``ends``."""

    async def past() -> bool:
        positions = local_positions(directory)
        return len(positions) == stores and all(positions[p] >= ends[p] for p in positions)

    await wait_until(past, timeout_s=30)


def corrupt_stores(directory: Path) -> None:
    """Overwrite every store's CURRENT and MANIFEST files."""
    for store in directory.glob(f"*/*/{DB_DIR}"):
        for path in store.iterdir():
            if path.name.startswith(("CURRENT", "MANIFEST")):
                path.write_bytes(b"not a manifest")


@dataclass(frozen=True)
class Workload:
    """A pipeline :func:`run_and_restart` runs: how it is defined, whether its output is
    right for the input so far, and the keys its state holds after it."""

    define: Callable[[str, str, bool, StateSettings], PipelineDefinition]
    caught_up: Callable[[str, str, list[dict[str, Any]]], Awaitable[bool]]
    keys: Callable[[list[dict[str, Any]]], int]


async def aggregated(bootstrap: str, out: str, data: list[dict[str, Any]]) -> bool:
    return await folds_to(bootstrap, out, "read_uncommitted", aggregate(data))


async def deduplicated(bootstrap: str, out: str, data: list[dict[str, Any]]) -> bool:
    return await forwards(bootstrap, out, first_amounts(data))


RUNNING_WORKLOAD = Workload(definition_of, aggregated, lambda data: len(aggregate(data)))
DEDUPE_WORKLOAD = Workload(
    dedupe_definition,
    deduplicated,
    # each user's map state, and its timers in the map of what a key keeps beside them
    lambda data: 2 * len({e["user"] for e in data}),
)


async def run_and_restart(
    bootstrap: str, tmp_path: Path, corrupt: bool, workload: Workload = RUNNING_WORKLOAD
) -> tuple[CollectorRegistry, str, int]:
    """Two waves into a rocksdb pipeline (the second touching few keys), a graceful stop,
    maybe a corrupted store, a restart on the same state directory and a third wave;
    the results checked after each wave. The restart's registry, the name, the keys."""
    name = unique("rockslocal")
    topic = f"{name}.in"
    await create_topic(bootstrap, topic, 2)
    definition = workload.define(name, topic, False, SMALL_CACHE)
    waves = [
        purchases(4000, 1000, 1),
        purchases(40, 20, 2),
        purchases(40, 20, 3),
        purchases(50, 1000, 4),
    ]
    out = f"{name}.out"

    async def send(upto: int) -> None:
        wave = waves[upto]
        await produce(bootstrap, topic, [json_record(i % 2, None, e) for i, e in enumerate(wave)])
        data = [e for w in waves[: upto + 1] for e in w]
        await wait_until(partial(workload.caught_up, bootstrap, out, data), timeout_s=60)

    settings = runtime_settings(bootstrap, state_dir=str(tmp_path))
    first = Runtime(settings)
    await first.start()
    try:
        first.start_pipeline(definition)
        # The first wave touches every key; two small ones after it, each checkpointed
        # after the changelog's end before it: the second's checkpoint, the last before
        # the stop, started after every change of the first wave was checkpointed.
        await send(0)
        for wave in (1, 2):
            ends = await changelog_ends(bootstrap, definition.changelog_topic)
            await send(wave)
            await checkpointed_past(ends, tmp_path)
    finally:
        await first.shutdown()  # graceful: its last checkpoint names the changelog's end
    keys = workload.keys(waves[0])
    if corrupt:
        corrupt_stores(tmp_path)
    registry = CollectorRegistry()
    second = Runtime(settings, metrics=build_metrics(registry))
    await second.start()
    try:
        second.start_pipeline(definition)
        await send(3)
    finally:
        await second.shutdown()
    if workload is RUNNING_WORKLOAD:
        _, seqs = await folded(bootstrap, out)
        assert all(s == list(range(len(s))) for s in seqs.values()), seqs
    return registry, name, keys


@pytest.mark.parametrize(
    "workload", [RUNNING_WORKLOAD, DEDUPE_WORKLOAD], ids=["running-aggregate", "process"]
)
async def test_a_restart_on_the_same_disk_restores_locally(
    bootstrap_servers: str, tmp_path: Path, workload: Workload
) -> None:
    registry, name, keys = await run_and_restart(
        bootstrap_servers, tmp_path, corrupt=False, workload=workload
    )
    assert restored(registry, name, "partitions_restored", "local") == 2
    assert restored(registry, name, "state_restored", "local") == keys
    assert restored(registry, name, "state_restored", "changelog") < keys / 10


async def test_a_corrupt_local_store_is_rebuilt_from_the_changelog(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    registry, name, keys = await run_and_restart(bootstrap_servers, tmp_path, corrupt=True)
    assert restored(registry, name, "partitions_restored", "local") == 0
    assert restored(registry, name, "state_restored", "local") == 0
    assert restored(registry, name, "state_restored", "changelog") >= keys


@pytest.mark.requires_broker("transactions")
@pytest.mark.parametrize("at", [1, 2], ids=["first", "second"])
async def test_a_kill_in_the_middle_of_a_checkpoint_stays_exact_with_rocksdb(
    bootstrap_servers: str, tmp_path: Path, at: int
) -> None:
    """test_running_aggregates' crash before the commit, the keys in RocksDB (a small
    cache), restarted on the same state directory: each key's seq 0, 1, 2, ... once,
    folding to the aggregate of all input."""
    name = unique("rockseo")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    state = {"backend": "rocksdb", "cache_bytes": 4000, "dir": str(tmp_path / "state")}
    options: dict[str, Any] = {"delivery": "exactly_once", "running": RUNNING, "state": state}
    data = await crash_before_the_commit(bootstrap_servers, name, topic, tmp_path, options, at)
    want: dict[str, dict[str, int]] = defaultdict(lambda: {"n": 0, "total": 0})
    for _, e in data:
        want[e["user"]]["n"] += 1
        want[e["user"]]["total"] += e["amount"]
    with replicas(bootstrap_servers, name, topic, tmp_path, 1, **options):
        caught_up = partial(folds_to, bootstrap_servers, f"{name}.out", "read_committed", want)
        await wait_until(caught_up, timeout_s=90, interval_s=0.3)
    seqs: dict[str, list[int]] = defaultdict(list)
    for value in await read_json(bootstrap_servers, f"{name}.out", "read_committed"):
        seqs[value["key"]].append(value["seq"])
    assert all(s == list(range(len(s))) for s in seqs.values()), seqs


@pytest.mark.requires_broker("transactions")
async def test_a_kill_in_the_middle_of_a_checkpoint_stays_exact_with_a_top_n_in_rocksdb(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """test_top_n's crash before the commit (at the second checkpoint with outputs, one
    committed before it), the rankings in RocksDB (a small cache), restarted on the same
    state directory: each rank row's seq 0, 1, 2, ... once, folding to the top N of all
    input."""
    name = unique("rockstopneo")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    state = {"backend": "rocksdb", "cache_bytes": 4000, "dir": str(tmp_path / "state")}
    options: dict[str, Any] = {"delivery": "exactly_once", "top_n": TOP_N, "state": state}
    data = await crash_before_the_commit(bootstrap_servers, name, topic, tmp_path, options, 2)
    held: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, e in data:
        held[e["user"]].append(e)
    want = {
        f"{user}|{rank}": row
        for user, rows in held.items()
        for rank, row in enumerate(sorted(rows, key=lambda r: -r["ts"])[:N], start=1)
    }  # sorted() is stable: ties stay in arrival order
    with replicas(bootstrap_servers, name, topic, tmp_path, 1, **options):
        caught_up = partial(
            top_n_folds_to, bootstrap_servers, f"{name}.out", "read_committed", want
        )
        await wait_until(caught_up, timeout_s=90, interval_s=0.3)
    seqs: dict[str, list[int]] = defaultdict(list)
    for value in await read_json(bootstrap_servers, f"{name}.out", "read_committed"):
        seqs[value["key"]].append(value["seq"])
    assert all(s == list(range(len(s))) for s in seqs.values()), seqs


async def test_a_partition_handed_to_another_replica_restores_into_its_store(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Two replicas, each its own state directory: the second one's arrival moves
    partitions, which it rebuilds from the changelog into its RocksDB; the results stay
    exact, each key's seq 0, 1, 2, ..."""
    name = unique("rocksmove")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    definition = definition_of(name, topic, False, SMALL_CACHE)
    waves = [purchases(2000, 400, 5), purchases(2000, 400, 6)]
    out = f"{name}.out"
    registry = CollectorRegistry()
    a = Runtime(runtime_settings(bootstrap_servers, state_dir=str(tmp_path / "a")))
    b = Runtime(
        runtime_settings(bootstrap_servers, state_dir=str(tmp_path / "b")),
        metrics=build_metrics(registry),
    )
    await a.start()
    await b.start()
    try:
        a.start_pipeline(definition)
        for wave, runtime in enumerate((a, b)):
            if runtime is b:
                b.start_pipeline(definition)

                async def moved() -> bool:
                    return restored(registry, name, "partitions_restored", "changelog") > 0

                await wait_until(moved, timeout_s=60)
            await produce(
                bootstrap_servers,
                topic,
                [json_record(i % 2, None, e) for i, e in enumerate(waves[wave])],
            )
            want = aggregate([e for w in waves[: wave + 1] for e in w])
            await wait_until(
                partial(folds_to, bootstrap_servers, out, "read_uncommitted", want),
                timeout_s=60,
            )
    finally:
        await b.shutdown()
        await a.shutdown()
    assert restored(registry, name, "state_restored", "changelog") > 0
    _, seqs = await folded(bootstrap_servers, out)
    assert all(s == list(range(len(s))) for s in seqs.values()), seqs


def stores_in(directory: Path) -> int:
    """The RocksDBs under a state directory."""
    return len(list(directory.glob(f"*/*/{DB_DIR}")))


SPARSE_OPERATORS = {
    "aggregate": {
        "type": "aggregate",
        "aggregations": {"orders": {"fn": "count"}},
        "state_ttl_ms": 3_600_000,
    },
    "top_n": {"type": "top_n", "n": 2, "order_by": {"field": "amount", "desc": True}},
    "keyed_process": DEDUPE,
}
"""Each operator kind the rocksdb backend holds beside the window and the join."""


async def sparse_results(bootstrap: str, topic: str, kind: str) -> dict[Any, Any]:
    """What the run of :data:`SPARSE_OPERATORS`' ``kind`` emitted, as compared: each
    upserted key's last result (a delete removes it), or the process function's
    forwarded (user, amount) pairs."""
    if kind == "keyed_process":
        return {pair: True for pair in await forwarded(bootstrap, topic)}
    table: dict[Any, Any] = {}
    for record in await read_topic(bootstrap, topic):
        if record.value is None:
            table.pop(record.key, None)
        else:
            table[record.key] = orjson.loads(record.value)["result"]
    return table


@pytest.mark.parametrize("kind", list(SPARSE_OPERATORS))
async def test_a_rocksdb_pipeline_makes_stores_only_for_partitions_with_state(
    bootstrap_servers: str, tmp_path: Path, kind: str
) -> None:
    """Three users' records through a shuffle of 500 partitions: a RocksDB is made for
    the (at most three) partitions that hold a key, none for the others, whose restore
    and checkpoints write nothing; the results are the memory backend's."""
    users = ["u1", "u2", "u3"]
    data = [{"user": users[i % 3], "amount": i, "ts": 1_000 + i} for i in range(60)]
    outputs = []
    for backend in (StateSettings("memory"), SMALL_CACHE):
        name = unique("rockssparse")
        topic = f"{name}.in"
        await create_topic(bootstrap_servers, topic, 2)
        await produce(
            bootstrap_servers, topic, [json_record(i % 2, None, e) for i, e in enumerate(data)]
        )
        data_spec = spec(name, topic, "at_least_once")
        data_spec["key"]["shuffle_partitions"] = 500
        data_spec["operator"] = SPARSE_OPERATORS[kind]
        built = build_definition(validate_spec(data_spec, ()), ())
        state_dir = tmp_path / backend.backend
        definition = replace(built, state=backend)
        await run_to_the_end(bootstrap_servers, definition, state_dir=str(state_dir))
        outputs.append(await sparse_results(bootstrap_servers, f"{name}.out", kind))
    assert outputs[0] == outputs[1] != {}
    assert 1 <= stores_in(tmp_path / "rocksdb") <= len(users)
    assert stores_in(tmp_path / "memory") == 0


JOINS = {
    "interval_left": INTERVAL_LEFT,
    "regular_full": {"type": "join", "kind": "regular", "how": "full"},
}
"""The joins run on both backends: test_joins.py's interval left join, and
test_outer_regular_joins.py's full outer regular join (an upsert stream)."""


async def join_results(
    bootstrap: str, tmp_path: Path, operator: dict[str, Any], state: StateSettings
) -> tuple[Any, Any]:
    """A bounded run of the join with ``state``: what it emitted as compared (an interval
    join's rows with their times; a regular join's upserts folded), and the reference."""
    name = unique("rocksjoin")
    interval = operator["kind"] == "interval"
    orders, payments = orders_and_payments(7) if interval else outer_inputs(3)
    await create_topic(bootstrap, f"{name}.orders", 2)
    await create_topic(bootstrap, f"{name}.payments", 3)
    await produce(
        bootstrap, f"{name}.orders", [json_record(o["n"] % 2, o["order_id"], o) for o in orders]
    )
    await produce(
        bootstrap, f"{name}.payments", [json_record(p["n"] % 3, p["order"], p) for p in payments]
    )
    definition = replace(join_definition(name, operator), state=state)
    await run_to_finish(bootstrap, definition, state_dir=str(tmp_path))
    assert await read_topic(bootstrap, f"{name}.late") == []
    assert await read_topic(bootstrap, f"{name}.dlq") == []
    if interval:
        rows = await read_json(bootstrap, f"{name}.out")
        return {(join_pair(row), row["ts"]) for row in rows}, interval_left(orders, payments)
    return folded_upserts(await read_topic(bootstrap, f"{name}.out")), sql_answer(
        orders, payments, "full"
    )


@pytest.mark.parametrize("kind", list(JOINS))
async def test_a_join_with_rocksdb_gives_the_memory_backend_s_results(
    bootstrap_servers: str, tmp_path: Path, kind: str
) -> None:
    """The rows of each side in RocksDB behind a cache of a few rows per partition: most
    are evicted and read back, and the watermark's pruning finds them there."""
    operator = JOINS[kind]
    memory, want = await join_results(
        bootstrap_servers, tmp_path, operator, StateSettings("memory")
    )
    rocks, _ = await join_results(bootstrap_servers, tmp_path, operator, SMALL_CACHE)
    assert rocks == memory
    assert ({pair for pair, _ in rocks} if kind == "interval_left" else rocks) == want
    assert stores_in(tmp_path) == 3  # a RocksDB per shuffle partition


INTERVAL_INNER = {
    "type": "join",
    "kind": "interval",
    "how": "inner",
    "between": {"lower_ms": 0, "upper_ms": 3_600_000},
}
"""Orders kept an hour: every order is still held when the test restarts the join."""


def interval_inner(
    orders: list[dict[str, Any]], payments: list[dict[str, Any]]
) -> set[tuple[str, int | None, int | None]]:
    return {
        (o["order_id"], o["n"], p["n"])
        for o in orders
        for p in payments
        if p["order"] == o["order_id"] and o["ts"] <= p["paid_at"] <= o["ts"] + 3_600_000
    }


async def test_a_join_restarted_on_the_same_disk_restores_locally(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """An interval join holding every order: a big wave, two small ones (each checkpointed
    after the changelog's end before it), a graceful stop, a restart on the same state
    directory and the last wave, whose payments meet orders of the first. The three
    shuffle partitions restore locally, reading far fewer changelog records than the
    keys their stores hold, and the rows are the reference's."""
    name = unique("rocksjoinlocal")
    orders, payments = orders_and_payments(13)
    await create_topic(bootstrap_servers, f"{name}.orders", 2)
    await create_topic(bootstrap_servers, f"{name}.payments", 3)
    definition = replace(join_definition(name, INTERVAL_INNER), bounded=False, state=SMALL_CACHE)
    cuts = [0, 400, 410, 420, len(orders)]
    paid = [len(payments) * cut // len(orders) for cut in cuts]
    out = f"{name}.out"

    async def send(wave: int) -> None:
        sent_orders, sent_payments = orders[: cuts[wave + 1]], payments[: paid[wave + 1]]
        wave_orders = orders[cuts[wave] : cuts[wave + 1]]
        wave_payments = payments[paid[wave] : paid[wave + 1]]
        await produce(
            bootstrap_servers,
            f"{name}.orders",
            [json_record(o["n"] % 2, o["order_id"], o) for o in wave_orders],
        )
        await produce(
            bootstrap_servers,
            f"{name}.payments",
            [json_record(p["n"] % 3, p["order"], p) for p in wave_payments],
        )
        want = interval_inner(sent_orders, sent_payments)

        async def joined() -> bool:
            return {join_pair(row) for row in await read_json(bootstrap_servers, out)} == want

        await wait_until(joined, timeout_s=60)

    changelog = definition.changelog_topic
    settings = runtime_settings(bootstrap_servers, state_dir=str(tmp_path))
    first = Runtime(settings)
    await first.start()
    try:
        first.start_pipeline(definition)
        await send(0)
        for wave in (1, 2):
            ends = await changelog_ends(bootstrap_servers, changelog, 3)
            await send(wave)
            await checkpointed_past(ends, tmp_path, 3)
    finally:
        await first.shutdown()
    registry = CollectorRegistry()
    second = Runtime(settings, metrics=build_metrics(registry))
    await second.start()
    try:
        second.start_pipeline(definition)
        await send(3)
    finally:
        await second.shutdown()
    assert await read_topic(bootstrap_servers, f"{name}.late") == []
    assert restored(registry, name, "partitions_restored", "local") == 3
    keys = restored(registry, name, "state_restored", "local")
    assert keys >= len({o["order_id"] for o in orders[: cuts[3]]})
    assert restored(registry, name, "state_restored", "changelog") < keys / 4


@pytest.mark.requires_broker("transactions")
@pytest.mark.parametrize("at", [1, 2], ids=["first", "second"])
async def test_a_kill_in_the_middle_of_a_join_s_checkpoint_stays_exact_with_rocksdb(
    bootstrap_servers: str, tmp_path: Path, at: int
) -> None:
    """test_outer_regular_joins' crash before the commit (a full outer regular join,
    exactly-once, kill -9 after the outputs and before the commit), its rows in RocksDB
    behind a small cache, restarted on the same state directory: a read_committed reader
    folds the output to the SQL answer and sees no row's seq twice."""
    state = {"backend": "rocksdb", "cache_bytes": 4000, "dir": str(tmp_path / "state")}
    await crash_before_the_commit_and_restart(bootstrap_servers, tmp_path, at, {"state": state})


# -- window operators (the fast path and the general one) -------------------------------

WINDOW_BASE = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000
"""An hour's start: every record of the restart test is in the hour's window."""
TUMBLING = {"type": "tumbling", "size_ms": 1000}
SESSION = {"type": "session", "gap_ms": 400}
COUNT_SUM = {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}}


def window_spec(name: str, topic: str, assigner: dict[str, Any]) -> dict[str, Any]:
    """A window of ``assigner`` over ``topic``'s bounded input, keyed by ``user`` through
    the shuffle, as the API builds it."""
    return {
        "name": name,
        "source": {"topics": [topic], "bounded": True},
        "key": {"field": "user"},
        "timestamp": {"field": "ts"},
        "operator": {"type": "window", "assigner": assigner, "aggregations": COUNT_SUM},
        "sink": {"topic": f"{name}.out"},
    }


def window_oracle(
    data: list[dict[str, Any]], assigner: dict[str, Any]
) -> dict[tuple[str, int, int], dict[str, int]]:
    """Each (key, start, end) window's count and sum: tumbling windows by start, a
    session extended by each next record at or before its end."""
    by_user: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in data:
        by_user[e["user"]].append(e)
    out: dict[tuple[str, int, int], dict[str, int]] = {}
    for user, events in by_user.items():
        events.sort(key=lambda e: e["ts"])
        windows: list[tuple[int, int, list[int]]] = []
        for e in events:
            ts = e["ts"]
            if assigner["type"] == "tumbling":
                size = assigner["size_ms"]
                start = ts - ts % size
                if windows and windows[-1][0] == start:
                    windows[-1][2].append(e["amount"])
                else:
                    windows.append((start, start + size, [e["amount"]]))
            elif windows and ts <= windows[-1][1]:  # windows that touch merge (Flink's)
                start, _, amounts = windows[-1]
                windows[-1] = (start, max(windows[-1][1], ts + assigner["gap_ms"]), amounts)
                amounts.append(e["amount"])
            else:
                windows.append((ts, ts + assigner["gap_ms"], [e["amount"]]))
        for start, end, amounts in windows:
            out[(user, start, end)] = {"n": len(amounts), "total": sum(amounts)}
    return out


async def window_results(bootstrap: str, topic: str) -> dict[tuple[str, int, int], Any]:
    """The newest result of each window (by id), as ``(key, start, end) -> result``."""
    final = latest_by_id(await read_json(bootstrap, topic))
    return {
        (r["key"], r["window"]["start"], r["window"]["end"]): r["result"] for r in final.values()
    }


@pytest.mark.parametrize("assigner", [TUMBLING, SESSION], ids=["tumbling", "session"])
async def test_windows_on_rocksdb_give_the_memory_backend_s_results(
    bootstrap_servers: str, tmp_path: Path, assigner: dict[str, Any]
) -> None:
    """A tumbling window (the fast operator) and a session window (the general one,
    merging) over the same bounded input, through the shuffle: with the keys in RocksDB
    behind a cache of a dozen entries, the results are the memory backend's, and the
    oracle's."""
    data = [dict(e, ts=WINDOW_BASE + 3 * i) for i, e in enumerate(purchases(3000, 150, 54))]
    results = []
    for backend in (StateSettings("memory"), SMALL_CACHE):
        name = unique("rockswin")
        topic = f"{name}.in"
        await create_topic(bootstrap_servers, topic, 3)
        await produce(
            bootstrap_servers, topic, [json_record(i % 3, None, e) for i, e in enumerate(data)]
        )
        built = build_definition(validate_spec(window_spec(name, topic, assigner), ()), ())
        definition = replace(built, state=backend)
        await run_to_the_end(bootstrap_servers, definition, state_dir=str(tmp_path))
        results.append(await window_results(bootstrap_servers, f"{name}.out"))
    assert results[0] == results[1] == window_oracle(data, assigner)


async def processed(runtime: Runtime, name: str, sent: int) -> bool:
    """Whether the pipeline's partitions here have read ``sent`` records in all."""
    status = runtime.status(name)
    assert status.reason is None, status.reason
    return sum(p.offset or 0 for p in status.partitions) >= sent


@pytest.mark.parametrize("assigner", [TUMBLING, SESSION], ids=["tumbling", "session"])
async def test_a_window_pipeline_restarted_on_the_same_disk_restores_locally(
    bootstrap_servers: str, tmp_path: Path, assigner: dict[str, Any]
) -> None:
    """run_and_restart's waves into a window whose windows stay open (all of an hour, or
    sessions with an hour's gap), a graceful stop, a restart on the same state directory:
    the stores are kept and only the changelog's tail is read; then one record per
    partition far ahead closes every window, and the results are the oracle's."""
    name = unique("rockswinlocal")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    wide = {"type": "tumbling", "size_ms": 3_600_000}
    if assigner["type"] == "session":
        wide = {"type": "session", "gap_ms": 3_600_000}
    operator = {"type": "window", "assigner": wide, "aggregations": COUNT_SUM}
    unbounded = window_definition(name, [topic], operator, bounded=False, late=False)
    definition = replace(unbounded, state=SMALL_CACHE)
    waves = [
        purchases(4000, 1000, 1),
        purchases(40, 20, 2),
        purchases(40, 20, 3),
        purchases(50, 1000, 4),
    ]
    for wave, events in enumerate(waves):  # in the hour, in arrival order
        for i, e in enumerate(events):
            e["ts"] = WINDOW_BASE + wave * 10_000 + i
    sent = 0

    async def send(runtime: Runtime, events: list[dict[str, Any]]) -> None:
        nonlocal sent
        # A user's records all in one partition: its window's state is in one place.
        await produce(
            bootstrap_servers,
            topic,
            [json_record(int(e["user"][1:]) % 2, e["user"], e) for e in events],
        )
        sent += len(events)
        await wait_until(partial(processed, runtime, name, sent), timeout_s=60)

    settings = runtime_settings(bootstrap_servers, state_dir=str(tmp_path))
    first = Runtime(settings)
    await first.start()
    try:
        first.start_pipeline(definition)
        await send(first, waves[0])
        for wave in (1, 2):  # each checkpointed after the changelog's end before it
            ends = await changelog_ends(bootstrap_servers, definition.changelog_topic)
            await send(first, waves[wave])
            await checkpointed_past(ends, tmp_path)
    finally:
        await first.shutdown()
    keys = len({e["user"] for e in waves[0]})
    registry = CollectorRegistry()
    second = Runtime(settings, metrics=build_metrics(registry))
    await second.start()
    try:
        second.start_pipeline(definition)
        await send(second, waves[3])
        ahead = [(p, {"user": f"s{p}", "ts": WINDOW_BASE + 10**8, "amount": 0}) for p in (0, 1)]
        await produce(bootstrap_servers, topic, [json_record(p, e["user"], e) for p, e in ahead])
        data = [e for w in waves for e in w]
        want = window_oracle(data, wide)

        async def closed() -> bool:
            return await window_results(bootstrap_servers, f"{name}.out") == want

        await wait_until(closed, timeout_s=60)
    finally:
        await second.shutdown()
    assert restored(registry, name, "partitions_restored", "local") == 2
    assert restored(registry, name, "state_restored", "local") >= keys
    assert restored(registry, name, "state_restored", "changelog") < keys / 10


@pytest.mark.requires_broker("transactions")
@pytest.mark.parametrize(
    "trigger", [None, {"type": "event_time", "purge": True}], ids=["fast", "general"]
)
async def test_a_kill_in_the_middle_of_a_window_checkpoint_stays_exact_with_rocksdb(
    bootstrap_servers: str, tmp_path: Path, trigger: dict[str, Any] | None
) -> None:
    """test_exactly_once's crash with outputs written and not committed, the windows'
    keys in RocksDB (a small cache) and the restart on the same state directory: every
    window once, exact. The replicas' tumbling window as it is (the fast operator), and
    with a purging event-time trigger (the same results from the general operator)."""
    name = unique("rockswineo")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    data = dataset(0, 2 * REPLICA_HALF)
    await send_by_user(bootstrap_servers, topic, data + sentinels())
    operator = dict(REPLICA_OPERATOR)
    if trigger is not None:
        operator["trigger"] = trigger
    options: dict[str, Any] = {
        "delivery": EXACTLY_ONCE,
        "operator": operator,
        "state": {"backend": "rocksdb", "cache_bytes": 4000, "dir": str(tmp_path / "state")},
    }
    crash = {"stage": "keyed", "point": "after_outputs", "at": 1}
    path = tmp_path / "crash.json"
    crashing = Replica(bootstrap_servers, name, topic, path, crash=crash, **options)

    async def crashed() -> bool:
        return crashing.exited

    try:
        await wait_until(crashed, timeout_s=60)
    finally:
        crashing.stop(signal.SIGKILL)
    assert crashing.process.returncode == -signal.SIGKILL
    with replicas(bootstrap_servers, name, topic, tmp_path, 1, **options):
        await check_exactly_once(bootstrap_servers, name, expected(data))


@pytest.mark.requires_broker("transactions")
async def test_a_killed_session_pipeline_restores_its_timers_locally_and_stays_exact(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Sessions of 1,200 keys (an hour's gap: all open), exactly-once, their state and
    event-time timers in RocksDB behind a small cache; kill -9 right after a checkpoint
    that followed a few keys' records, then a restart on the same state directory: the
    stores are kept and only the changelog's tail is read (fewer records than a tenth of
    the keys), and once records far ahead close every session, each is emitted once,
    exact."""
    name = unique("rockssesskill")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    users = 300  # per partition
    wide = {"type": "session", "gap_ms": 3_600_000}

    def wave(start: int, stop: int, every: int) -> list[tuple[int, dict[str, Any]]]:
        return [
            (p, {"user": f"u{p}-{i % users}", "ts": WINDOW_BASE + i, "amount": i % 7})
            for p in range(PARTITIONS)
            for i in range(start, stop, every)
        ]

    first, second = wave(0, 2 * users, 1), wave(2 * users + 1, 3 * users, users // 10)
    state = {"backend": "rocksdb", "cache_bytes": 4000, "dir": str(tmp_path / "state")}
    operator = {"type": "window", "assigner": wide, "aggregations": COUNT_SUM}
    options: dict[str, Any] = {"delivery": EXACTLY_ONCE, "operator": operator, "state": state}
    armed = tmp_path / "armed"
    crash = {"stage": "keyed", "point": "after_commit", "at": 1, "armed_by": str(armed)}
    crashing = Replica(
        bootstrap_servers, name, topic, tmp_path / "crash.json", crash=crash, **options
    )
    try:
        await send_by_user(bootstrap_servers, topic, first)

        async def caught_up() -> bool:
            parts = crashing.status()["partitions"] if crashing.path.exists() else []
            return len(parts) == PARTITIONS and all(
                p["offset"] == 2 * users and p["last_checkpoint_ms"] is not None for p in parts
            )

        await wait_until(caught_up, timeout_s=60)
        # One record more per partition, then a local checkpoint past it: every change
        # of the first wave is checkpointed, so the crash's checkpoint holds the second's.
        ends = await changelog_ends(bootstrap_servers, changelog_topic(name, 0), PARTITIONS)
        nudge = [
            (p, {"user": f"u{p}-0", "ts": WINDOW_BASE + 2 * users, "amount": 1})
            for p in range(PARTITIONS)
        ]
        await send_by_user(bootstrap_servers, topic, nudge)
        await checkpointed_past(ends, tmp_path / "state", PARTITIONS)
        armed.touch()  # the next checkpoint with changes, once committed, is the last
        await send_by_user(bootstrap_servers, topic, second)

        async def crashed() -> bool:
            return crashing.exited

        await wait_until(crashed, timeout_s=60)
    finally:
        crashing.stop(signal.SIGKILL)
    assert crashing.process.returncode == -signal.SIGKILL
    data = [e for _, e in first + nudge + second]
    want = {(key, start): result for (key, start, _), result in window_oracle(data, wide).items()}
    with replicas(bootstrap_servers, name, topic, tmp_path, 1, **options) as started:
        await send_by_user(bootstrap_servers, topic, sentinels())
        await check_exactly_once(bootstrap_servers, name, want)
        restored_by = started[0].status()["restored"]
    keys = users * PARTITIONS
    assert restored_by["partitions_restored/local"] == PARTITIONS
    assert restored_by["state_restored/local"] >= keys
    assert (restored_by["state_restored/changelog"] or 0) < keys / 10


async def test_changes_outgrowing_the_cache_bring_the_checkpoint_forward(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Sessions of 1,500 new keys behind a cache of a dozen entries, with a checkpoint
    interval longer than the run: the changes evictions write outgrow the cache again and
    again, and each time the next checkpoint comes at once (waiting for the one being
    written), so several complete before the input's end; the results are the
    oracle's."""
    data = [dict(e, ts=WINDOW_BASE + 3 * i) for i, e in enumerate(purchases(3000, 1500, 55))]
    name = unique("rocksbound")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 1)
    await produce(bootstrap_servers, topic, [json_record(0, None, e) for e in data])
    one_stage = window_spec(name, topic, SESSION)  # no shuffle: batches of input records
    one_stage["key"]["partitioned"] = True
    built = build_definition(validate_spec(one_stage, ()), ())
    definition = replace(built, state=SMALL_CACHE)
    registry = CollectorRegistry()
    await run_to_the_end(  # small fetches: the loop looks at the bound often
        bootstrap_servers,
        definition,
        state_dir=str(tmp_path),
        metrics=build_metrics(registry),
        checkpoint_interval_ms=600_000,
        max_records=100,
        max_partition_fetch_bytes=4096,
    )
    checkpoints = registry.get_sample_value(
        "clockwork_checkpoint_duration_seconds_count", {"pipeline": name}
    )
    # Without the bound: none before the end (the interval is 10 minutes), then one per
    # stage's end; with it, one each time the changes pass the cache's 4,000 bytes.
    assert checkpoints is not None and checkpoints >= 10
    assert await window_results(bootstrap_servers, f"{name}.out") == window_oracle(data, SESSION)


async def test_a_checkpoint_s_snapshot_lets_the_loop_turn_and_holds_the_state_still(
    bootstrap_servers: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sessions of 1,500 keys behind a cache of a dozen entries, each checkpoint's entries
    encoded two at a time, watermark ticks every 5 ms: the event loop turns between the
    slices (a probe task runs while a snapshot holds the state), nothing the snapshot
    reads moves meanwhile (records read, offsets, the operators' watermarks: the ticks
    wait), and the results are the oracle's."""
    monkeypatch.setattr(changelog, "SNAPSHOT_SLICE", 2)
    data = [dict(e, ts=WINDOW_BASE + 3 * i) for i, e in enumerate(purchases(3000, 1500, 56))]
    name = unique("rocksslices")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    # a user's records in one partition: key.partitioned, no shuffle
    records = [json_record(int(e["user"][1:]) % 2, e["user"], e) for e in data]
    await produce(bootstrap_servers, topic, records)
    one_stage = window_spec(name, topic, SESSION)
    one_stage["key"]["partitioned"] = True
    one_stage["watermark"] = {"interval_ms": 5}
    built = build_definition(validate_spec(one_stage, ()), ())
    definition = replace(built, state=SMALL_CACHE)
    settings = runtime_settings(
        bootstrap_servers,
        state_dir=str(tmp_path),
        checkpoint_interval_ms=50,
        max_records=100,
        max_partition_fetch_bytes=4096,
    )
    runtime = Runtime(settings)
    await runtime.start()
    held_turns = 0
    moved: list[tuple[Any, Any]] = []

    def seen(session: Any) -> tuple[Any, ...]:
        parts = sorted(session.partitions.items())
        return session.records_in, [(p.next_offset, p.operator.current_watermark) for _, p in parts]

    async def probe() -> None:
        nonlocal held_turns
        runner = runtime.runner(name)
        at_start: dict[int, tuple[Any, ...]] = {}  # each hold's first look
        while True:
            await asyncio.sleep(0)  # every turn of the loop
            session = runner.stages[-1].session
            if session is None or not session.state_hold.held:
                continue
            held_turns += 1
            now = seen(session)
            first = at_start.setdefault(session.state_hold.holds, now)
            if now != first:
                moved.append((first, now))

    runtime.start_pipeline(definition)
    watcher = asyncio.get_running_loop().create_task(probe())
    try:
        await runtime.runner(name).wait_for_state(PipelineState.FINISHED, timeout_s=60)
        status = runtime.status(name)
        assert status.state is PipelineState.FINISHED, status.reason
    finally:
        watcher.cancel()
        await runtime.shutdown()
    assert held_turns > 0
    assert moved == []
    assert await window_results(bootstrap_servers, f"{name}.out") == window_oracle(data, SESSION)
