"""Small helpers for tests against the embedded broker: topics, producing, reading back."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import NewTopic

from service.runtime.definition import (
    PipelineDefinition,
    ShuffleSettings,
    SinkSettings,
    TimestampSettings,
    WatermarkSettings,
)
from service.runtime.factories import window_operator_factory
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.settings import RuntimeSettings

Record = tuple[int, bytes | None, bytes | None, int | None]
"""``(partition, key, value, kafka timestamp)``."""


Brokers = str | KafkaCluster
"""Where the helpers connect: bootstrap servers (PLAINTEXT), or a cluster with its
security (the secure-broker tests)."""


def cluster_of(bootstrap: Brokers) -> KafkaCluster:
    return bootstrap if isinstance(bootstrap, KafkaCluster) else KafkaCluster(bootstrap)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def runtime_settings(bootstrap: str, **overrides: Any) -> RuntimeSettings:
    values: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "session_timeout_ms": 2000,
        "checkpoint_interval_ms": 300,
        "restart_backoff_initial_s": 0.2,
        "restart_backoff_max_s": 1.0,
    }
    values.update(overrides)
    return RuntimeSettings(**values)


async def create_topic(bootstrap: Brokers, name: str, partitions: int) -> None:
    admin = cluster_of(bootstrap).admin()
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def partition_ids(bootstrap: Brokers, topic: str) -> list[int]:
    admin = cluster_of(bootstrap).admin()
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return sorted(p["partition"] for p in described["partitions"])


async def produce(
    bootstrap: Brokers, topic: str, records: Iterable[Record], max_batch_size: int = 16384
) -> int:
    """Produce with the batch API, in order per partition; returns how many.

    ``max_batch_size`` bounds the record batches, and so the smallest unit a consumer
    fetches (a broker returns whole batches).
    """
    producer = cluster_of(bootstrap).producer(linger_ms=0, max_batch_size=max_batch_size)
    await producer.start()
    count = 0
    try:
        batches: dict[int, Any] = {}
        futures = []
        for partition, key, value, timestamp in records:
            batch = batches.get(partition)
            if batch is None:
                batch = batches[partition] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=timestamp) is None:
                futures.append(await producer.send_batch(batch, topic, partition=partition))
                batch = batches[partition] = producer.create_batch()
                batch.append(key=key, value=value, timestamp=timestamp)
            count += 1
        for partition, batch in batches.items():
            if batch.record_count():
                futures.append(await producer.send_batch(batch, topic, partition=partition))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return count


def json_record(
    partition: int, key: str | None, value: Any, timestamp: int | None = None
) -> Record:
    return (partition, key.encode() if key is not None else None, orjson.dumps(value), timestamp)


async def read_topic(
    bootstrap: Brokers,
    topic: str,
    timeout_s: float = 10.0,
    isolation_level: str = "read_uncommitted",
) -> list[Any]:
    """Every record of ``topic`` up to the fetch high watermark, by partition and offset
    (none if the topic does not exist yet). ``read_committed`` reads to the high
    watermark too: it waits for the transactions open there to end."""
    consumer = cluster_of(bootstrap).consumer(
        enable_auto_commit=False,
        fetch_max_wait_ms=20,
        isolation_level=isolation_level,
    )
    await consumer.start()
    out: list[Any] = []
    try:
        partitions = await partition_ids(bootstrap, topic)
        if not partitions:  # not created yet (Apache Kafka: describe names no partition)
            return out
        deadline = time.monotonic() + timeout_s
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        remaining = set(tps)
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end")
            batch = await consumer.getmany(timeout_ms=100)
            for records in batch.values():
                out.extend(records)
            for tp in list(remaining):
                highwater = consumer.highwater(tp)
                if highwater is not None and await consumer.position(tp) >= highwater:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    out.sort(key=lambda r: (r.partition, r.offset))
    return out


async def read_json(
    bootstrap: Brokers, topic: str, isolation_level: str = "read_uncommitted"
) -> list[dict[str, Any]]:
    records = await read_topic(bootstrap, topic, isolation_level=isolation_level)
    return [orjson.loads(r.value) for r in records]


async def wait_until(
    predicate: Callable[[], Awaitable[bool]], timeout_s: float, interval_s: float = 0.1
) -> None:
    """Poll ``predicate`` until it holds; TimeoutError at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met before the deadline")
        await asyncio.sleep(interval_s)


def window_definition(
    name: str,
    topics: Sequence[str],
    operator: dict[str, Any],
    *,
    bounded: bool = True,
    interval_ms: int = 50,
    max_out_of_orderness_ms: int = 0,
    idle_timeout_ms: int | None = None,
    idle_advance: bool = False,
    max_drift_ms: int | None = None,
    key_field: str | None = "user",
    timestamp_field: str = "ts",
    late: bool = True,
    shuffle: bool | int = False,
    key_partitioned: bool = False,
) -> PipelineDefinition:
    """``shuffle``: route by key through a shuffle topic (an int: its partition count)."""
    sink = SinkSettings(
        topic=f"{name}.out",
        dead_letter_topic=f"{name}.dlq",
        late_topic=f"{name}.late" if late else None,
    )
    return PipelineDefinition(
        name=name,
        topics=tuple(topics),
        sink=sink,
        operator_factory=window_operator_factory(name, operator, late_output=late),
        key_field=key_field,
        timestamp=TimestampSettings(source="field", field=timestamp_field),
        watermark=WatermarkSettings(
            strategy="bounded_out_of_orderness",
            max_out_of_orderness_ms=max_out_of_orderness_ms,
            interval_ms=interval_ms,
            idle_timeout_ms=idle_timeout_ms,
            idle_advance=idle_advance,
            max_drift_ms=max_drift_ms,
        ),
        bounded=bounded,
        spec={"operator": operator},
        shuffle=None
        if shuffle is False
        else ShuffleSettings(partitions=None if shuffle is True else int(shuffle)),
        key_partitioned=key_partitioned,
    )


def latest_by_id(results: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The newest ``seq`` per ``id``: what the compaction job keeps."""
    out: dict[str, dict[str, Any]] = {}
    for result in results:
        current = out.get(result["id"])
        if current is None or result["seq"] >= current["seq"]:
            out[result["id"]] = result
    return out


class _HoldOnRevoke(ConsumerRebalanceListener):
    """Does not give its partitions up (and so does not rejoin) until ``release``."""

    def __init__(self, release: asyncio.Event) -> None:
        self.release = release

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if revoked:  # not at its own first join
            await self.release.wait()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        pass


@asynccontextmanager
async def join_held(bootstrap: str, group_id: str, topic: str) -> AsyncIterator[asyncio.Event]:
    """A member of ``group_id``, alone on a topic of its own, that holds the group's next
    rebalance (so the next member's join) until the yielded event is set.

    A rebalance waits for every known member to rejoin (up to its rebalance timeout),
    and this one does not before its revoke callback returns. So a test can make a join
    last as long as it needs on every broker: Apache Kafka answers a join at once, and
    Tansu's wait (half the session timeout) is not a bound to count on.
    """
    await create_topic(bootstrap, topic, 1)
    release = asyncio.Event()
    member = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        session_timeout_ms=2000,  # as the pipeline's (a join on Tansu waits half)
        heartbeat_interval_ms=200,
    )
    member.subscribe([topic], listener=_HoldOnRevoke(release))
    await member.start()
    try:

        async def assigned() -> bool:
            await member.getmany(timeout_ms=50)
            return bool(member.assignment())

        await wait_until(assigned, timeout_s=30)
        yield release
    finally:
        release.set()
        await member.stop()
