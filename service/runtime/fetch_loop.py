"""The consumer loop of one session: fetch, process, backpressure, checkpoint on time.

Each turn: apply the pause reasons, read a batch (:mod:`~service.runtime.batch_reader`:
``getmany`` without a ``ConsumerRecord`` per record), hand each partition's records
to its task (decode, process, drain outputs to the sink), update the combined watermark,
queue the produced batches, wait while too much is unacknowledged (backpressure), and
checkpoint every ``checkpoint_interval_ms``. Bounded input ends when every assigned
partition reached the end offset captured from the fetch high watermark.

The per-record work happens in :class:`~service.runtime.partition.PartitionTask`; this
module touches each batch once per partition, never each record (except with
``interval_ms = 0``, where the watermark is recomputed after every record by design).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition

from service.runtime.batch_reader import BatchReader
from service.runtime.decoding import DeadLetter
from service.runtime.interrupts import Interrupted
from service.runtime.partition import PartitionTask

if TYPE_CHECKING:
    from service.runtime.session import Session

logger = logging.getLogger(__name__)


class FetchLoop:
    """Runs the fetch-process loop of ``session`` until a stop or the end of input."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.per_record = session.definition.watermark.interval_ms == 0

    async def run(self) -> bool:
        """Consume until stopped (False) or until bounded input is finished (True)."""
        session = self.session
        consumer = session.consumer
        settings = session.settings
        batches = session.batches
        assert batches is not None  # set by Session.run()
        checkpointer = session.checkpointer
        reporter = session.reporter
        stop = session.runner._stop
        timeout_ms = settings.fetch_timeout_ms
        max_records = settings.max_records
        interval_s = settings.checkpoint_interval_ms / 1000.0
        bounded = session.definition.bounded
        perf = time.perf_counter
        pauses = session.pauses
        aligning = session.alignment is not None
        reader = BatchReader(consumer)  # the consumer has started: its fetcher exists
        if not reader.lean:
            logger.warning(
                "pipeline %s: this aiokafka cannot be read batch by batch; using getmany",
                session.name,
            )
        read = reader.read
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
                        # prefetched records wait: take what is fetched, do not wait for more
                        timeout_ms=0 if session.pending and not pauses.user_paused else timeout_ms,
                        max_records=max_records,
                    )
                )
            except Interrupted:
                break
            session.polls += 1
            session.raise_error()
            if session.pending:
                self.process_prefetched()
            if batch:
                started = perf()
                self.process(batch)
                if aligning:
                    # A partition racing ahead is caught after its batch, not only at
                    # the next tick: getmany can return many batches without yielding.
                    session.align(session.clock.now_ms())
                reporter.batch_seconds.observe(perf() - started)
            batches.send_open()
            await batches.wait_capacity()
            self.update_highwaters()
            if bounded and await self.bounded_done(batch):
                await self.finish()
                return True
            now = time.monotonic()
            if now - checkpointer.last_checkpoint >= interval_s and not checkpointer.in_flight:
                # completes beside the next batches (checkpointing.py)
                await checkpointer.start(list(session.partitions.values()))
            if now - reporter.last_refresh >= settings.metrics_interval_s:
                reporter.last_refresh = now
                reporter.refresh()
        return False

    def process(self, batch: dict[TopicPartition, list[Any]]) -> None:
        session = self.session
        partitions = session.partitions
        sink = session.sink
        assert sink is not None
        combiner = session.emitter.combiner
        records_counter = session.reporter.records_counter
        now = session.clock.now_ms()
        failed: list[DeadLetter] = []
        for tp, records in batch.items():
            part = partitions.get(tp)
            if part is None or not records:
                continue
            end = part.end_offset
            if end is not None and records[-1].offset >= end:
                records = [r for r in records if r.offset < end]
                if not records:
                    continue
            if self.per_record:
                self.process_per_record(part, records, failed, now)
            else:
                part.process(records, failed)
                combiner.update(tp, part.generator.current_watermark, now)
            count = len(records)
            session.records_in += count
            records_counter(tp).inc(count)
            if failed:
                sink.dead_letters(tp, failed)
                failed.clear()

    def process_prefetched(self) -> None:
        """One chunk per partition of the records prefetched during the join (each
        partition stays paused at the consumer until its last chunk is processed)."""
        session = self.session
        pending = session.pending
        pauses = session.pauses
        if pauses.user_paused:
            return
        sink = session.sink
        assert sink is not None
        combiner = session.emitter.combiner
        records_counter = session.reporter.records_counter
        prefetched = session.metrics.prefetched_records.labels(session.name)
        now = session.clock.now_ms()
        for tp, waiting in list(pending.items()):
            part = session.partitions.get(tp)
            if part is None:
                del pending[tp]
                continue
            chunk = waiting.chunks.popleft()
            part.process_decoded(chunk.inputs, chunk.count, chunk.end)
            combiner.update(tp, part.generator.current_watermark, now)
            if chunk.failed:
                sink.dead_letters(tp, chunk.failed)
            session.records_in += chunk.count
            records_counter(tp).inc(chunk.count)
            prefetched.inc(chunk.count)
            if not waiting.chunks:
                del pending[tp]
                pauses.draining.discard(tp)
                pauses.apply()

    def process_per_record(
        self, part: PartitionTask, records: list[Any], failed: list[DeadLetter], now: int
    ) -> None:
        """``interval_ms = 0``: the combined watermark is recomputed after every record."""
        emitter = self.session.emitter
        combiner = emitter.combiner
        emit = emitter.emit
        tp = part.tp
        inputs = part.decode(records, failed)
        for record in inputs:
            part.process_one(record)
            combiner.update(tp, part.generator.current_watermark, now)
            emit(now)
        if not inputs:
            combiner.update(tp, part.generator.current_watermark, now)
        part.timers.reschedule()

    def update_highwaters(self) -> None:
        session = self.session
        consumer = session.consumer
        bounded = session.definition.bounded
        for tp, part in session.partitions.items():
            highwater = consumer.highwater(tp)
            if highwater is not None:
                part.highwater = highwater
                if bounded and part.end_offset is None:
                    part.end_offset = highwater

    async def bounded_done(self, batch: dict[TopicPartition, list[Any]]) -> bool:
        """Whether every assigned partition reached the end offset captured at start."""
        session = self.session
        consumer = session.consumer
        partitions = session.partitions
        if not partitions or len(partitions) != len(consumer.assignment()):
            return False  # an assignment is still being restored
        done = True
        for tp, part in partitions.items():
            if part.finished:
                continue
            if tp in session.pending:  # prefetched records still to process
                done = False
                continue
            end = part.end_offset
            if end is None:
                done = False
                continue
            position = part.next_offset
            if (position is None or position < end) and not batch.get(tp):
                # offsets can have gaps (compaction, transaction markers): ask the consumer
                position = await consumer.position(tp)
                part.next_offset = position
            if position is not None and position >= end:
                part.finished = True
                session.pauses.finished.add(tp)
                session.pauses.apply()
            else:
                done = False
        return done

    async def finish(self) -> None:
        """Bounded input ended: watermark MAX fires everything; then flush and checkpoint."""
        session = self.session
        session.emitter.finish()
        await session.checkpointer.checkpoint(list(session.partitions.values()))
        session.reporter.refresh()
        logger.info("pipeline %s: bounded input finished", session.name)
