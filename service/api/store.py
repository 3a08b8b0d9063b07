"""The pipeline store: every pipeline spec as one record in a compacted Kafka topic.

Like Kafka Connect's config topic. The record key is the pipeline name, the value the
:class:`StoredPipeline` as JSON (spec, paused flag, state epoch); deleting writes a
tombstone (null value). One partition, so every replica sees every change in the same
order; ``cleanup.policy=compact`` keeps the newest record per name forever.

Every replica runs a follower: a consumer with no group that reads the topic from the
beginning and hands each change to ``on_change`` (which starts, replaces, pauses or
stops the pipeline in the local runtime), in log order. A restart re-reads the topic and
so reloads every pipeline. A write returns only after this replica's follower has
applied it (read-your-writes): a POST answered 201 means the pipeline runs here.

Concurrent writers: writes from one replica are serialized (:attr:`write_lock`, and each
check reads the store after :meth:`sync`, which waits until the follower reached the
topic's end); two replicas creating the same name in the same instant both succeed and
the later record wins, as in Kafka Connect without a leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError

from service.runtime.kafka.access import (
    AuthorizationError,
    authorization_problem,
    connection_problem,
)
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.topics import TopicCreationFailed, create_topics

__all__ = ["ChangeHandler", "PipelineStore", "StoreError", "StoreTimeout", "StoredPipeline"]

logger = logging.getLogger(__name__)


class StoreError(RuntimeError):
    """The pipeline store topic could not be created, read or written."""


class StoreTimeout(StoreError):
    """This replica did not catch up with the store in time."""


@dataclass(frozen=True, slots=True)
class StoredPipeline:
    """One pipeline as stored: what every replica runs."""

    name: str
    spec: dict[str, Any]
    paused: bool = False
    state_epoch: int = 0
    """Incremented by a replacement with ``reset_state=true``: the state is dropped."""
    end_offsets: tuple[tuple[str, int, int], ...] | None = None
    """Bounded input: ``(topic, partition, end)`` of every source partition, read when
    the spec was written, so every replica (and every restart) reads to the same ends."""
    updated_by: str = ""
    updated_at_ms: int = 0
    sql: str | None = None
    """The SQL script as written, when the pipeline was created or replaced from one
    (the spec is what it compiled to, and what runs)."""
    offset: int = field(default=-1, compare=False)
    """Where in the store topic this version was written (-1 before it was)."""

    def to_value(self) -> bytes:
        return json.dumps(
            {
                "spec": self.spec,
                "paused": self.paused,
                "state_epoch": self.state_epoch,
                "end_offsets": None if self.end_offsets is None else list(self.end_offsets),
                "updated_by": self.updated_by,
                "updated_at_ms": self.updated_at_ms,
                **({} if self.sql is None else {"sql": self.sql}),
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_value(cls, name: str, value: bytes, offset: int) -> StoredPipeline:
        """Parse a stored record; raises ``ValueError`` for one this version cannot read."""
        data = json.loads(value)
        if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
            raise ValueError("a stored pipeline is a JSON object with a 'spec' object")
        ends = data.get("end_offsets")
        return cls(
            name=name,
            spec=data["spec"],
            paused=bool(data.get("paused", False)),
            state_epoch=int(data.get("state_epoch", 0)),
            end_offsets=None
            if ends is None
            else tuple((str(t), int(p), int(e)) for t, p, e in ends),
            updated_by=str(data.get("updated_by", "")),
            updated_at_ms=int(data.get("updated_at_ms", 0)),
            sql=data["sql"] if isinstance(data.get("sql"), str) else None,
            offset=offset,
        )

    def same_run(self, other: StoredPipeline) -> bool:
        """True when ``other`` runs exactly like this (only bookkeeping differs)."""
        return (self.spec, self.paused, self.state_epoch, self.end_offsets) == (
            other.spec,
            other.paused,
            other.state_epoch,
            other.end_offsets,
        )


ChangeHandler = Callable[[str, StoredPipeline | None, StoredPipeline | None], Awaitable[None]]
"""``(name, old, new)``: None for old = created, None for new = deleted."""


class PipelineStore:
    """Writes pipeline records and follows the topic; see the module docstring."""

    def __init__(
        self,
        cluster: KafkaCluster,
        topic: str,
        *,
        instance_id: str,
        on_change: ChangeHandler | None,
        replication_factor: int = 1,
        fetch_max_wait_ms: int = 50,
        client_id: str = "clockwork-store",
    ) -> None:
        self._cluster = cluster
        self.topic = topic
        self._tp = TopicPartition(topic, 0)
        self._instance_id = instance_id
        self._on_change = on_change
        self._replication = replication_factor
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._client_id = client_id
        self._pipelines: dict[str, StoredPipeline] = {}
        self._position = 0
        self._loaded = asyncio.Event()
        self._progress = asyncio.Condition()
        self._last_fetch_ok = 0.0
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self.problem: str | None = None
        """Why the store cannot be used now (None: it can, or has not been tried)."""
        self.write_lock = asyncio.Lock()
        """Held by the registry around check-then-write, so one replica never races itself."""

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Create the topic if missing, start the producer and the follower.

        A broker that cannot be used (unreachable, a rejected password or certificate, a
        missing ACL) does not fail the start: :attr:`problem` says why (``/readyz``
        shows it, one log line names it) and the store connects in the background,
        with a backoff up to 30 s, until it can."""
        follow = self._follow() if await self._connect() else self._connect_then_follow()
        self._task = asyncio.create_task(follow, name=f"store-follower:{self.topic}")

    async def _connect(self) -> bool:
        """Try once; True when connected (the clients started, the follower positioned)."""
        try:
            await self._ensure_topic()
            self._producer = self._cluster.producer(
                client_id=f"{self._client_id}-{self._instance_id}",
                acks="all",
                linger_ms=0,
            )
            self._consumer = self._cluster.consumer(
                client_id=f"{self._client_id}-{self._instance_id}",
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=self._fetch_max_wait_ms,
            )
            await self._producer.start()
            await self._consumer.start()
            self._consumer.assign([self._tp])
            await self._consumer.seek_to_beginning(self._tp)
        except (KafkaError, StoreError, OSError) as exc:
            await self._close_clients()
            self._set_problem(await self._explain(exc))
            return False
        return True

    async def _connect_then_follow(self) -> None:
        backoff = 0.5
        while not await self._connect():
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30.0)
        await self._follow()

    async def _explain(self, exc: BaseException) -> str:
        """What an operator can act on: the connection's cause (aiokafka says only
        "Unable to bootstrap"), or the ACL the broker wants."""
        if isinstance(exc, StoreError) and exc.__cause__ is not None:
            exc = exc.__cause__
        if isinstance(exc, KafkaConnectionError):
            return await connection_problem(self._cluster) or str(exc)
        found = authorization_problem(
            exc,
            principal=self._cluster.security.principal,
            own_prefix=self.topic,  # read and written: the store's own
        )
        return found or str(exc) or type(exc).__name__

    def _set_problem(self, problem: str | None) -> None:
        """Log a new problem, and its end, once (not at every retry)."""
        if problem != self.problem:
            if problem is not None:
                logger.error("pipeline store %r not usable: %s", self.topic, problem)
            else:
                logger.info("pipeline store %r usable again", self.topic)
        self.problem = problem

    async def stop(self) -> None:
        """Stop following and close the clients; the local pipelines are not touched."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close_clients()

    async def _close_clients(self) -> None:
        consumer, self._consumer = self._consumer, None
        producer, self._producer = self._producer, None
        if consumer is not None:
            await consumer.stop()
        if producer is not None:
            await producer.stop()

    async def _ensure_topic(self) -> None:
        await ensure_compacted_topic(
            self._cluster, self.topic, self._replication, f"{self._client_id}-admin"
        )

    # -- reading ---------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        """True once the follower has read up to the end of the topic (every pipeline applied)."""
        return self._loaded.is_set()

    def reachable(self, within_s: float = 10.0) -> bool:
        """True when the follower's last fetch succeeded less than ``within_s`` ago."""
        return time.monotonic() - self._last_fetch_ok < within_s

    def get(self, name: str) -> StoredPipeline | None:
        return self._pipelines.get(name)

    def all(self) -> list[StoredPipeline]:
        return sorted(self._pipelines.values(), key=lambda p: p.name)

    async def wait_loaded(self, timeout_s: float) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await self._loaded.wait()
        except TimeoutError:
            raise StoreTimeout(f"the pipeline store was not read within {timeout_s}s") from None

    async def sync(self, timeout_s: float) -> None:
        """Wait until the follower has applied everything written to the topic so far."""
        consumer = self._require(self._consumer)
        try:
            ends = await consumer.end_offsets([self._tp])
        except KafkaError as exc:
            raise StoreError(f"reading the end of the pipeline store: {exc}") from exc
        end = max(ends.get(self._tp, 0), consumer.highwater(self._tp) or 0)
        await self._wait_position(end, timeout_s)

    async def _wait_position(self, position: int, timeout_s: float) -> None:
        try:
            async with asyncio.timeout(timeout_s), self._progress:
                await self._progress.wait_for(lambda: self._position >= position)
        except TimeoutError:
            raise StoreTimeout(
                f"this replica did not apply the pipeline store up to offset {position} "
                f"within {timeout_s}s (at {self._position})"
            ) from None

    async def _follow(self) -> None:
        consumer = self._require(self._consumer)
        backoff = 0.1
        while True:
            try:
                batches = await consumer.getmany(self._tp, timeout_ms=500)
                self._last_fetch_ok = time.monotonic()
                self._set_problem(None)
                backoff = 0.1
            except KafkaError as exc:
                self._set_problem(f"the follower cannot read: {await self._explain(exc)}")
                logger.debug("pipeline store follower: %r; retrying in %.1fs", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            for record in batches.get(self._tp, ()):
                await self._apply(record.key, record.value, record.offset)
            position = await consumer.position(self._tp)
            highwater = consumer.highwater(self._tp)
            if not self._loaded.is_set() and highwater is not None and position >= highwater:
                await self._apply_loaded()
            async with self._progress:
                self._position = max(self._position, position)
                self._progress.notify_all()

    async def _apply_loaded(self) -> None:
        """The first time the follower reaches the end: start what the store holds now.

        Until then records only update the view, so a restart does not start and stop
        every pipeline the log ever held (with Tansu, or before compaction ran).
        """
        logger.info("pipeline store %r loaded: %d pipelines", self.topic, len(self._pipelines))
        for pipeline in self.all():
            await self._notify(pipeline.name, None, pipeline)
        self._loaded.set()

    async def _apply(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        if key is None:
            logger.warning("pipeline store: record at offset %d has no key; skipped", offset)
            return
        name = key.decode("utf-8", errors="replace")
        old = self._pipelines.get(name)
        new: StoredPipeline | None = None
        if value is not None:
            try:
                new = StoredPipeline.from_value(name, value, offset)
            except (ValueError, TypeError) as exc:
                logger.error(
                    "pipeline store: unreadable record %r at offset %d: %s", name, offset, exc
                )
                return
            self._pipelines[name] = new
        else:
            self._pipelines.pop(name, None)
        if not self._loaded.is_set():
            return
        if old is None and new is None:
            return
        if old is not None and new is not None and old.same_run(new):
            return
        await self._notify(name, old, new)

    async def _notify(
        self, name: str, old: StoredPipeline | None, new: StoredPipeline | None
    ) -> None:
        try:
            if self._on_change is not None:
                await self._on_change(name, old, new)
        except Exception:  # one pipeline's failure must not stop the follower
            logger.exception("pipeline store: applying the change of %r failed", name)

    # -- writing ---------------------------------------------------------------------

    async def put(self, pipeline: StoredPipeline, timeout_s: float) -> StoredPipeline:
        """Write ``pipeline`` and wait until this replica applied it; returns it as stored."""
        stamped = replace(
            pipeline, updated_by=self._instance_id, updated_at_ms=time.time_ns() // 1_000_000
        )
        offset = await self._send(pipeline.name, stamped.to_value())
        await self._wait_position(offset + 1, timeout_s)
        return replace(stamped, offset=offset)

    async def delete(self, name: str, timeout_s: float) -> None:
        """Write a tombstone for ``name`` and wait until this replica applied it."""
        offset = await self._send(name, None)
        await self._wait_position(offset + 1, timeout_s)

    async def _send(self, name: str, value: bytes | None) -> int:
        producer = self._require(self._producer)
        try:
            metadata = await producer.send_and_wait(self.topic, value=value, key=name.encode())
        except KafkaError as exc:
            raise StoreError(f"writing pipeline {name!r} to the store: {exc}") from exc
        return int(metadata.offset)

    @staticmethod
    def _require(client: Any) -> Any:
        if client is None:
            raise StoreError("the pipeline store is not connected")
        return client


async def ensure_compacted_topic(
    cluster: KafkaCluster, topic: str, replication_factor: int, client_id: str
) -> None:
    """Create ``topic`` (one partition, compacted) unless it exists: the service's own
    topics that every replica follows (the pipeline store, the members' reports).
    :class:`AuthorizationError` when the broker refuses us; :class:`StoreError` else."""
    admin = cluster.admin(client_id=client_id)
    try:
        await admin.start()
        await create_topics(admin, {topic: (1, {"cleanup.policy": "compact"})}, replication_factor)
    except AuthorizationError:
        raise
    except TopicCreationFailed as exc:
        raise StoreError(f"creating the topic {topic!r}: {exc.entry}") from None
    except KafkaError as exc:
        if "TopicAlreadyExists" not in type(exc).__name__:
            raise StoreError(f"creating the topic {topic!r}: {exc}") from exc
    finally:
        await admin.close()
