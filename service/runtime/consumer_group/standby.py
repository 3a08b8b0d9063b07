"""Standby replicas of the rocksdb backend's partitions (issue 53; Kafka Streams'
``num.standby.replicas``).

A member keeps warm copies of partitions other members own: it tails their changelog
partitions into its own RocksDB store of each (the same directory its restore would
open, :mod:`.local_state`) and writes the store's local checkpoint file with the position
it reached, so that when the partition is assigned to it (a failover, a rebalance) the
restore finds that checkpoint and replays only the changelog's tail.

- **Placement** (:func:`~service.core.standby.standby_placement`): the group's leader
  computes it at every rebalance in :class:`StandbyAssignor`, which assigns the active
  partitions as Kafka's round-robin assignor does and hands every member, with its
  assignment, the partitions it stands by for and the whole placement (for the status).
  Members that run another protocol (a version without standbys) make the group fall
  back to round-robin, without standbys.
- **What is applied**: only committed checkpoints. Records of a partition are held until
  its metadata record (what commits a checkpoint, :mod:`.changelog`), then handed to the
  partition's operator built on the store (``restore_changes``: the operator maps its
  entries onto its maps as a restore does), so the store holds what an active restore
  would write; with exactly-once the changelog is read ``read_committed``. Nothing is
  ever written to Kafka.
- **The local checkpoint** names the offset of the first record of the last checkpoint
  applied, as the owner's own file names where its last checkpoint's records begin: a
  restore reading from there reads that checkpoint again (the operator's metadata entry
  and its keys' flags are in it, not in the store, and its metadata record) and then
  what came after. It is written every checkpoint interval while something was applied,
  and when the copy stops.
- **Hand-over**: every rebalance's revoke stops the copies (their task cancelled and
  awaited, their stores flushed, checkpointed and closed) before its checkpoint, so
  before the assignment's restore opens any store; after the restore, the copies of the
  new placement start again in a task of their own (:meth:`Standbys.begin`: the
  callback does not wait for their consumer), never of a partition this member now
  owns. So a store is opened by one of them at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiokafka import TopicPartition
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from service.core.standby import standby_placement
from service.operators.base import Operator
from service.runtime.consumer_group.local_state import LocalPartition, LocalStates
from service.runtime.consumer_group.stages import PartitionBuilding
from service.runtime.consumer_group.views import RunsStage, SessionBasics
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.observability.metrics import RuntimeMetrics
from service.runtime.observability.status import StandbyStatus
from service.runtime.pipeline_topics.names import META, STATE, entry_prefix

logger = logging.getLogger(__name__)

__all__ = ["StandbyAssignor", "Standbys"]

TAIL_FETCH_WAIT_MS = 200
"""The tail's fetch wait: how stale a copy may run behind a quiet changelog."""


def _tp(item: Any) -> TopicPartition:
    return TopicPartition(str(item[0]), int(item[1]))


class StandbyAssignor:
    """Kafka's round-robin assignment of the active partitions, plus the standbys'
    placement for every member (in the assignment's user data).

    An object per session, used by aiokafka as an assignor (duck-typed: it calls
    ``name``, ``metadata``, ``assign`` and ``on_assignment``)."""

    name = "clockwork-standby"
    version = 0

    def __init__(self, member: str, replicas: int, store: str = "") -> None:
        self.member = member
        """This member's name (in the metadata: what the placement names it by)."""
        self.replicas = replicas
        self.store = store
        """Where this member keeps its stores (the host and the state directory: the
        workers of one replica share it); empty: a place of its own."""
        self.standby: set[TopicPartition] = set()
        """What this member stands by for, as of the last assignment."""
        self.placement: dict[TopicPartition, tuple[str, ...]] = {}
        """Every partition's standbys, by member name, as of the last assignment."""

    def forget(self) -> None:
        """A rebalance begins: the last assignment no longer holds (if the group falls
        back to round-robin, :meth:`on_assignment` is not called)."""
        self.standby = set()
        self.placement = {}

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        data = {"member": self.member, "store": self.store}
        return ConsumerProtocolMemberMetadata(self.version, list(topics), orjson.dumps(data))

    def assign(
        self,
        cluster: ClusterMetadata,
        members: Mapping[str, ConsumerProtocolMemberMetadata],
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        actives = RoundRobinPartitionAssignor.assign(cluster, members)
        said = {member_id: _said(meta) for member_id, meta in members.items()}
        names = {m: str(data.get("member") or m) for m, data in said.items()}
        stores = {m: str(data["store"]) for m, data in said.items() if data.get("store")}
        owners = {
            tp: member_id
            for member_id, assignment in actives.items()
            for tp in assignment.partitions()
        }
        placement = standby_placement(owners, members, self.replicas, stores)
        standby: dict[str, list[list[Any]]] = {member_id: [] for member_id in members}
        for tp, standbys in sorted(placement.items()):
            for member_id in standbys:
                standby[member_id].append([tp.topic, tp.partition])
        where = [
            [tp.topic, tp.partition, [names[m] for m in standbys]]
            for tp, standbys in sorted(placement.items())
        ]
        return {
            member_id: ConsumerProtocolMemberAssignment(
                assignment.version,
                assignment.assignment,
                orjson.dumps({"standby": standby[member_id], "placement": where}),
            )
            for member_id, assignment in actives.items()
        }

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:
        try:
            data = orjson.loads(assignment.user_data or b"{}")
            self.standby = {_tp(item) for item in data.get("standby", ())}
            self.placement = {
                _tp(item): tuple(str(m) for m in item[2]) for item in data.get("placement", ())
            }
        except (orjson.JSONDecodeError, TypeError, ValueError, IndexError, AttributeError):
            logger.warning("standby assignment not understood: %r", assignment.user_data)
            self.forget()


def _said(meta: ConsumerProtocolMemberMetadata) -> dict[str, Any]:
    """What a member says of itself in its metadata (nothing: another version's)."""
    try:
        data = orjson.loads(meta.user_data or b"{}")
    except orjson.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


class StandbySession(SessionBasics, RunsStage, PartitionBuilding, Protocol):
    """What the standbys use of their session: what builds an operator, the metrics."""

    @property
    def metrics(self) -> RuntimeMetrics: ...


@dataclass(slots=True)
class _Copy:
    """One partition's warm copy: its store, the operator built on it, what is held."""

    tp: TopicPartition
    local: LocalPartition
    operator: Operator
    pending: dict[str, Any] = field(default_factory=dict)
    """Entries read since the partition's last metadata record (None: deleted)."""
    pending_records: int = 0
    position: int | None = None
    """The offset of the last metadata record applied."""
    first: int | None = None
    """The offset of the first record read since the last metadata record (of the
    checkpoint being read)."""
    resume: int | None = None
    """The offset of the first record of the last checkpoint applied: what the local
    checkpoint file names (a restore reads that checkpoint again)."""
    offset: int | None = None
    """That checkpoint's source offset."""
    unsaved: bool = False
    """Applied since the local checkpoint file was last written."""


class Standbys:
    """The warm copies one session keeps (the rocksdb backend, ``standby_replicas``)."""

    def __init__(
        self, session: StandbySession, root: Path, changelog_topic: str, replicas: int
    ) -> None:
        self.session = session
        settings = session.settings
        store = f"{socket.gethostname()}:{os.path.abspath(root)}"
        self.assignor = StandbyAssignor(settings.member_name(), replicas, store)
        self.stores = LocalStates(root, changelog_topic, session.definition.state.cache_bytes)
        self.changelog_topic = changelog_topic
        self.copies: dict[TopicPartition, _Copy] = {}
        self._by_prefix: dict[str, _Copy] = {}
        self._consumer: Any = None
        self._task: asyncio.Task[None] | None = None
        """The copies' task: their consumer's start, then their tail (:meth:`begin`)."""
        self._closed = False
        self._ends: dict[int, int] = {}
        """Changelog partition -> the end its last fetch saw, minus the read position."""
        self._saved_at = time.monotonic()
        self._lag = session.metrics.standby_lag

    # -- what the status reads ---------------------------------------------------------
    def placement(self) -> Mapping[TopicPartition, tuple[str, ...]]:
        return self.assignor.placement

    def status(self) -> tuple[StandbyStatus, ...]:
        stage = self.session.stage.name
        return tuple(
            StandbyStatus(
                tp.topic,
                tp.partition,
                copy.position,
                copy.offset,
                self._lag_of(copy),
                copy.local.keys(),
                stage,
            )
            for tp, copy in sorted(self.copies.items())
        )

    def _lag_of(self, copy: _Copy) -> int | None:
        behind = self._ends.get(copy.tp.partition)
        return None if behind is None else behind + copy.pending_records

    # -- lifecycle -------------------------------------------------------------------
    def begin(self, owned: Iterable[TopicPartition]) -> None:
        """After an assignment: keep the copies it asks of this member, but of ``owned``,
        in a task of their own (the rebalance callback returns at once: the copies'
        consumer starts outside it). Every assignment follows a revoke that stopped the
        last copies (:meth:`stop`)."""
        if self._closed:  # the session ended (an assignment its close cut short)
            return
        running = self._task is not None and not self._task.done()
        if running or self.copies:  # not expected: never two at once
            logger.warning("pipeline %s: standby copies already kept", self.session.name)
            return
        wanted = set(self.assignor.standby)
        self._task = asyncio.get_running_loop().create_task(
            self._run(set(owned), wanted), name=f"clockwork-standby-{self.session.name}"
        )

    async def _run(self, owned: set[TopicPartition], wanted: set[TopicPartition]) -> None:
        """Open the copies' stores (in one step, no await in between), start their
        consumer, then tail their changelog partitions until :meth:`stop` cancels it."""
        starts = self.open_copies(owned, wanted)
        if not starts:
            return
        session = self.session
        definition = session.definition
        consumer = KafkaCluster.of(session.settings).consumer(
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=TAIL_FETCH_WAIT_MS,
            max_partition_fetch_bytes=4 * 1024 * 1024,
            isolation_level=definition.isolation_level,
        )
        self._consumer = consumer
        try:
            await consumer.start()
            parts = [TopicPartition(self.changelog_topic, p) for p in sorted(starts)]
            consumer.assign(parts)
            for part in parts:
                if starts[part.partition] > 0:
                    consumer.seek(part, starts[part.partition])
                else:
                    await consumer.seek_to_beginning(part)
        except Exception as exc:  # a copy is an optimisation: the changelog has it all
            logger.warning("pipeline %s: standby copies not started: %r", session.name, exc)
            self._close_copies()
            await self._stop_consumer()
            return
        self._saved_at = time.monotonic()
        logger.info(
            "pipeline %s: standing by for %s",
            session.name,
            ", ".join(f"{tp.topic}/{tp.partition}" for tp in self.copies),
        )
        await self._tail()

    def open_copies(
        self, owned: Iterable[TopicPartition], wanted: Iterable[TopicPartition] | None = None
    ) -> dict[int, int]:
        """Open the stores of the copies ``wanted`` (default: those the last assignment
        asks of this member) but of ``owned``, each with the operator that applies
        checkpoints onto it; where to read each changelog partition from (the smallest
        position their local checkpoints name; 0: one has none)."""
        owned = set(owned)
        session = self.session
        starts: dict[int, int] = {}
        copies = self.assignor.standby if wanted is None else wanted
        for tp in sorted(tp for tp in copies if tp not in owned):
            try:
                local = self.stores.open(tp)
                operator = session.stage.operator(session, tp, session.clock, local.state_map)
            except Exception as exc:  # e.g. held open by another process: no copy of it
                logger.warning(
                    "pipeline %s: no standby copy of %s/%s: %r",
                    session.name,
                    tp.topic,
                    tp.partition,
                    exc,
                )
                self.stores.close([tp])
                continue
            copy = _Copy(tp, local, operator)
            self.copies[tp] = copy
            self._by_prefix[entry_prefix(tp.topic, tp.partition)] = copy
            checkpoint = local.checkpoint
            position = checkpoint.position if checkpoint is not None else 0
            if not isinstance(position, int) or position < 0:
                position = 0
            starts[tp.partition] = min(starts.get(tp.partition, position), position)
        return starts

    async def close(self) -> None:
        """The session ends: :meth:`stop`, and no copies from now on (an assignment that
        completes after the close began starts none)."""
        self._closed = True
        await self.stop()

    async def stop(self) -> None:
        """Stop the copies: their task (starting or tailing) cancelled and awaited, every
        copy's store saved (its checkpoint file) and closed. Awaited by the revoke before
        the next assignment opens any store, and by the session's close."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._close_copies()
        await self._stop_consumer()

    async def _stop_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()

    def _close_copies(self) -> None:
        """Every copy's store saved and closed (in one step, no await in between)."""
        for copy in self.copies.values():
            try:
                self._save(copy)
            except Exception as exc:  # the next opening finds no file: a rebuild
                logger.warning(
                    "pipeline %s: standby copy of %s/%s not saved: %r",
                    self.session.name,
                    copy.tp.topic,
                    copy.tp.partition,
                    exc,
                )
        self.stores.close(list(self.copies))
        name = self.session.name
        for tp in self.copies:
            with contextlib.suppress(KeyError):
                self._lag.remove(name, f"{tp.topic}/{tp.partition}")
        self.copies.clear()
        self._by_prefix.clear()
        self._ends.clear()

    # -- the tail --------------------------------------------------------------------
    async def _tail(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        interval = self.session.settings.checkpoint_interval_ms / 1000
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=1000, max_records=10_000)
                for records in batch.values():
                    for record in records:
                        self.apply(record.offset, record.key, record.value)
                for part in consumer.assignment():
                    highwater = consumer.highwater(part)
                    if highwater is not None:
                        position = await consumer.position(part)
                        self._ends[part.partition] = max(0, highwater - position)
                self._report()
                if time.monotonic() - self._saved_at >= interval:
                    for copy in self.copies.values():
                        self._save(copy)
                    self._saved_at = time.monotonic()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the copies stay as they are; the next rebalance retries
            logger.warning("pipeline %s: standby tail stopped: %r", self.session.name, exc)

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        """One changelog record at ``offset``: held until its partition's metadata record
        commits the checkpoint, then applied onto the copy's store."""
        if key is None:
            return
        topic, partition, kind_entry = key.decode().split("|", 2)
        copy = self._by_prefix.get(f"{topic}|{partition}|")
        if copy is None:
            return
        copy.pending_records += 1
        if copy.first is None:
            copy.first = offset
        if kind_entry == META:
            if value is None:  # a reset: the partition starts over empty
                self._reset(copy)
                return
            meta = orjson.loads(value)
            copy.operator.restore_changes(copy.pending.items())
            copy.pending = {}
            copy.pending_records = 0
            copy.position = offset
            copy.resume = copy.first
            copy.first = None
            source = meta.get("offset") if isinstance(meta, dict) else None
            copy.offset = source if isinstance(source, int) else None
            copy.unsaved = True
            return
        kind, _, entry = kind_entry.partition("|")
        if kind == STATE:
            copy.pending[entry] = None if value is None else orjson.loads(value)

    def _reset(self, copy: _Copy) -> None:
        """The changelog reset the partition: its copy starts over, empty."""
        session = self.session
        local = self.stores.wipe(copy.tp)
        copy.local = local
        copy.operator = session.stage.operator(session, copy.tp, session.clock, local.state_map)
        copy.pending = {}
        copy.pending_records = 0
        copy.position = None
        copy.first = None
        copy.resume = None
        copy.offset = None
        copy.unsaved = False

    def _save(self, copy: _Copy) -> None:
        """The store holds the copy's last applied checkpoint: say so in its file."""
        if not copy.unsaved or copy.resume is None:
            return
        local = copy.local
        local.flush()
        local.store.commit(copy.resume, local.flushed)
        copy.unsaved = False

    def _report(self) -> None:
        name = self.session.name
        for tp, copy in self.copies.items():
            lag = self._lag_of(copy)
            if lag is not None:
                self._lag.labels(name, f"{tp.topic}/{tp.partition}").set(lag)
