"""Every replica's report of what it runs, on a compacted topic every replica follows.

As Kafka Connect's status topic: each member (a replica's process when it runs alone;
each of its workers when it runs several, ``SERVICE_WORKERS``) publishes, every
``interval_s``, its local status of every pipeline it runs (key
``<member>/<pipeline>``) and a heartbeat (key ``<member>/``, so that a member running
no pipeline shows too); a pipeline it stops running gets a tombstone,
and a member that stops gracefully tombstones everything it published. Every member
follows the topic from its start and keeps the newest record per key, so any replica
can answer for the whole pipeline (:mod:`service.api.pipeline_view`). A replica that
runs workers serves the API from a process that runs no pipeline: its board only follows
(``local=None``), and the replica's own part is its workers' reports.

Best effort by design: the reports are a view, never a decision. A broker that cannot be
used leaves the view with this replica's own status only (the board retries with a
backoff); nothing waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from service.api.pipeline_view import MemberReport, whole_pipeline_status
from service.api.store import ensure_compacted_topic
from service.runtime.kafka.clients import KafkaCluster

__all__ = ["MemberBoard"]

logger = logging.getLogger(__name__)

LocalStatus = Callable[[], Mapping[str, Mapping[str, Any]]]
"""This replica's status of every pipeline it runs, by name (JSON-ready dicts)."""


class MemberBoard:
    """Publishes this member's reports and follows everyone's."""

    def __init__(
        self,
        cluster: KafkaCluster,
        topic: str,
        member: str,
        local: LocalStatus | None,
        *,
        replica: str | None = None,
        worker: int = 0,
        address: str = "",
        interval_s: float = 2.0,
        replication_factor: int = 1,
        fetch_max_wait_ms: int = 50,
    ) -> None:
        self._cluster = cluster
        self.topic = topic
        self.member = member
        self.replica = replica or member
        self.host = socket.gethostname()
        self.worker = worker
        self.address = address
        """Where other replicas send this member's pull queries."""
        self._local = local
        self.interval_s = interval_s
        self._replication = replication_factor
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._tp = TopicPartition(topic, 0)
        self._reports: dict[str, MemberReport] = {}
        """Newest record per key, this member's own included."""
        self._published: set[str] = set()
        """Pipelines this member has a live report of on the topic."""
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._taken: tuple[int, Mapping[str, Mapping[str, Any]]] | None = None

    # -- what the view reads -----------------------------------------------------------

    @property
    def publishes(self) -> bool:
        """Whether this process is a member (runs pipelines), not only a follower."""
        return self._local is not None

    def me(self, now_ms: int, status: Mapping[str, Any] | None = None) -> MemberReport:
        """This member as a report published now (its live status, not its last record)."""
        return MemberReport(
            self.member, self.host, self.worker, now_ms, status, self.replica, self.address
        )

    def view_of(self, pipeline: str, now_ms: int) -> list[MemberReport]:
        """Every member's report of ``pipeline``: this member's live status (when it runs
        the pipeline) and the others' newest."""
        own = self._own(now_ms, pipeline)
        return [*own, *self.reports_of(pipeline)]

    def view(self, now_ms: int) -> list[MemberReport]:
        """Every member's report of every pipeline, this member's live."""
        return [*self._own(now_ms), *self.reports()]

    def heartbeat_view(self, now_ms: int) -> list[MemberReport]:
        """Every member's heartbeat, this member's now."""
        own = [self.me(now_ms)] if self.publishes else []
        return [*own, *self.heartbeats()]

    def replica_view_of(self, pipeline: str, now_ms: int) -> list[MemberReport]:
        """The reports of ``pipeline`` by this replica's members (its workers)."""
        return [r for r in self.view_of(pipeline, now_ms) if r.replica == self.replica]

    def whole_status(self, pipeline: str, now_ms: int, lost_after_ms: int) -> dict[str, Any]:
        """``pipeline`` over every member's report (``starting`` before any reports it)."""
        whole = whole_pipeline_status(
            pipeline, self.view_of(pipeline, now_ms), now_ms, lost_after_ms
        )
        return whole if whole is not None else _starting(pipeline, "pipeline")

    def replica_status(self, pipeline: str, now_ms: int, lost_after_ms: int) -> dict[str, Any]:
        """This replica's part of ``pipeline``: its workers' reports merged."""
        reports = self.replica_view_of(pipeline, now_ms)
        whole = whole_pipeline_status(pipeline, reports, now_ms, lost_after_ms)
        if whole is None:
            return _starting(pipeline, "local")
        return {**whole, "scope": "local"}

    def _local_at(self, now_ms: int) -> Mapping[str, Mapping[str, Any]]:
        """This member's live statuses, taken once per ``now_ms`` (a sampler asking for
        each pipeline in turn at one moment snapshots them once)."""
        taken = self._taken
        if taken is None or taken[0] != now_ms:
            assert self._local is not None
            taken = self._taken = (now_ms, self._local())
        return taken[1]

    def _own(self, now_ms: int, pipeline: str | None = None) -> list[MemberReport]:
        if self._local is None:
            return []
        local = self._local_at(now_ms)
        names = [pipeline] if pipeline is not None else list(local)
        return [self.me(now_ms, local[n]) for n in names if n in local]

    def reports_of(self, pipeline: str) -> list[MemberReport]:
        """The other members' newest reports of ``pipeline``."""
        return [
            r
            for r in self._reports.values()
            if r.member != self.member and r.status is not None and r.status.get("name") == pipeline
        ]

    def reports(self) -> list[MemberReport]:
        """Every other member's newest report of every pipeline."""
        return [r for r in self._reports.values() if r.member != self.member and r.status]

    def heartbeats(self) -> list[MemberReport]:
        """Every other member's newest heartbeat."""
        return [r for r in self._reports.values() if r.member != self.member and not r.status]

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"member-board:{self.topic}"
        )

    async def stop(self, timeout_s: float = 5.0) -> None:
        """Stop publishing; tombstone what this member published (best effort, within
        ``timeout_s``: a member that cannot say goodbye shows as lost, then forgotten)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        producer = self._producer
        if producer is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(timeout_s):
                    for pipeline in [*self._published, *([""] if self.publishes else [])]:
                        await producer.send(self.topic, None, key=self._key(pipeline))
                    await producer.flush()
        await self._close()

    async def _run(self) -> None:
        backoff = 0.5
        while True:
            try:
                await self._connect()
                follow = asyncio.create_task(self._follow())
                try:
                    while True:
                        await self._publish()
                        backoff = 0.5
                        await asyncio.sleep(self.interval_s)
                finally:
                    follow.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await follow
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.info("member reports on %r not usable now: %r", self.topic, exc)
                await self._close()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30.0)

    async def _connect(self) -> None:
        await ensure_compacted_topic(
            self._cluster, self.topic, self._replication, f"clockwork-members-{self.member}"
        )
        self._producer = self._cluster.producer(
            client_id=f"clockwork-members-{self.member}", acks=1, linger_ms=0
        )
        self._consumer = self._cluster.consumer(
            client_id=f"clockwork-members-{self.member}",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=self._fetch_max_wait_ms,
        )
        await self._producer.start()  # a failed start still needs its stop: see _close
        await self._consumer.start()
        self._consumer.assign([self._tp])
        await self._consumer.seek_to_beginning(self._tp)

    async def _close(self) -> None:
        consumer, self._consumer = self._consumer, None
        producer, self._producer = self._producer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()
        if producer is not None:
            with contextlib.suppress(Exception):
                await producer.stop()

    # -- publishing and following ---------------------------------------------------------

    def _key(self, pipeline: str) -> bytes:
        return f"{self.member}/{pipeline}".encode()

    async def _publish(self) -> None:
        producer = self._producer
        assert producer is not None
        if self._local is None:
            return  # a follower: nothing of its own to report
        now = int(time.time() * 1000)
        local = dict(self._local())
        identity = {
            "member": self.member,
            "replica": self.replica,
            "host": self.host,
            "worker": self.worker,
            "address": self.address,
        }
        for name, status in local.items():
            value = {**identity, "published_ms": now, "status": status}
            await producer.send(self.topic, orjson.dumps(value), key=self._key(name))
        for gone in self._published - set(local):
            await producer.send(self.topic, None, key=self._key(gone))
        beat = {**identity, "published_ms": now}
        await producer.send(self.topic, orjson.dumps(beat), key=self._key(""))
        await producer.flush()
        self._published = set(local)

    async def _follow(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            batches = await consumer.getmany(self._tp, timeout_ms=500)
            for records in batches.values():
                for record in records:
                    self._apply(record.key, record.value)

    def _apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        text = key.decode("utf-8", "replace")
        if value is None:
            self._reports.pop(text, None)
            return
        try:
            data = orjson.loads(value)
            report = MemberReport(
                member=str(data["member"]),
                host=str(data.get("host", "")),
                worker=int(data.get("worker", 0)),
                published_ms=int(data["published_ms"]),
                status=data.get("status"),
                replica=str(data.get("replica") or data["member"]),
                address=str(data.get("address") or ""),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            logger.debug("member report %r not read", text)
            return
        self._reports[text] = report


def _starting(pipeline: str, scope: str) -> dict[str, Any]:
    return {"name": pipeline, "scope": scope, "state": "starting", "reason": None, "partitions": []}
