"""Checkpoints and restores of one session's partitions, through the changelog topic.

A checkpoint is: snapshot every partition's changed state, flush outputs, write the
changelog (metadata last), flush, commit offsets. So whatever a checkpoint covers was
produced before it was recorded, and a restart replays only input after it:
at-least-once output with deterministic ids. At-least-once, the snapshot appends the
changed entries to the changelog's batches as it encodes them, behind the outputs (a
checkpoint's records were otherwise held twice at its peak: encoded, then copied into
the batches); what commits them is the metadata records, appended once the outputs and
the entries are acknowledged.

A restore (on assignment) reads the changelog, rebuilds each partition's operator and
watermark generator, seeks to the checkpointed offset (or ``start_from`` without one),
and hands the partitions to the loop all at once. Entries of a checkpoint cut short are
written back (a repair) so the changelog agrees with what was restored.

A partition revoked by a rebalance and assigned straight back to the same member (an
eager rebalance revokes everything, and a member usually gets much of it back) keeps its
state in memory instead: the revoke's checkpoint made the changelog equal to that state,
so if the changelog partition's end offset has not moved since, nobody wrote to it and
reading it back would rebuild exactly the parked state. Anything else -- another member
checkpointed there, the revoke's checkpoint failed, the partition went elsewhere --
restores from the changelog as before.

With exactly-once delivery (:mod:`~service.runtime.kafka.transactions`) a checkpoint is one
Kafka transaction per partition instead: its outputs, its changelog records and its
offset commit together, and a restore first fences the partition's previous owner, then
reads the changelog ``read_committed``.

Checkpoints and restores run one at a time (:attr:`Checkpointer.lock`): the group's
listener can run while the loop awaits a checkpoint, and two checkpoints interleaving
their changelog writes could put an older snapshot after a newer one.

The loop's periodic checkpoint runs beside processing (:meth:`Checkpointer.start`), as
Flink's asynchronous snapshot phase does: the snapshot and the output mark are taken at
once, between two batches; waiting for the outputs' acknowledgements, writing the
changelog and committing then go on in a task while the loop keeps processing (with the
lock held, so the next checkpoint, a restore or a revoke waits for it). Outputs appended
after the mark belong to input after the checkpointed offsets, so the order that makes a
checkpoint correct is kept: outputs before it durable, then its changelog, then the
commit. A stall of the broker's acknowledgements (measured: 170 ms at a checkpoint that
followed a burst of window firings) no longer stops the loop. Checkpoints that end
something (a revoke, a stop, the end of bounded input) are awaited whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.errors import CommitFailedError, IllegalStateError
from aiokafka.structs import OffsetAndMetadata

from service.operators.base import AppliesChanges, Operator, StreamsChanges
from service.runtime.consumer_group.changelog import (
    Appended,
    Encoded,
    RestoredPartition,
    append_checkpoint,
    append_entries_in_slices,
    encode_checkpoint,
    encode_checkpoint_in_slices,
    meta_record,
    read_changelog,
    read_committed_values,
)
from service.runtime.consumer_group.checkpoint_meta import (
    checkpoint_meta,
    kept_in_memory,
    plan_restore,
    version_to_write,
)
from service.runtime.consumer_group.local_state import LOCK_WAIT_S, LocalStates, state_root
from service.runtime.consumer_group.pending_input import PendingInput
from service.runtime.consumer_group.prefetch import Prefetcher
from service.runtime.consumer_group.stages import PartitionBuilding
from service.runtime.consumer_group.standby import Standbys
from service.runtime.consumer_group.views import RunsStage, SessionBasics, SessionClients
from service.runtime.definition import StateBackedFactory
from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.observability.metrics import RuntimeMetrics
from service.runtime.partition.state_hold import StateHold
from service.runtime.partition.task import PartitionTask

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Snapshot:
    """One partition's part of a checkpoint, as its snapshot left it."""

    part: PartitionTask
    offset: int
    """The input offset the checkpoint resumes at."""
    records: Encoded
    """Changelog records still to write, its metadata record last: at-least-once, that
    record alone (the entries went into the batches as they were encoded,
    :func:`~.changelog.append_entries_in_slices`); exactly-once, every entry too (they
    go into the partition's transaction at its commit)."""
    appended: Appended = field(default_factory=Appended)
    """The entries already in the batches."""


Outputs = int | dict[TopicPartition, int]
"""What a checkpoint covers of the outputs: a mark of the session's batches, or with
exactly-once a mark per partition's transaction."""


def tp_label(tp: TopicPartition) -> str:
    return f"{tp.topic}/{tp.partition}"


def _changelog_partition(part: PartitionTask) -> int:
    """The changelog partition a partition is checkpointed to: its own number."""
    partition: int = part.partition
    return partition


class LatenessReport(Protocol):
    """What a restored partition reports through the session's reporter."""

    @property
    def lateness(self) -> Any:
        """The histogram of processing-time timers' lateness."""


class CheckpointSession(SessionBasics, RunsStage, SessionClients, PartitionBuilding, Protocol):
    """What checkpoints and restores use of their session: its clients and where outputs
    go, with what the stage builds a partition with. A restore hands what it built to
    its caller (:meth:`Checkpointer.restore`): it never puts it in the session."""

    @property
    def metrics(self) -> RuntimeMetrics: ...
    @property
    def reporter(self) -> LatenessReport: ...
    @property
    def end_offsets(self) -> Mapping[TopicPartition, int]: ...
    @property
    def state_hold(self) -> StateHold: ...
    def fail(self, exc: BaseException) -> None: ...
    async def stop_prefetch(self) -> Prefetcher | None: ...


@dataclass(slots=True)
class Restored:
    """The partitions of one assignment, built and ready to join the session at once."""

    kept: list[PartitionTask]
    """Kept in memory since this member revoked them (no changelog read)."""
    read: list[PartitionTask]
    """Rebuilt from the changelog."""
    prefetched: dict[TopicPartition, PendingInput]
    """Records the prefetcher read during the join, per partition, to process first."""
    repairs: list[tuple[PartitionTask, dict[str, Any]]] = field(default_factory=list)
    """Entries of a checkpoint cut short, with their committed values to write back."""
    local: list[TopicPartition] = field(default_factory=list)
    """Of ``read``: restored from the rocksdb backend's local store and the changelog's tail."""
    local_keys: int = 0
    """Keys those local stores held."""
    changelog_records: int = 0
    """Changelog records read for ``read``."""
    steps: dict[str, float] = field(default_factory=dict)
    """Seconds of the restore's steps (logged with it): the stores opened, the changelog
    read (its tail with local stores), read again for stores wiped, the committed values
    of a checkpoint cut short, and the partitions built."""

    @property
    def ready(self) -> list[PartitionTask]:
        return [*self.kept, *self.read]


_Read = tuple[
    dict[TopicPartition, RestoredPartition], dict[TopicPartition, Operator], list[TopicPartition]
]
"""What :meth:`Checkpointer._read` read: the restored partitions, the rocksdb ones'
operators, the partitions restored locally."""


HOLD_LOOP_S = 0.05
"""A restore of many rocksdb partitions lets the event loop run at least this often
(opening a RocksDB and committing its checkpoint take milliseconds each, and a consumer
that misses its heartbeats for the session timeout is put out of the group)."""


class _Streamed:
    """A rocksdb partition's operator with the changelog streamed onto it in batches
    (an :class:`~service.runtime.consumer_group.changelog.Applier`): its restore holds
    no more of the partition in memory than its cache, whatever the key count."""

    __slots__ = ("_build", "operator", "seconds")

    def __init__(self, operator: Operator, build: Callable[[], Operator]) -> None:
        self.operator = operator
        self._build = build
        """A new operator on the store started over (a reset)."""
        self.seconds = 0.0
        """Spent applying (of the changelog read's time)."""

    def apply(self, entries: list[tuple[str, Any]]) -> None:
        operator = self.operator
        assert isinstance(operator, AppliesChanges)
        began = time.perf_counter()
        operator.apply_changes(entries)
        self.seconds += time.perf_counter() - began

    def reset(self) -> None:
        self.operator = self._build()


class Checkpointer:
    """Makes a session's partitions durable and brings assigned ones back."""

    def __init__(self, session: CheckpointSession) -> None:
        self.session = session
        self.lock = asyncio.Lock()
        self.last_checkpoint = time.monotonic()
        """Monotonic time of the last completed checkpoint (the loop's interval)."""
        self._background: asyncio.Task[None] | None = None
        self.parked: dict[TopicPartition, tuple[PartitionTask, int]] = {}
        """Revoked partitions checkpointed by this member, with the changelog partition's
        end offset right after that checkpoint; kept until the next assignment."""
        self.local: LocalStates | None = None
        """The rocksdb backend's stores (:mod:`.local_state`), when this stage uses it."""
        self.standbys: Standbys | None = None
        """The warm copies of other members' partitions (:mod:`.standby`), when this
        stage uses the rocksdb backend with standby replicas."""
        if self._uses_rocksdb():
            definition = session.definition
            settings = session.settings
            root = state_root(settings.state_dir)
            self.local = LocalStates(root, definition.changelog_topic, definition.state.cache_bytes)
            replicas = definition.state.standby_replicas
            if replicas is None:
                replicas = settings.standby_replicas
            if replicas > 0:
                self.standbys = Standbys(session, root, definition.changelog_topic, replicas)

    def _uses_rocksdb(self) -> bool:
        """Whether this stage's operators keep their keys in RocksDB: the spec's backend
        (else the service's), for an operator that can, in the stage that runs it."""
        session = self.session
        definition = session.definition
        backend = definition.state.backend or session.settings.state_backend
        factory = definition.operator_factory
        return (
            backend == "rocksdb"
            and session.stage.runs_operator
            and isinstance(factory, StateBackedFactory)
        )

    def assignors(self) -> tuple[Any, ...]:
        """The consumer's assignors: the standbys' first when this stage has them (the
        group falls back to round-robin while a member lacks it)."""
        if self.standbys is None:
            return (RoundRobinPartitionAssignor,)
        return (self.standbys.assignor, RoundRobinPartitionAssignor)

    async def stop_standbys(self) -> None:
        """A rebalance begins: the copies stop, their stores saved and closed (before
        the assignment opens any store)."""
        if self.standbys is not None:
            self.standbys.assignor.forget()
            await self.standbys.stop()

    async def close_standbys(self) -> None:
        """The session ends: the copies stop, and none start again."""
        if self.standbys is not None:
            self.standbys.assignor.forget()
            await self.standbys.close()

    def begin_standbys(self, owned: list[TopicPartition]) -> None:
        """After an assignment: the copies it asks of this member, but of ``owned``,
        started in the background (:meth:`.standby.Standbys.begin`)."""
        if self.standbys is not None:
            self.standbys.begin(owned)

    def release_local(self, tps: list[TopicPartition]) -> None:
        """Close the stores of partitions this session no longer holds."""
        if self.local is not None:
            self.local.close(tps)

    def close_local(self) -> None:
        if self.local is not None:
            self.local.close_all()

    async def park(self, parts: list[PartitionTask]) -> None:
        """Keep revoked, just-checkpointed partitions in case they are assigned back."""
        local = self.local.partitions if self.local is not None else {}
        # nothing to keep; a rocksdb partition restores locally instead (its store closed)
        parts = [part for part in parts if part.next_offset is not None and part.tp not in local]
        ends = await self._changelog_ends([part.partition for part in parts])
        for part in parts:
            self.parked[part.tp] = (part, ends[part.partition])

    async def _changelog_ends(self, partitions: list[int]) -> dict[int, int]:
        session = self.session
        topic = session.definition.changelog_topic
        tps = [TopicPartition(topic, p) for p in sorted(set(partitions))]
        if not tps:
            return {}
        ends = await session.consumer.end_offsets(tps)
        return {tp.partition: int(offset) for tp, offset in ends.items()}

    async def _take_parked(self, new: list[TopicPartition]) -> list[PartitionTask]:
        """The parked partitions of ``new`` whose changelog nobody wrote to since."""
        parked, self.parked = self.parked, {}  # what is not assigned back is dropped
        candidates = [parked[tp] for tp in new if tp in parked]
        if not candidates:
            return []
        try:
            ends = await self._changelog_ends([part.partition for part, _ in candidates])
        except Exception as exc:  # the changelog can say: read it
            logger.info("pipeline %s: changelog end offsets: %r", self.session.name, exc)
            return []
        return kept_in_memory(candidates, _changelog_partition, ends)

    async def checkpoint(self, parts: list[PartitionTask], *, release: bool = False) -> None:
        """Flush outputs, write the partitions' changed state, then commit their offsets
        (after the checkpoint running in the background, if there is one).

        ``release``: this member hands the partitions over (a revoke, a graceful stop);
        the metadata says so, and a restore that finds no such word knows that the
        previous owner was lost (a takeover, counted in metrics)."""
        batches = self.session.batches
        if batches is None or not parts:
            return
        async with self.lock:
            started = time.perf_counter()
            positions = await self._local_positions(parts)
            encoded = await self._snapshot(parts, release)
            mark = self._mark(encoded, batches)
            await self._complete(encoded, batches, mark, positions, started)

    @property
    def in_flight(self) -> bool:
        """Whether a checkpoint or a restore is running (the loop then starts none)."""
        return self.lock.locked()

    def changes_over_bound(self) -> bool:
        """Whether a rocksdb partition's changes since its last checkpoint outgrew its
        cache (:meth:`~.local_state.LocalPartition.over_bound`): a checkpoint is due now."""
        local = self.local
        return local is not None and any(p.over_bound() for p in local.partitions.values())

    async def wait_idle(self) -> None:
        """Until the checkpoint (or restore) running now is done: the loop's backpressure
        when the changes since it outgrow the caches."""
        async with self.lock:
            pass

    async def start(self, parts: list[PartitionTask]) -> None:
        """Snapshot now and complete the checkpoint in the background (see the module
        docstring); nothing if one is running. An error there fails the session."""
        batches = self.session.batches
        if batches is None or not parts or self.lock.locked():
            return
        await self.lock.acquire()  # free, so it returns without yielding
        try:
            started = time.perf_counter()
            positions = await self._local_positions(parts)
            encoded = await self._snapshot(parts, False)  # the loop awaits it: no batch
            mark = self._mark(encoded, batches)
        except BaseException:
            self.lock.release()
            raise
        self._background = asyncio.get_running_loop().create_task(
            self._complete_in_background(encoded, batches, mark, positions, started),
            name=f"clockwork-checkpoint-{self.session.name}",
        )

    async def _complete_in_background(
        self,
        encoded: list[Snapshot],
        batches: BatchProducer,
        mark: Outputs,
        positions: dict[int, int],
        started: float,
    ) -> None:
        try:
            await self._complete(encoded, batches, mark, positions, started)
        except Exception as exc:
            self.session.fail(exc)
        finally:
            self.lock.release()

    async def cancel(self) -> None:
        """Abandon the checkpoint running in the background (a session ending without
        one: what it did not commit, the next owner replays)."""
        task, self._background = self._background, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _mark(self, encoded: list[Snapshot], batches: BatchProducer) -> Outputs:
        """What the checkpoint of ``encoded`` covers of the outputs: everything appended
        so far (a mark of the session's batches), or with exactly-once, each partition's
        transaction up to now (what comes after waits for the next one)."""
        transactions = self.session.transactions
        if transactions is None:
            return batches.mark()
        return transactions.hold([snapshot.part.tp for snapshot in encoded])

    async def _snapshot(self, parts: list[PartitionTask], release: bool) -> list[Snapshot]:
        """The changelog records of every partition that changed since its last
        checkpoint, all of one point of the loop: the state is held still
        (:mod:`~service.runtime.partition.state_hold`) while the entries are encoded and
        the stores flushed in slices, the event loop free between them (heartbeats, the
        broker's answers, the API).

        At-least-once, the entries go into the changelog's batches as they are encoded
        (their metadata records wait for :meth:`_write_and_commit`), behind the outputs
        appended before them: the checkpoint's mark covers both.

        A snapshot cut short (an error, a cancellation) ends the session: the keys it
        took are no longer marked changed, so no later checkpoint of these partitions
        may follow; the next owner restores from the last committed one."""
        encoded = []
        local = self.local.partitions if self.local is not None else None
        batches = self.session.batches if self.session.transactions is None else None
        topic = self.session.definition.changelog_topic
        with self.session.state_hold.holding():
            for part in parts:
                # Outputs held for the checkpoint (a running aggregate under exactly-once)
                # go out now, into what this checkpoint's mark covers.
                part.before_checkpoint()
                version = version_to_write(
                    part.next_offset,
                    part.operator.current_watermark,
                    part.timers.fired,
                    release,
                    part.checkpointed,
                )
                if version is None:
                    continue  # nothing read yet, or nothing happened since the last one
                part.checkpointed = version
                operator = part.operator
                changes = (
                    operator.iter_changes()  # each entry encoded as it comes
                    if isinstance(operator, StreamsChanges)
                    else operator.snapshot_changes().items()
                )
                meta = self.meta(part, release)
                if batches is not None:
                    appended = await append_entries_in_slices(batches, topic, part.tp, changes)
                    snapshot = Snapshot(part, version[0], [meta_record(part.tp, meta)], appended)
                else:
                    records = await encode_checkpoint_in_slices(part.tp, changes, meta)
                    snapshot = Snapshot(part, version[0], records)
                if local is not None and part.tp in local:
                    # The store holds exactly what the changelog records hold.
                    await local[part.tp].flush_in_steps()
                encoded.append(snapshot)
        return encoded

    def meta(self, part: PartitionTask, release: bool) -> dict[str, Any]:
        """``part``'s checkpoint metadata now (:func:`checkpoint_meta`)."""
        return checkpoint_meta(
            offset=part.next_offset,
            generator=part.generator.snapshot(),
            watermark=part.operator.current_watermark,
            fingerprint=self.session.definition.state_fingerprint,
            released=release,
            written_at=int(time.time() * 1000),
            end_offset=part.end_offset,
            finished=part.finished,
        )

    async def _complete(
        self,
        encoded: list[Snapshot],
        batches: BatchProducer,
        outputs: Outputs,
        positions: dict[int, int],
        started: float,
    ) -> None:
        """Wait for the outputs up to mark ``outputs``, write ``encoded``, commit.
        ``positions``: the rocksdb partitions' changelog ends before the snapshot."""
        session = self.session
        metrics = session.metrics
        name = session.name
        entries = sum(s.appended.entries + len(s.records) for s in encoded)
        try:
            # 1. every write of the rocksdb stores that takes room on the disk: a full
            #    disk fails the checkpoint here, before anything of it commits
            self._prepare_local(encoded, positions)
            # 2. the outputs, the changelog, the offsets (one transaction each with
            #    exactly-once)
            if isinstance(outputs, dict):
                size = await self._commit_transactions(encoded, outputs)
            else:
                size = await self._write_and_commit(encoded, batches, outputs)
        except Exception:
            metrics.checkpoint_failures.labels(name).inc()
            raise
        # 3. the stores' checkpoint files name the committed changelog
        self._publish_local(encoded)
        wall = int(time.time() * 1000)
        for snapshot in encoded:
            snapshot.part.last_checkpoint_ms = wall
        self.last_checkpoint = time.monotonic()
        metrics.checkpoint_seconds.labels(name).observe(time.perf_counter() - started)
        metrics.checkpoint_entries.labels(name).inc(entries)
        metrics.checkpoint_bytes.labels(name).inc(size)

    async def _local_positions(self, parts: list[PartitionTask]) -> dict[int, int]:
        """The changelog partitions' ends before a checkpoint of ``parts`` writes its
        records: the position each rocksdb partition's checkpoint file names once it
        committed. Read before the snapshot, which may append entries already."""
        local = self.local.partitions if self.local is not None else {}
        partitions = [part.partition for part in parts if part.tp in local]
        return await self._changelog_ends(partitions) if partitions else {}

    def _prepare_local(self, encoded: list[Snapshot], positions: dict[int, int]) -> None:
        """Before the changelog is written: each rocksdb partition's next checkpoint file
        (:meth:`~service.runtime.partition.rocksdb_store.RocksStore.prepare`), naming the
        position read before the records are written and the keys at the flush."""
        if self.local is None:
            return
        for snapshot in encoded:
            local = self.local.partitions.get(snapshot.part.tp)
            position = positions.get(snapshot.part.partition)
            if local is not None and position is not None:
                local.store.prepare(position, local.flushed)

    def _publish_local(self, encoded: list[Snapshot]) -> None:
        """After the changelog commit: each rocksdb partition's checkpoint file."""
        if self.local is None:
            return
        for snapshot in encoded:
            local = self.local.partitions.get(snapshot.part.tp)
            if local is not None:
                local.store.publish()

    async def _commit_transactions(
        self, encoded: list[Snapshot], marks: dict[TopicPartition, int]
    ) -> int:
        """Exactly-once: commit each partition's transaction (its outputs up to its
        mark, its changelog records, its offset), the partitions side by side."""
        session = self.session
        transactions = session.transactions
        assert transactions is not None
        topic = session.definition.changelog_topic
        sizes = await asyncio.gather(
            *(
                transactions.commit(s.part.tp, marks[s.part.tp], topic, s.records, s.offset)
                for s in encoded
            )
        )
        session.stage.committed({s.part.tp: s.offset for s in encoded})
        return sum(sizes)

    async def _write_and_commit(
        self, encoded: list[Snapshot], batches: BatchProducer, outputs: int
    ) -> int:
        """At-least-once: the outputs and the changelog's entries (both before the mark
        ``outputs``), then the metadata records that commit the entries, then the
        offsets."""
        session = self.session
        name = session.name
        # outputs first: the changelog's commit must not get ahead of them
        await batches.wait_delivered(outputs)
        size = 0
        topic = session.definition.changelog_topic
        for snapshot in encoded:
            size += snapshot.appended.bytes
            size += append_checkpoint(batches, topic, snapshot.part.partition, snapshot.records)
            snapshot.records.clear()  # copied into the batches: freed now, not after the acks
        await batches.wait_delivered(batches.mark())
        # the snapshot's offsets: the loop may have gone on since (start())
        offsets = {s.part.tp: OffsetAndMetadata(s.offset, "") for s in encoded}
        if offsets and session.consumer is not None:
            try:
                await session.consumer.commit(offsets)
            except (CommitFailedError, IllegalStateError) as exc:
                # The changelog, not the group offset, is where a restore resumes.
                logger.info("pipeline %s: offset commit skipped: %s", name, exc)
            else:
                session.stage.committed({tp: o.offset for tp, o in offsets.items()})
        return size

    async def restore(self, new: list[TopicPartition], join: Callable[[Restored], None]) -> None:
        """Rebuild ``new`` (from memory if parked and untouched since, else from the
        changelog) and hand them to ``join``, all at once after the last await, so the
        loop never sees half an assignment; then write back what a checkpoint cut short
        left. Under the checkpoint lock: no checkpoint runs in between."""
        async with self.lock:
            started = time.perf_counter()
            restored = await self._rebuild(new)
            join(restored)
            await self._repair(restored.repairs)
            self._report_restore(restored, started)

    async def _rebuild(self, new: list[TopicPartition]) -> Restored:
        session = self.session
        name = session.name
        definition = session.definition
        if session.transactions is not None:
            # First: fence the partitions' previous owners, so that nothing they have
            # not committed yet can commit once the changelog is read.
            await session.transactions.open(new)
        kept = await self._take_parked(new)
        kept_tps = {part.tp for part in kept}
        new = [tp for tp in new if tp not in kept_tps]
        steps: dict[str, float] = {}
        began = time.perf_counter()
        starts = await self._open_local(new)
        steps["open"] = time.perf_counter() - began
        restored, built, local_tps = await self._read(new, starts, steps)
        # The join is over: what the prefetcher read is taken below or dropped.
        prefetcher = await session.stop_prefetch()
        result = Restored(kept=kept, read=[], prefetched={}, local=local_tps, steps=steps)
        result.changelog_records = sum(state.records for state in restored.values())
        sink = session.sink
        assert sink is not None
        loop = asyncio.get_running_loop()
        wall = int(time.time() * 1000)
        stage = session.stage
        bounded = definition.bounded and stage.reads_source
        pinned = definition.end_offsets is not None
        held = began = time.perf_counter()
        for tp in new:
            if self.local is not None and time.perf_counter() - held > HOLD_LOOP_S:
                await asyncio.sleep(0)  # many stores' commits: let the loop run between
                held = time.perf_counter()
            state = restored.get(tp) or RestoredPartition()
            plan = plan_restore(
                state.meta,
                fingerprint=definition.state_fingerprint,
                now_ms=wall,
                bounded=bounded,
                pinned=pinned,
                known_end=session.end_offsets.get(tp),
            )
            if plan.other_spec:
                logger.warning(
                    "pipeline %s: %s has state of another spec; starting it afresh",
                    name,
                    tp_label(tp),
                )
                state = RestoredPartition()
                if self.local is not None:
                    built[tp] = self._build_local(tp, wipe=True)
            local = self.local.partitions.get(tp) if self.local is not None else None
            if tp in built:
                operator = built[tp]
            else:
                operator = stage.operator(session, tp, session.clock, None)
            if state.entries or (local is not None and not isinstance(operator, AppliesChanges)):
                # With rocksdb even an empty tail: an operator the changelog was not
                # streamed onto rebuilds from its store what it keeps in memory (a
                # join's expiry heap and counts, a process function's timers, a
                # Top-N's epoch).
                operator.restore_changes(state.entries.items())
            if local is not None:
                if local.checkpoint is not None and tp in local_tps:
                    result.local_keys += sum(local.checkpoint.counts.values())
                local.flush()  # the store holds the restored state
                local.store.commit(starts.get(tp.partition, 0), local.flushed)
            generator = stage.generator(tp)
            part = stage.task(
                tp,
                operator,
                generator,
                stage.partition_decoder(session, tp, generator),
                sink,
                session.clock,
                loop,
                session.fail,
                session.reporter.lateness.observe,
            )
            part.check = stage.input_check(tp)
            if plan.checkpointed:
                generator.restore(plan.generator)
                if plan.watermark > operator.current_watermark:
                    part.advance_watermark(plan.watermark)
                if plan.taken_over_after_ms is not None:
                    self._taken_over(plan.taken_over_after_ms)
            offset = plan.offset
            if offset is None:  # no checkpoint: start_from
                offset = await self._start_offset(tp)
            part.next_offset = offset
            if bounded:
                part.end_offset = plan.end_offset
            pending = (
                prefetcher.take(tp, part.next_offset, part.end_offset)
                if prefetcher is not None
                else None
            )
            if pending is not None:
                result.prefetched[tp] = pending
            if state.repair:
                result.repairs.append((part, state.repair))
            result.read.append(part)
        steps["build"] = time.perf_counter() - began
        return result

    async def _read(
        self, new: list[TopicPartition], starts: dict[int, int], steps: dict[str, float]
    ) -> _Read:
        """The changelog of ``new`` read (from ``starts``, the local stores' positions):
        what was restored of each partition, the rocksdb partitions' operators (built on
        their stores first, and for those that take it in batches, the changelog
        streamed onto them: :class:`_Streamed`), and the partitions restored locally."""
        session = self.session
        definition = session.definition
        topic = definition.changelog_topic
        isolation = definition.isolation_level
        cluster = KafkaCluster.of(session.settings)
        local = self.local
        built = {tp: self._build_local(tp) for tp in new} if local is not None else {}
        streams = {
            tp: _Streamed(operator, partial(self._build_local, tp, wipe=True))
            for tp, operator in built.items()
            if isinstance(operator, AppliesChanges)
        }
        began = time.perf_counter()
        restored = (
            await read_changelog(cluster, topic, new, isolation, starts=starts, appliers=streams)
            if new
            else {}
        )
        steps["changelog"] = time.perf_counter() - began
        if local is None:
            return restored, built, []
        # A tail without this partition's metadata (the changelog was reset or made
        # again) or, read into a dict, with a checkpoint cut short (its repair needs the
        # committed values the tail may not hold): the store is wiped, the changelog
        # read whole. (Streamed, a checkpoint cut short is put back below.)
        opened = [tp for tp in new if local.partitions[tp].checkpoint is not None]
        wiped = [
            tp
            for tp in opened
            if restored[tp].meta is None or (tp not in streams and restored[tp].repair)
        ]
        for tp in wiped:
            built[tp] = self._build_local(tp, wipe=True)
            if tp in streams:
                streams[tp] = _Streamed(built[tp], partial(self._build_local, tp, wipe=True))
        if wiped:
            began = time.perf_counter()
            again = {tp: streams[tp] for tp in wiped if tp in streams}
            restored.update(await read_changelog(cluster, topic, wiped, isolation, appliers=again))
            steps["wiped"] = time.perf_counter() - began
        # Streamed entries of a checkpoint cut short: back to their committed values,
        # which the repair writes to the changelog too.
        cut = {tp: restored[tp].cut_from for tp in streams}
        cut_from = {tp: offset for tp, offset in cut.items() if offset is not None}
        if cut_from:
            began = time.perf_counter()
            read: dict[TopicPartition, int] = {}
            committed = await read_committed_values(cluster, topic, cut_from, isolation, read)
            for tp, values in committed.items():
                streams[tp].apply(list(values.items()))
                restored[tp].repair = values
                restored[tp].records += read.get(tp, 0)  # counted: they were read too
            steps["committed values"] = time.perf_counter() - began
        steps["applied"] = sum(stream.seconds for stream in streams.values())
        for tp, stream in streams.items():
            built[tp] = stream.operator  # a reset in the changelog built it again
        return restored, built, [tp for tp in opened if tp not in wiped]

    def _build_local(self, tp: TopicPartition, wipe: bool = False) -> Operator:
        """``tp``'s operator on its rocksdb store (``wipe``: the store started over)."""
        assert self.local is not None
        local = self.local.wipe(tp) if wipe else self.local.partitions[tp]
        session = self.session
        return session.stage.operator(session, tp, session.clock, local.state_map)

    async def _open_local(self, new: list[TopicPartition]) -> dict[int, int]:
        """Open the rocksdb stores of ``new``; where to read each changelog partition
        from: the smallest position their checkpoint files name (0: one has none). A
        RocksDB on disk takes milliseconds to open: the loop runs between every
        :data:`HOLD_LOOP_S` of them (its heartbeats, queries and other pipelines). One
        that another process still holds is waited for
        (:meth:`~.local_state.LocalStates.open_when_free`)."""
        if self.local is None:
            return {}
        starts: dict[int, int] = {}
        held = time.perf_counter()
        for tp in new:
            if time.perf_counter() - held > HOLD_LOOP_S:
                await asyncio.sleep(0)
                held = time.perf_counter()
            # One another process has not closed yet is waited for, the member's
            # heartbeats going on (aiokafka_fixes); then the session fails, saying so.
            checkpoint = (await self.local.open_when_free(tp, LOCK_WAIT_S)).checkpoint
            position = checkpoint.position if checkpoint is not None else 0
            if not isinstance(position, int) or position < 0:
                position = 0
            starts[tp.partition] = min(starts.get(tp.partition, position), position)
        return starts

    async def _repair(self, repairs: list[tuple[PartitionTask, dict[str, Any]]]) -> None:
        """Entries of a checkpoint cut short: write their committed values back now
        (with exactly-once, in the partition's first transaction)."""
        session = self.session
        topic = session.definition.changelog_topic
        for part, repair in repairs:
            meta = self.meta(part, False)
            append_checkpoint(
                session.batches_for(part.tp),
                topic,
                part.partition,
                encode_checkpoint(part.tp, repair.items(), meta),
            )
        for batches in {session.batches_for(part.tp) for part, _ in repairs}:
            await batches.flush()

    def _report_restore(self, restored: Restored, started: float) -> None:
        name = self.session.name
        metrics = self.session.metrics
        metrics.restore_seconds.labels(name).observe(time.perf_counter() - started)
        if restored.kept:
            metrics.partitions_restored.labels(name, "memory").inc(len(restored.kept))
        if restored.local:
            metrics.partitions_restored.labels(name, "local").inc(len(restored.local))
        if len(restored.read) > len(restored.local):
            changelog = len(restored.read) - len(restored.local)
            metrics.partitions_restored.labels(name, "changelog").inc(changelog)
        if self.local is not None:  # the rocksdb backend's stage
            metrics.state_restored_keys.labels(name, "local").inc(restored.local_keys)
            records = restored.changelog_records
            metrics.state_restored_keys.labels(name, "changelog").inc(records)
        logger.info(
            "pipeline %s: assigned %s; restored in %.2f s (%s; %d changelog records read)",
            name,
            ", ".join(
                [tp_label(part.tp) + " (kept in memory)" for part in restored.kept]
                + [tp_label(part.tp) for part in restored.read]
            ),
            time.perf_counter() - started,
            ", ".join(f"{step} {seconds:.2f} s" for step, seconds in restored.steps.items()),
            restored.changelog_records,
        )

    def _taken_over(self, since_checkpoint_ms: int) -> None:
        """A partition whose last owner checkpointed it without handing it over: that
        owner died (or its session failed). The time since that checkpoint bounds the
        time from the loss to this takeover from above (the owner was alive then)."""
        metrics = self.session.metrics
        name = self.session.name
        metrics.partitions_taken_over.labels(name).inc()
        metrics.takeover_delay.labels(name).observe(since_checkpoint_ms / 1000.0)

    async def _start_offset(self, tp: TopicPartition) -> int:
        """Where a partition without a checkpoint starts (``start_from``)."""
        consumer = self.session.consumer
        if self.session.stage.start_from == "earliest":
            offsets = await consumer.beginning_offsets([tp])
        else:
            offsets = await consumer.end_offsets([tp])
        return int(offsets[tp])
