"""The consumer loop of one session: fetch, process, backpressure, checkpoint on time.

Each turn: apply the pause reasons, read a batch (:mod:`~service.runtime.kafka.batch_reader`:
``getmany`` without a ``ConsumerRecord`` per record), process what waits first (records
prefetched during the join, or held back by watermark alignment), hand each partition's
fetched records to its task (decode, process, drain outputs to the sink), update the
partition watermarks, queue the produced batches, wait while too much is unacknowledged
(backpressure), and checkpoint every ``checkpoint_interval_ms`` (sooner, once the
changes since the last outgrow a rocksdb partition's cache, waiting for the one being
written first).

Watermark alignment (``max_drift_ms``; the rule is :mod:`service.core.alignment`'s): a
partition takes the records of a batch only while its watermark before each is at most
``max_drift_ms`` ahead of the other partitions' minimum; the rest is held back as
pending input (the partition paused at the consumer) and taken in later turns as the
others catch up. So the bound holds whatever the fetch size, and the memory held is at
most one fetch per partition (a partition holding records fetches nothing more).

Bounded input: a partition that reached its end offset is finished at once (its
operator gets ``MAX``, which fires its timers, and it is checkpointed); the session ends
only when every partition of the pipeline is finished, here or on another replica, as
the group's committed offsets say. Until then a replica whose own partitions are done
stays in the group, idle, and takes over the partitions of a member that dies or leaves.

The per-record work happens in :class:`~service.runtime.partition.task.PartitionTask`; this
module touches each batch once per partition, never each record (except with
``interval_ms = 0``, where the watermark is recomputed after every record by design).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import Any, Protocol, TypeVar

from aiokafka import TopicPartition
from aiokafka.structs import OffsetAndMetadata

from service.core.time import MIN_TIMESTAMP
from service.operators.base import InputRecord
from service.runtime.consumer_group.bounded_end import (
    Held,
    check_end,
    must_ask_position,
    past_gap,
    reached,
    readable_end,
)
from service.runtime.consumer_group.pending_input import Chunk, PendingInput, cut
from service.runtime.consumer_group.views import (
    HeldPartitions,
    RunsStage,
    SessionBasics,
    SessionClients,
)
from service.runtime.formats.schemas import WriterSchemas
from service.runtime.kafka.batch_reader import BatchReader
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.end_offsets import probe_end_offsets
from service.runtime.kafka.interrupts import Interrupted
from service.runtime.partition.decoding import DeadLetter, RecordDecoder
from service.runtime.partition.task import PartitionTask
from service.runtime.schema_registry.client import SchemaRegistry
from service.runtime.schema_registry.waiting import resolve_waiting
from service.runtime.settings import RuntimeSettings
from service.runtime.shuffle.task import ShuffledPartitionTask
from service.runtime.shuffle.writer import ShuffleWriter

T = TypeVar("T")


class LoopWatermarks(Protocol):
    """What the loop tells the watermark emitter and asks of it."""

    def partition_active(self, tp: TopicPartition, watermark: int, now: int) -> None: ...
    def minimum_excluding(self, tp: TopicPartition, now: int) -> int | None: ...
    def partition_watermarks(self) -> dict[TopicPartition, int]: ...
    def finish(self, tp: TopicPartition) -> None: ...
    def emit(self, now: int) -> None: ...


class LoopCheckpoints(Protocol):
    """What the loop asks of the checkpointer: one on time (or when the changes since the
    last outgrow the caches), and one at a partition's end."""

    @property
    def last_checkpoint(self) -> float: ...
    @property
    def in_flight(self) -> bool: ...
    def changes_over_bound(self) -> bool: ...
    async def wait_idle(self) -> None: ...
    async def start(self, parts: list[PartitionTask]) -> None: ...
    async def checkpoint(self, parts: list[PartitionTask], *, release: bool = False) -> None: ...


class LoopReports(Protocol):
    """What the loop counts into the reporter, and when it has it refresh the metrics."""

    last_refresh: float

    @property
    def batch_seconds(self) -> Any: ...
    @property
    def records_held(self) -> Any: ...
    @property
    def prefetched(self) -> Any: ...
    def records_counter(self, tp: TopicPartition) -> Any: ...
    def refresh(self) -> None: ...


class LoopSession(SessionBasics, RunsStage, SessionClients, HeldPartitions, Protocol):
    """What the loop uses of its session: much of it, as the loop is where the session's
    parts meet, but of the emitter, the checkpointer and the reporter only what it
    calls; the counters and bounded input's progress it keeps there."""

    polls: int
    records_in: int
    end_offsets: dict[TopicPartition, int]
    partitions_done: tuple[int, int]

    @property
    def settings(self) -> RuntimeSettings: ...
    @property
    def stopping(self) -> asyncio.Event: ...
    @property
    def finished_here(self) -> set[TopicPartition]: ...
    @property
    def emitter(self) -> LoopWatermarks: ...
    @property
    def checkpointer(self) -> LoopCheckpoints: ...
    @property
    def reporter(self) -> LoopReports: ...
    @property
    def decoder(self) -> RecordDecoder: ...
    @property
    def registry(self) -> SchemaRegistry: ...
    async def interruptible(self, awaitable: Coroutine[Any, Any, T]) -> T: ...
    def raise_error(self) -> None: ...
    def waiting(self, reason: str | None) -> None: ...


logger = logging.getLogger(__name__)

GROUP_CHECK_INTERVAL_S = 0.5
"""Bounded input: how often a replica whose own partitions are done asks the group
whether every partition of the pipeline is."""


class FetchLoop:
    """Runs the fetch-process loop of ``session`` until a stop or the end of input."""

    def __init__(self, session: LoopSession) -> None:
        self.session = session
        self.per_record = session.stage.watermark.interval_ms == 0
        self.last_group_check = 0.0
        stage = session.stage
        self.schemas_of: Callable[[str], WriterSchemas[Any] | None] | None = None
        """Each source topic's writer schemas by registry id (its decoder's: a join's
        inputs each have their own format); None: no topic's format names any, or the
        stage reads the shuffle, which carries JSON."""
        if stage.reads_source and any(
            stage.writer_schemas(session.decoder, topic) is not None for topic in stage.topics
        ):
            self.schemas_of = partial(stage.writer_schemas, session.decoder)

    async def run(self) -> bool:
        """Consume until stopped (False) or until bounded input is finished (True)."""
        session = self.session
        consumer = session.consumer
        settings = session.settings
        batches = session.batches
        assert batches is not None  # set by Session.run()
        transactions = session.transactions
        checkpointer = session.checkpointer
        reporter = session.reporter
        stop = session.stopping
        timeout_ms = settings.fetch_timeout_ms
        max_records = settings.max_records
        interval_s = settings.checkpoint_interval_ms / 1000.0
        bounded = session.definition.bounded
        perf = time.perf_counter
        pauses = session.pauses
        aligning = session.alignment is not None
        schemas_of = self.schemas_of
        reader = BatchReader(consumer)  # the consumer has started: its fetcher exists
        if not reader.lean:
            logger.warning(
                "pipeline %s: this aiokafka cannot be read batch by batch; using getmany",
                session.name,
            )
        read = reader.read
        ready = False  # pending input that can be taken now: do not wait in the fetch
        while not stop.is_set():
            pauses.apply()
            # ``timeout_ms`` does not bound this call during a group (re)join: aiokafka's
            # ``Fetcher.fetched_records`` first awaits ``wait_for_assignment()`` with no
            # timeout while a reassignment is in progress, and on Tansu a join waits
            # ``session_timeout_ms / 2`` (a first join is often followed by a second one
            # once topic metadata arrives, and a member late with its heartbeat rejoins).
            # It is the one way found in aiokafka 0.14 for a call to last seconds with a
            # healthy broker (a fetch waits at most ``fetch_max_wait_ms``; with every
            # partition paused the call returns after ``timeout_ms``); measured runs of
            # the graceful-restart test showed no call over 0.3 s. A stop never waits
            # for it: ``interruptible`` cancels the call and the close checkpoints.
            try:
                batch = await session.interruptible(
                    read(
                        timeout_ms=0 if ready and not pauses.user_paused else timeout_ms,
                        max_records=max_records,
                    )
                )
            except Interrupted:
                break
            session.polls += 1
            session.raise_error()
            ready = bool(session.pending) and self.process_pending()
            if batch and schemas_of is not None and not await self.resolve_schemas(batch):
                break  # stopped while the registry was away: the batch is read again
            if batch:
                started = perf()
                self.process(batch)
                reporter.batch_seconds.observe(perf() - started)
            if reader.positions:
                self.move_past_gaps(reader.positions)
            if aligning:
                # A partition racing ahead is paused after its batch, not only at the
                # next tick: getmany can return many batches without yielding.
                self.align(session.clock.now_ms())
            batches.send_open()
            await batches.wait_capacity()
            if transactions is not None:
                transactions.send_open()
                await transactions.wait_capacity()
            self.update_highwaters()
            if bounded and await self.bounded_step(batch):
                logger.info("pipeline %s: bounded input finished", session.name)
                return True
            now = time.monotonic()
            due = now - checkpointer.last_checkpoint >= interval_s
            if not due and checkpointer.changes_over_bound():
                # The changes since the last checkpoint outgrew the caches: the next one
                # now, once the one being written (if any) is done; no batch meanwhile.
                if checkpointer.in_flight:
                    await checkpointer.wait_idle()
                due = True
            if due and not checkpointer.in_flight:
                # completes beside the next batches (checkpointing.py)
                await checkpointer.start(list(session.partitions.values()))
            if now - reporter.last_refresh >= settings.metrics_interval_s:
                reporter.last_refresh = now
                reporter.refresh()
        return False

    async def resolve_schemas(self, batch: dict[TopicPartition, list[Any]]) -> bool:
        """Fetch every writer schema the batch names that is not known yet (into the
        cache of each record's topic). While the registry cannot be reached, the stage
        shows paused with the reason and asks again with backoff, the batch in hand;
        False: stopped meanwhile."""
        schemas_of = self.schemas_of
        assert schemas_of is not None
        wanted: dict[int, tuple[WriterSchemas[Any], set[int]]] = {}  # by id() of a cache
        for tp, records in batch.items():
            schemas = schemas_of(tp.topic)
            if schemas is None:
                continue
            missing = schemas.missing(records)
            if missing:
                wanted.setdefault(id(schemas), (schemas, set()))[1].update(missing)
        if not wanted:
            return True
        session = self.session
        settings = session.settings
        try:
            await resolve_waiting(
                session.registry,
                wanted.values(),
                pipeline=session.name,
                what="",
                backoff_s=(settings.restart_backoff_initial_s, settings.restart_backoff_max_s),
                say=session.waiting,
                wait=session.interruptible,
            )
        except Interrupted:
            return False
        return True

    # -- processing --------------------------------------------------------------------
    def process(self, batch: dict[TopicPartition, list[Any]]) -> None:
        session = self.session
        partitions = session.partitions
        sink = session.sink
        assert sink is not None
        aligning = session.alignment is not None
        now = session.clock.now_ms()
        failed: list[DeadLetter] = []
        for tp, records in batch.items():
            part = partitions.get(tp)
            if part is None or not records or part.finished:
                continue
            end = part.end_offset
            if end is not None and records[-1].offset >= end:
                records = [r for r in records if r.offset < end]
                if not records:
                    continue
            after = records[-1].offset + 1
            if aligning or self.per_record or tp in session.pending:
                inputs = part.decode(records, failed)
                if failed:
                    sink.dead_letters(tp, failed)
                    failed.clear()
                chunk = Chunk(inputs, [], len(records), records[0].offset, after)
                waiting = session.pending.get(tp)
                if waiting is not None:  # never while paused for it; in order regardless
                    waiting.chunks.append(chunk)
                    waiting.end = after
                    continue
                self.take(part, chunk, now)
                if chunk.counted < chunk.count:  # held back by alignment
                    session.pending[tp] = PendingInput(
                        chunks=deque((chunk,)), end=after, prefetched=False
                    )
                    session.pauses.draining.add(tp)
                    session.reporter.records_held.inc(len(inputs) - chunk.taken)
                continue
            others = self.others(tp, now)
            count = part.process(records, failed)
            self.processed(part, count, others, now)
            if failed:
                sink.dead_letters(tp, failed)
                failed.clear()

    def move_past_gaps(self, positions: dict[TopicPartition, int]) -> None:
        """Move each partition's next offset to the consumer's position where only
        offsets without a record lie between: transaction markers (read_committed) or a
        compaction gap. A checkpoint then resumes after them, and a partition read to
        its end reports no lag. Not for input still waiting to be processed, nor past a
        bounded partition's end."""
        session = self.session
        partitions = session.partitions
        pending = session.pending
        for tp, position in positions.items():
            part = partitions.get(tp)
            if part is None or tp in pending or part.next_offset is None:
                continue
            part.next_offset = past_gap(part.next_offset, position, part.end_offset)
        positions.clear()

    def process_pending(self) -> bool:
        """Take what waits per partition, before anything fetched: records prefetched
        during the join (one chunk per partition and turn) or held back by watermark
        alignment (as many as it admits now). True if any partition took something."""
        session = self.session
        pending = session.pending
        pauses = session.pauses
        if pauses.user_paused:
            return False
        sink = session.sink
        assert sink is not None
        prefetched = session.reporter.prefetched
        emitter = session.emitter
        now = session.clock.now_ms()
        progressed = False
        for tp, waiting in list(pending.items()):
            part = session.partitions.get(tp)
            if part is None:
                del pending[tp]
                continue
            chunk = waiting.chunks[0]
            if chunk.taken == 0 and chunk.failed:  # prefetched dead letters go first
                sink.dead_letters(tp, chunk.failed)
                chunk.failed = []
            before = chunk.counted
            self.take(part, chunk, now)
            if chunk.counted == before:
                # Held back: it has records, so it is not idle (the others wait for it
                # only while it is behind, which is never the case for a held partition).
                emitter.partition_active(tp, part.generator.current_watermark, now)
                continue
            progressed = True
            if waiting.prefetched:
                prefetched.inc(chunk.counted - before)
            if chunk.counted == chunk.count:
                waiting.chunks.popleft()
            if not waiting.chunks:
                del pending[tp]
                pauses.draining.discard(tp)
        if progressed:
            pauses.apply()
        return progressed

    def take(self, part: PartitionTask, chunk: Chunk, now: int) -> None:
        """Process what may be processed of ``chunk`` now: all of it, or with watermark
        alignment the records it admits (the rest stays in the chunk; the rule is
        :func:`~service.runtime.consumer_group.pending_input.cut`'s)."""
        session = self.session
        inputs = chunk.inputs
        start = chunk.taken
        others = self.others(part.tp, now)
        alignment = session.alignment
        admitted = (
            None if alignment is None else alignment.admit(part.generator, inputs, start, others)
        )
        taking = cut(chunk, admitted)
        if taking is None:
            return
        stop, count, end = taking
        taken = inputs if start == 0 and stop == len(inputs) else inputs[start:stop]
        if self.per_record:
            self.process_per_record(part, taken, count, end, now)
        else:
            part.process_decoded(taken, count, end)
        chunk.taken = stop
        chunk.counted += count
        self.processed(part, count, others, now)

    def processed(self, part: PartitionTask, count: int, others: int | None, now: int) -> None:
        """After ``count`` records of ``part``: its watermark to the emitter, counters,
        and its lead over the others (what alignment bounds, reported in status)."""
        session = self.session
        watermark = part.generator.current_watermark
        if not self.per_record:
            session.emitter.partition_active(part.tp, watermark, now)
        session.records_in += count
        session.reporter.records_counter(part.tp).inc(count)
        if others is not None and others != MIN_TIMESTAMP and watermark != MIN_TIMESTAMP:
            lead = max(0, watermark - others)
            if part.max_lead is None or lead > part.max_lead:
                part.max_lead = lead

    def align(self, now: int) -> None:
        """Watermark alignment: pause the partitions that hold records back or could take
        nothing now, resume the others (the decision is the core's; the loop holds).
        After each batch, and on each tick of the emitter."""
        session = self.session
        alignment = session.alignment
        if alignment is None:
            return
        emitter = session.emitter
        watermarks = emitter.partition_watermarks()
        others = {tp: emitter.minimum_excluding(tp, now) for tp in watermarks}
        to_pause, to_resume = alignment.decide(watermarks, others, session.pending.keys())
        if to_pause or to_resume:
            session.pauses.aligned = set(alignment.paused)
            session.pauses.apply()

    def others(self, tp: TopicPartition, now: int) -> int | None:
        """The minimum over the counted partitions other than ``tp`` (None: none)."""
        return self.session.emitter.minimum_excluding(tp, now)

    def process_per_record(
        self, part: PartitionTask, inputs: Sequence[InputRecord], count: int, end: int, now: int
    ) -> None:
        """``interval_ms = 0``: the combined watermark is recomputed after every record.

        Two stages of a shuffle need less and do less, with the same result:

        - a route stage's watermark only leaves as its partition's markers (its combined
          watermark fires nothing), so the writer routes the records in runs that end
          where the partition's own watermark moves, announcing it after each run (held
          with the batch's rows and written as one frame per target with the advances
          inside: ``shuffle/writer.py``); the combiner hears of it once, after the
          batch (without idle advance, which moves every partition's watermark on the
          clock). :meth:`route_in_runs`;
        - a shuffle partition's watermark moves only at its markers, so the rows between
          two markers are processed as one slice, the watermark recomputed at each
          marker (:meth:`process_between_markers`).
        """
        if isinstance(part, ShuffledPartitionTask):
            self.process_between_markers(part, inputs, count, end, now)
            return
        emitter = self.session.emitter
        active = emitter.partition_active  # the combiner's bound method: no call between
        emit = emitter.emit
        tp = part.tp
        last = len(inputs) - 1
        writer = part.operator if isinstance(part.operator, ShuffleWriter) else None
        direct = writer is not None and not self.session.stage.watermark.idle_advance
        if writer is not None:
            writer.hold()
        try:
            if direct:
                assert writer is not None
                self.route_in_runs(part, writer, inputs, end)
            else:
                for i, record in enumerate(inputs):
                    part.process_one(record, _offset_of(inputs[i + 1][4], end) if i < last else end)
                    active(tp, part.generator.current_watermark, now)
                    emit(now)
        finally:
            if writer is not None:
                writer.release()
        part.skipped(count - len(inputs), end)
        if direct or not inputs:
            active(tp, part.generator.current_watermark, now)
            emit(now)
        part.timers.reschedule()

    @staticmethod
    def route_in_runs(
        part: PartitionTask, writer: ShuffleWriter, inputs: Sequence[InputRecord], end: int
    ) -> None:
        """A route stage's records with ``interval_ms = 0``: in runs, each ending with
        the record that moves the partition's watermark, the new watermark announced
        after it. A record that leaves the watermark where it is leaves its generator
        as it was (``watermark_after`` looks ahead without a change), so the run's
        records before its last are looked ahead from one state."""
        generator = part.generator
        after = generator.watermark_after
        total = len(inputs)
        start = 0
        while start < total:
            current = generator.current_watermark
            stop = start
            while stop < total and after(inputs[stop][1], inputs[stop][2]) == current:
                stop += 1
            stop = min(stop + 1, total)  # the record that moves it ends the run
            part.process_run(
                inputs[start:stop] if start or stop < total else inputs,
                _offset_of(inputs[stop][4], end) if stop < total else end,
            )
            writer.announce(generator.current_watermark, False)
            start = stop

    def process_between_markers(
        self,
        part: ShuffledPartitionTask,
        inputs: Sequence[InputRecord],
        count: int,
        end: int,
        now: int,
    ) -> None:
        """A shuffle partition's records with ``interval_ms = 0``: each run of rows
        between two markers in one slice, the combined watermark recomputed at each
        marker, before the rows after it (a marker's index is the row it precedes)."""
        emitter = self.session.emitter
        tp = part.tp
        total = len(inputs)
        start = 0
        while True:
            if part.markers_before(start) or not inputs:
                emitter.partition_active(tp, part.generator.current_watermark, now)
                emitter.emit(now)
            if start >= total:
                break
            stop = min(part.next_marker(), total)
            part.process_run(
                inputs[start:stop] if start or stop < total else inputs,
                _offset_of(inputs[stop][4], end) if stop < total else end,
            )
            start = stop
        part.skipped(count - total, end)
        part.timers.reschedule()

    # -- bounded input -------------------------------------------------------------------
    def update_highwaters(self) -> None:
        """Each partition's readable end, from the last fetch: the high watermark, or
        read_committed the last stable offset (what a transaction still open holds
        back cannot be read yet), as Kafka's consumer measures its lag."""
        session = self.session
        consumer = session.consumer
        bounded = session.definition.bounded and session.stage.reads_source
        end_of = (
            consumer.last_stable_offset
            if session.definition.isolation_level == "read_committed"
            else consumer.highwater
        )
        for tp, part in session.partitions.items():
            highwater = readable_end(end_of(tp))
            if highwater is not None:
                part.highwater = highwater
                if bounded and part.end_offset is None:  # a partition the probe missed
                    part.end_offset = highwater

    async def bounded_step(self, batch: dict[TopicPartition, list[Any]]) -> bool:
        """Finish the partitions that reached their end; True once the pipeline is
        finished: every partition of it, here or elsewhere."""
        session = self.session
        finished = await self.finish_reached(batch)
        if finished:
            session.emitter.emit(session.clock.now_ms())  # MAX to each: fires its timers
            await session.checkpointer.checkpoint(finished)  # durable: the group sees it
            session.reporter.refresh()
        partitions = session.partitions
        if len(partitions) != len(session.consumer.assignment()):
            return False  # an assignment is still being restored
        if any(not part.finished for part in partitions.values()):
            return False
        now = time.monotonic()
        if now - self.last_group_check < GROUP_CHECK_INTERVAL_S:
            return False
        self.last_group_check = now
        return await self.pipeline_finished()

    async def finish_reached(self, batch: dict[TopicPartition, list[Any]]) -> list[PartitionTask]:
        """Mark the partitions that reached their end offset finished; returns them."""
        session = self.session
        consumer = session.consumer
        finished: list[PartitionTask] = []
        for tp, part in session.partitions.items():
            if part.finished or tp in session.pending:  # pending: records still to process
                continue
            if not session.stage.reads_source:  # a shuffle partition: its markers say
                if getattr(part.generator, "finished", False):
                    self.finish_partition(part)
                    finished.append(part)
                continue
            end = part.end_offset
            if end is None:
                continue
            position = part.next_offset
            if must_ask_position(position, end, bool(batch.get(tp))):
                # offsets can have gaps (compaction, transaction markers): ask the consumer
                position = await consumer.position(tp)
                part.next_offset = position
            if reached(position, end):
                self.finish_partition(part)
                finished.append(part)
        return finished

    def finish_partition(self, part: PartitionTask) -> None:
        session = self.session
        part.finished = True
        session.finished_here.add(part.tp)
        session.emitter.finish(part.tp)
        session.pauses.finished.add(part.tp)
        session.pauses.apply()

    async def pipeline_finished(self) -> bool:
        """Whether every partition of the stage reached its end: this replica's by its
        own account, the others' by the offsets committed in the group.

        A shuffle partition's end is known only once every source said ``MAX`` in it;
        markers go to every shuffle partition, so when this replica's are finished, so
        is what stage 1 writes, and the others' ends are the topic's ends now."""
        session = self.session
        consumer = session.consumer
        if not session.stage.reads_source:
            session.end_offsets = await probe_end_offsets(
                KafkaCluster.of(session.settings), session.stage.topics
            )
        reads_source = session.stage.reads_source
        done = 0
        total = 0
        for tp, probed in session.end_offsets.items():
            total += 1
            part = session.partitions.get(tp)
            committed = await consumer.committed(tp)
            held = None if part is None else Held(part.end_offset, part.finished, part.next_offset)
            check = check_end(probed, held, committed, source=reads_source)
            done += check.done
            if part is not None:
                part.next_offset = check.next_offset
            if check.recommit is not None:
                # the finishing checkpoint's commit was skipped (a rebalance): again
                await consumer.commit({tp: OffsetAndMetadata(check.recommit, "")})
        session.partitions_done = (done, total)
        return done == total


def _offset_of(source: Any, end: int) -> int:
    """The offset an input record's source was fetched at; ``end`` for a frame's row,
    whose frame is one record (the loop processes a chunk whole before a checkpoint can
    read the partition's next offset, so what it holds in between is never seen)."""
    return end if type(source) is tuple else int(source.offset)
