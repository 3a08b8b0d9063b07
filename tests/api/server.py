"""Running the real app on a real socket for the integration tests (no mocks, no ASGI
shortcut): uvicorn on 127.0.0.1:<free port> in the test's event loop, plus helpers to
produce input and read output topics through the embedded broker."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import httpx
import uvicorn
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from service.api.app import create_app
from service.runtime.kafka.embedded_broker import free_port
from service.runtime.kafka.end_offsets import topic_partitions
from service.settings import Settings


def app_settings(bootstrap_servers: str, **overrides: Any) -> Settings:
    """Settings for one test: its own store and members topics, Tansu-friendly Kafka
    timings."""
    suffix = uuid.uuid4().hex[:8]
    base = Settings(
        kafka_bootstrap_servers=bootstrap_servers,
        http_host="127.0.0.1",
        http_port=free_port(),
        pipelines_topic=f"clockwork.pipelines.test-{suffix}",
        members_topic=f"clockwork.members.test-{suffix}",
        status_publish_interval_ms=300,
        checkpoint_interval_ms=300,
        kafka_session_timeout_ms=2000,
        kafka_fetch_max_wait_ms=20,
        store_apply_timeout_ms=20000,
        instance_id=f"test-{uuid.uuid4().hex[:6]}",
    )
    return replace(base, **overrides)


@asynccontextmanager
async def running_app(settings: Settings, timeout_s: float = 30.0) -> AsyncIterator[str]:
    """Serve the app until the block ends; yields its base URL."""
    config = uvicorn.Config(
        create_app(settings),
        host=settings.http_host,
        port=settings.http_port,
        lifespan="on",
        log_level="warning",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("the app stopped during start-up")
        if time.monotonic() > deadline:
            server.should_exit = True
            await task
            raise TimeoutError("the app did not start")
        await asyncio.sleep(0.02)
    try:
        yield f"http://{settings.http_host}:{settings.http_port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


async def eventually(
    check: Callable[[], Any], timeout_s: float = 20.0, interval_s: float = 0.05
) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy; its value."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(interval_s)
    raise TimeoutError(f"condition not met within {timeout_s}s (last: {last!r})")


async def wait_ready(client: httpx.AsyncClient, timeout_s: float = 20.0) -> None:
    async def ready() -> bool:
        try:
            return (await client.get("/readyz")).status_code == 200
        except httpx.TransportError:  # not listening yet
            return False

    await eventually(ready, timeout_s)


async def produce(
    bootstrap_servers: str, topic: str, records: list[tuple[str, dict[str, Any]]]
) -> None:
    """Send JSON values with string keys (the key picks the partition)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers)
    await producer.start()
    try:
        for key, value in records:
            await producer.send(topic, key=key.encode(), value=json.dumps(value).encode())
        await producer.flush()
    finally:
        await producer.stop()


async def create_topic(bootstrap_servers: str, topic: str, partitions: int = 2) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


class TopicReader:
    """Reads every record of a topic from the beginning, without a group."""

    def __init__(self, bootstrap_servers: str, topic: str) -> None:
        self.topic = topic
        self.records: list[dict[str, Any]] = []
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers,
            group_id=None,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=20,
        )

    async def __aenter__(self) -> TopicReader:
        await self._consumer.start()

        async def partitions() -> list[TopicPartition] | None:
            # Fresh metadata of every topic (the consumer's own holds none yet on Kafka).
            return await topic_partitions(self._consumer, [self.topic]) or None

        try:
            tps = await eventually(partitions)
        except BaseException:
            await self._consumer.stop()
            raise
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._consumer.stop()

    async def poll(self) -> list[dict[str, Any]]:
        batches = await self._consumer.getmany(timeout_ms=100)
        for records in batches.values():
            self.records.extend(json.loads(r.value) for r in records if r.value is not None)
        return self.records
