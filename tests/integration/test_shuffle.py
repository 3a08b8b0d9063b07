"""A pipeline keyed by a payload field its source is not partitioned by: the keyed
shuffle (semantics.md section 8) gives exactly the results of the same data already
partitioned by the key, on the real broker."""

from __future__ import annotations

import contextlib
import random
import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import CollectorRegistry

from service.core.partitioner import partition_for
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.metrics import build_metrics
from service.runtime.observability.status import PipelineState, PipelineStatus
from tests.integration.kafka_utils import (
    create_topic,
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
from tests.integration.test_changelog_compaction import topic_configs

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BASE = 1_700_000_000_000
PARTITIONS = 4
USERS = 50
TUMBLING = {
    "type": "window",
    "assigner": {"type": "tumbling", "size_ms": 10_000},
    "allowed_lateness_ms": 5_000,
    "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
}


def orders(count: int, seed: int = 7, start: int = 0) -> list[tuple[int, dict[str, Any]]]:
    """Orders keyed by order id: 70% in partition 0, the rest spread; each source
    partition's event times rise 100 ms per record, up to 1.5 s out of order (within
    the 2 s bound)."""
    rng = random.Random(seed)
    per_partition = [start] * PARTITIONS
    out = []
    for i in range(count):
        p = 0 if rng.random() < 0.7 else rng.randrange(1, PARTITIONS)
        k = per_partition[p]
        per_partition[p] += 1
        ts = BASE + k * 100 - rng.randrange(1_500)
        out.append(
            (
                p,
                {
                    "order": f"o{i}",
                    "user": f"u{rng.randrange(USERS)}",
                    "ts": ts,
                    "amount": rng.randrange(1, 20),
                },
            )
        )
    return out


def owner_of(partition: int) -> str:
    """A sentinel user whose key Kafka's partitioner puts in ``partition``."""
    return next(
        f"s{i}" for i in range(10_000) if partition_for(f"s{i}".encode(), PARTITIONS) == partition
    )


def sentinels(at: int) -> list[tuple[int, dict[str, Any]]]:
    return [
        (p, {"order": f"end{p}", "user": f"s{p}", "ts": at, "amount": 0}) for p in range(PARTITIONS)
    ]


async def send(bootstrap: str, topic: str, data: list[tuple[int, dict[str, Any]]]) -> None:
    await produce(
        bootstrap,
        topic,
        [(p, e["order"].encode(), orjson.dumps(e), None) for p, e in data],
    )


def expected(data: list[tuple[int, dict[str, Any]]]) -> dict[tuple[str, int], dict[str, int]]:
    out: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: {"n": 0, "total": 0})
    for _, e in data:
        acc = out[(e["user"], e["ts"] - e["ts"] % 10_000)]
        acc["n"] += 1
        acc["total"] += e["amount"]
    return dict(out)


def by_window(results: list[dict[str, Any]]) -> dict[tuple[str, int], Any]:
    return {(r["key"], r["window"]["start"]): r["result"] for r in latest_by_id(results).values()}


async def run_to_finish(
    bootstrap: str,
    definition: Any,
    registry: CollectorRegistry | None = None,
    **settings: Any,
) -> PipelineStatus:
    runtime = Runtime(
        runtime_settings(bootstrap, **settings),
        metrics=build_metrics(registry or CollectorRegistry()),
    )
    await runtime.start()
    runtime.start_pipeline(definition)
    try:

        async def finished() -> bool:
            return runtime.status(definition.name).state is PipelineState.FINISHED

        await wait_until(finished, timeout_s=60)
        return runtime.status(definition.name)
    finally:
        await runtime.shutdown()


async def test_a_skewed_source_keyed_by_order_gives_exact_windows_per_user(
    bootstrap_servers: str,
) -> None:
    """Without the shuffle each partition would fire its own partial window per user;
    with it every window is complete, emitted once, and the shuffle's numbers add up."""
    name = unique("shuffle")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    data = orders(6_000)
    await send(bootstrap_servers, topic, data)
    registry = CollectorRegistry()
    definition = window_definition(
        name, [topic], TUMBLING, max_out_of_orderness_ms=2_000, shuffle=True
    )
    status = await run_to_finish(bootstrap_servers, definition, registry)
    results = await read_json(bootstrap_servers, f"{name}.out")
    assert by_window(results) == expected(data)
    assert len(results) == len(expected(data))  # bounded, no replay: each window once
    assert await read_topic(bootstrap_servers, f"{name}.late") == []
    assert await read_topic(bootstrap_servers, f"{name}.dlq") == []
    assert [s.name for s in status.stages] == ["route", "shuffled"]
    assert status.records_in == len(data)
    routed = registry.get_sample_value("clockwork_shuffle_records_routed_total", {"pipeline": name})
    assert routed == len(data)
    # every result of a user comes from the one shuffle partition its key belongs to
    counts = {r["key"]: partition_for(r["key"].encode(), PARTITIONS) for r in results}
    out = await read_topic(bootstrap_servers, f"{name}.out")
    for record in out:
        assert record.partition == counts[orjson.loads(record.value)["key"]] % PARTITIONS


@pytest.mark.parametrize("frame_bytes", [512 * 1024, 2_048], ids=["default", "small-frames"])
async def test_rows_cross_the_shuffle_in_frames_split_at_their_byte_bound(
    bootstrap_servers: str, frame_bytes: int
) -> None:
    """Stage 1 writes a frame per target partition and batch, split where it would pass
    ``shuffle_frame_max_bytes``; stage 2 reads each frame's rows once. The results are
    exact either way; status and metrics show the frames and the rows per frame."""
    name = unique("frames")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    data = orders(6_000)
    await send(bootstrap_servers, topic, data)
    registry = CollectorRegistry()
    definition = window_definition(
        name, [topic], TUMBLING, max_out_of_orderness_ms=2_000, shuffle=True
    )
    status = await run_to_finish(
        bootstrap_servers, definition, registry, shuffle_frame_max_bytes=frame_bytes
    )
    results = await read_json(bootstrap_servers, f"{name}.out")
    assert by_window(results) == expected(data)
    assert len(results) == len(expected(data))
    shuffled = [p for p in status.partitions if p.stage == "shuffled"]
    assert shuffled and all(p.shuffle is not None for p in shuffled)
    frames = sum(p.shuffle["frames"] for p in shuffled if p.shuffle is not None)
    routed = [p for p in status.partitions if p.stage == "route"]
    assert frames == sum(p.shuffle["frames"] for p in routed if p.shuffle is not None)
    assert frames < len(data) / 4  # many rows per frame, not a record per row
    if frame_bytes < 4_096:  # ~60 B per row: a frame of 2 KiB holds a few dozen
        assert frames > len(data) * 60 / frame_bytes
    labels = [{"pipeline": name, "partition": f"{p.topic}/{p.partition}"} for p in shuffled]
    sampled = [
        (
            registry.get_sample_value("clockwork_shuffle_frames_total", label) or 0,
            registry.get_sample_value("clockwork_shuffle_frame_rows_total", label) or 0,
        )
        for label in labels
    ]
    assert sum(f for f, _ in sampled) == frames
    assert sum(r for _, r in sampled) == len(data)  # every row in one frame, none replayed


async def test_a_watermark_per_record_crosses_the_shuffle_inside_frames(
    bootstrap_servers: str,
) -> None:
    """``interval_ms: 0`` recomputes the watermark after every record; stage 1 still
    writes a frame per target and batch, the watermark's advances inside it, not a
    frame and a marker per record. The windows are exact, and no record is late."""
    name = unique("permark")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    data = orders(6_000)
    await send(bootstrap_servers, topic, data)
    definition = window_definition(
        name, [topic], TUMBLING, max_out_of_orderness_ms=2_000, shuffle=True, interval_ms=0
    )
    status = await run_to_finish(bootstrap_servers, definition)
    results = await read_json(bootstrap_servers, f"{name}.out")
    assert by_window(results) == expected(data)
    assert len(results) == len(expected(data))
    assert await read_topic(bootstrap_servers, f"{name}.late") == []
    routed = [p for p in status.partitions if p.stage == "route"]
    frames = sum(p.shuffle["frames"] for p in routed if p.shuffle is not None)
    assert 0 < frames < len(data) / 4  # many rows per frame, not a frame per record
    shuffled = await read_topic(bootstrap_servers, definition.shuffle_topic)
    markers = [r for r in shuffled if r.headers and r.headers[-1][0] == "clockwork.marker"]
    assert len(markers) < len(data) / 4  # the advances travel inside the frames


@pytest.mark.requires_broker("delete_records")
async def test_the_keyed_stage_trims_the_shuffle_topic_behind_its_checkpoints(
    bootstrap_servers: str,
) -> None:
    """Routed records are read once: what a keyed checkpoint covers is deleted, so a
    finished pipeline leaves its shuffle topic empty, with exact results."""
    name = unique("trim")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    data = orders(3_000)
    await send(bootstrap_servers, topic, data)
    registry = CollectorRegistry()
    definition = window_definition(
        name, [topic], TUMBLING, max_out_of_orderness_ms=2_000, shuffle=True
    )
    await run_to_finish(bootstrap_servers, definition, registry, shuffle_trim_interval_s=0)
    assert by_window(await read_json(bootstrap_servers, f"{name}.out")) == expected(data)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers)
    await consumer.start()
    try:
        shuffle = [TopicPartition(f"clockwork.{name}.shuffle", p) for p in range(PARTITIONS)]
        firsts = await consumer.beginning_offsets(shuffle)
        ends = await consumer.end_offsets(shuffle)
    finally:
        await consumer.stop()
    assert all(ends[tp] > 0 for tp in shuffle)  # records and markers went through each
    assert firsts == ends
    # Trimming is the topic's only cleanup: a time retention would delete a backfill's
    # unread records by their (old) timestamps once their segment closed.
    configs = await topic_configs(bootstrap_servers, f"clockwork.{name}.shuffle")
    assert (configs["cleanup.policy"], configs["retention.ms"]) == ("delete", "-1")
    done = {"pipeline": name, "outcome": "done"}
    assert (registry.get_sample_value("clockwork_shuffle_trims_total", done) or 0) >= 1


async def test_an_idle_source_partition_is_declared_idle_upstream_and_holds_no_one_back(
    bootstrap_servers: str,
) -> None:
    """Partition 3 of the source never gets a record. Its route partition declares
    itself idle after ``idle_timeout_ms`` (nothing left to read), so every shuffle
    partition's watermark moves on without it and every window fires."""
    name = unique("shidle")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    data = [(p % 3, e) for p, e in orders(3_000)]  # partitions 0-2 only
    closing = [(p, e) for p, e in sentinels(BASE + 10**7) if p < 3]
    await send(bootstrap_servers, topic, data + closing)
    definition = window_definition(
        name,
        [topic],
        TUMBLING,
        bounded=False,
        max_out_of_orderness_ms=2_000,
        idle_timeout_ms=500,
        shuffle=True,
    )
    want = expected(data)
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    runtime.start_pipeline(definition)
    try:

        async def all_fired() -> bool:
            return len(latest_by_id(await read_json(bootstrap_servers, f"{name}.out"))) >= len(want)

        await wait_until(all_fired, timeout_s=60)
        status = runtime.status(name)
    finally:
        await runtime.shutdown()
    assert by_window(await read_json(bootstrap_servers, f"{name}.out")) == want
    shuffled = [p for p in status.partitions if p.stage == "shuffled"]
    assert shuffled and all(p.shuffle is not None for p in shuffled)
    source_count = {p.shuffle["sources"] for p in shuffled if p.shuffle is not None}
    assert source_count == {PARTITIONS}
    assert all(p.shuffle is not None and 3 in p.shuffle["idle_sources"] for p in shuffled)


async def test_late_records_cross_the_shuffle_as_they_would_an_already_keyed_source(
    bootstrap_servers: str,
) -> None:
    """The same data through a shuffle and, already partitioned by the key (Kafka's
    partitioner), without one. Once both pipelines' watermarks are past the data,
    records arrive for windows already fired: within the allowed lateness they fire the
    window late, beyond it they go to the late topic. Both runs agree on every firing
    and every late record."""
    shuffled, keyed = unique("shlate"), unique("keyedlate")
    for name in (shuffled, keyed):
        await create_topic(bootstrap_servers, f"{name}.in", PARTITIONS)
    data = orders(3_000)
    rekeyed = [(partition_for(e["user"].encode(), PARTITIONS), e) for _, e in data]
    await send(bootstrap_servers, f"{shuffled}.in", data)
    await send(bootstrap_servers, f"{keyed}.in", rekeyed)
    high = max(e["ts"] for _, e in data)
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    for name, shuffle in ((shuffled, True), (keyed, False)):
        runtime.start_pipeline(
            window_definition(
                name,
                [f"{name}.in"],
                TUMBLING,
                bounded=False,
                max_out_of_orderness_ms=2_000,
                shuffle=shuffle,
                key_partitioned=not shuffle,
            )
        )
    try:
        # A record in every partition of both sources takes the watermark to 1 s past
        # the end E of a window 20 s after the data: that window's lateness is not over.
        edge = (high + 21_000) // 10_000 * 10_000 + 10_000
        watermark = edge + 1_000
        ahead = sentinels(watermark + 2_001)
        for p in range(PARTITIONS):
            ahead[p][1]["user"] = owner_of(p)

        async def past(watermark: int) -> bool:
            return all((runtime.status(n).watermark or 0) >= watermark for n in (shuffled, keyed))

        await send(bootstrap_servers, f"{shuffled}.in", ahead)
        await send(
            bootstrap_servers,
            f"{keyed}.in",
            [(partition_for(e["user"].encode(), PARTITIONS), e) for _, e in ahead],
        )
        await wait_until(lambda: past(watermark), timeout_s=60)
        stragglers = [
            # behind the watermark, within the allowed lateness (5 s): late firings
            (0, {"order": "late1", "user": "u1", "ts": edge - 100, "amount": 100}),
            (1, {"order": "late2", "user": "u2", "ts": edge - 5_000, "amount": 200}),
            # beyond it: the late topic
            (2, {"order": "late3", "user": "u3", "ts": high - 30_000, "amount": 300}),
            (3, {"order": "late4", "user": "u4", "ts": BASE, "amount": 400}),
        ]
        await send(bootstrap_servers, f"{shuffled}.in", stragglers)
        await send(
            bootstrap_servers,
            f"{keyed}.in",
            [(partition_for(e["user"].encode(), PARTITIONS), e) for _, e in stragglers],
        )

        async def settled() -> bool:
            counts = []
            for name in (shuffled, keyed):
                late = await read_topic(bootstrap_servers, f"{name}.late")
                fired = [
                    r
                    for r in await read_json(bootstrap_servers, f"{name}.out")
                    if r["fire"] == "late"
                ]
                counts.append((len(late), len(fired)))
            return counts == [(2, 2), (2, 2)]

        await wait_until(settled, timeout_s=60)
    finally:
        await runtime.shutdown()
    results = {n: await read_json(bootstrap_servers, f"{n}.out") for n in (shuffled, keyed)}
    for name in (shuffled, keyed):
        assert await read_topic(bootstrap_servers, f"{name}.dlq") == []
    assert by_window(results[shuffled]) == by_window(results[keyed])
    late_firings = {
        n: sorted((r["key"], r["window"]["start"], r["seq"]) for r in rs if r["fire"] == "late")
        for n, rs in results.items()
    }
    assert late_firings[shuffled] == late_firings[keyed] != []
    late = {
        n: sorted(
            orjson.loads(r.value)["order"] for r in await read_topic(bootstrap_servers, f"{n}.late")
        )
        for n in (shuffled, keyed)
    }
    assert late[shuffled] == late[keyed] == ["late3", "late4"]


async def test_a_broken_partitioned_promise_is_counted_and_shown(
    bootstrap_servers: str,
) -> None:
    """``key.partitioned`` on a source keyed by order id: the records are processed as
    they come (no shuffle), and every record whose user belongs to another partition is
    counted, in status and in the metric."""
    name = unique("promise")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    data = orders(2_000)
    await send(bootstrap_servers, topic, data)
    broken = sum(1 for p, e in data if partition_for(e["user"].encode(), PARTITIONS) != p)
    registry = CollectorRegistry()
    definition = window_definition(
        name, [topic], TUMBLING, max_out_of_orderness_ms=2_000, key_partitioned=True
    )
    status = await run_to_finish(bootstrap_servers, definition, registry)
    shown = sum(
        p.shuffle["key_partition_mismatches"] for p in status.partitions if p.shuffle is not None
    )
    assert broken > 0 and shown == broken
    metric = registry.get_sample_value(
        "clockwork_key_partition_mismatches_total", {"pipeline": name}
    )
    assert metric == broken


CRASH_POINTS = [
    pytest.param("route", "before_flush", id="route-before-flush"),
    pytest.param("route", "after_outputs", id="route-during-flush"),
    pytest.param("route", "after_commit", id="route-after-flush"),
    pytest.param("shuffled", "after_outputs", id="keyed-during-checkpoint"),
]


@pytest.mark.parametrize(("stage", "point"), CRASH_POINTS)
async def test_a_kill_at_any_point_of_either_stage_loses_and_doubles_nothing(
    bootstrap_servers: str, tmp_path: Path, stage: str, point: str
) -> None:
    """A worker dies (SIGKILL) at its second checkpoint of one stage, at one point of
    it; a new worker takes over, more input comes. After de-duplication by id the
    results are exactly the uninterrupted run's: no record lost, none counted twice (a
    replayed route writes records again; the keyed stage drops them), and a window
    emitted twice is emitted the same."""
    name = unique(f"shcrash-{stage}")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first, second = orders(4_000, seed=1), orders(4_000, seed=2, start=5_000)
    await send(bootstrap_servers, topic, first[:2_000])
    crash = {"stage": stage, "point": point, "at": 2}
    with replicas(bootstrap_servers, name, topic, tmp_path, 1, shuffle=True, crash=crash) as (
        started
    ):
        (doomed,) = started
        # The rest of the first input only once the stage has written a checkpoint, so
        # a second one comes however fast the broker lets the first part through.
        stage_input = topic if stage == "route" else f"clockwork.{name}.shuffle"

        async def checkpointed_once() -> bool:
            changelog = await read_topic(bootstrap_servers, f"clockwork.{name}.changelog")
            return any(
                r.key.startswith(f"{stage_input}|".encode()) and r.key.endswith(b"|m")
                for r in changelog
            )

        await wait_until(checkpointed_once, timeout_s=60)
        await send(bootstrap_servers, topic, first[2_000:])

        async def died() -> bool:
            return doomed.exited

        await wait_until(died, timeout_s=60)
        assert doomed.process.returncode == -signal.SIGKILL
        await send(bootstrap_servers, topic, second + sentinels(BASE + 10**8))
        started.append(
            Replica(bootstrap_servers, name, topic, tmp_path / "next.json", shuffle=True)
        )
        want = expected(first + second)

        async def complete() -> bool:
            return len(latest_by_id(await read_json(bootstrap_servers, f"{name}.out"))) >= len(want)

        with contextlib.suppress(TimeoutError):  # the assertion below shows what is off
            await wait_until(complete, timeout_s=90)
    results = await read_json(bootstrap_servers, f"{name}.out")
    assert by_window(results) == want
    emitted: dict[str, list[Any]] = defaultdict(list)
    for r in results:
        emitted[r["id"]].append(r["result"])
    assert all(all(v == values[0] for v in values) for values in emitted.values())
    assert await read_topic(bootstrap_servers, f"{name}.late") == []


async def test_two_replicas_rebalancing_mid_stream_give_exact_windows(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """A second replica joins mid-stream (both stages' partitions move to it) and then
    leaves; the results are exact after de-duplication."""
    name = unique("shrebal")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first, second, third = (orders(3_000, seed=s, start=s * 4_000) for s in (3, 4, 5))
    await send(bootstrap_servers, topic, first)
    with replicas(bootstrap_servers, name, topic, tmp_path, 1, shuffle=True) as started:
        (one,) = started

        async def routed_some() -> bool:
            return one.status().get("records_in", 0) > 0

        await wait_until(routed_some, timeout_s=45)
        two = Replica(bootstrap_servers, name, topic, tmp_path / "two.json", shuffle=True)
        started.append(two)

        async def shared() -> bool:
            return (
                bool(one.status()["partitions"])
                and bool(two.status()["partitions"])
                and (len(one.status()["partitions"]) < 2 * PARTITIONS)
            )

        await wait_until(shared, timeout_s=45)
        await send(bootstrap_servers, topic, second)
        two.stop(signal.SIGTERM)
        await send(bootstrap_servers, topic, third + sentinels(BASE + 10**8))
        want = expected(first + second + third)

        async def complete() -> bool:
            return len(latest_by_id(await read_json(bootstrap_servers, f"{name}.out"))) >= len(want)

        await wait_until(complete, timeout_s=90)
    assert by_window(await read_json(bootstrap_servers, f"{name}.out")) == want
    assert await read_topic(bootstrap_servers, f"{name}.late") == []
