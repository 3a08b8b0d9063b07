"""The rocksdb state backend end to end (#53): a running aggregate's keys, a keyed process
function's states and a Top-N's rankings in RocksDB behind a small write-back cache give
the memory backend's results; a restart on the same disk restores locally (fewer
changelog records read than the state holds); a corrupt local store falls back to the
changelog; kill -9 in the middle of an exactly-once checkpoint stays exact."""

from __future__ import annotations

import random
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
from service.runtime.definition import PipelineDefinition, StateSettings
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.metrics import build_metrics
from service.runtime.partition.rocksdb_store import CHECKPOINT_FILE, DB_DIR
from tests.integration.kafka_utils import (
    cluster_of,
    create_topic,
    json_record,
    produce,
    read_json,
    read_topic,
    runtime_settings,
    unique,
    wait_until,
)
from tests.integration.replicas import replicas
from tests.integration.test_replica_loss import PARTITIONS
from tests.integration.test_running_aggregates import (
    RUNNING,
    crash_before_the_commit,
    folds_to,
    run_to_the_end,
    spec,
)
from tests.integration.test_top_n import TOP_N, N, sales
from tests.integration.test_top_n import folds_to as top_n_folds_to
from tests.integration.test_top_n import spec as top_n_spec
from tests.integration.test_top_n import top_n as top_n_of

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


async def changelog_ends(bootstrap: str, changelog: str) -> dict[int, int]:
    consumer = cluster_of(bootstrap).consumer(group_id=None)
    await consumer.start()
    try:
        tps = [TopicPartition(changelog, p) for p in (0, 1)]
        ends = {tp.partition: offset for tp, offset in (await consumer.end_offsets(tps)).items()}
    finally:
        await consumer.stop()
    return ends


async def checkpointed_past(ends: dict[int, int], directory: Path) -> None:
    """Wait for a local checkpoint of every store written after ``ends``."""

    async def past() -> bool:
        positions = local_positions(directory)
        return len(positions) == 2 and all(positions[p] >= ends[p] for p in positions)

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
