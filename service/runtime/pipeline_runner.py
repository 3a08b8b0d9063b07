"""One pipeline on this instance: the consumer loop, rebalances, checkpoints, restarts.

Layers (style.md, "task, operator, state"): this module owns the I/O; each assigned
partition is a :class:`~service.runtime.partition.PartitionTask` with its own operator
instance and watermark generator; operators stay synchronous.

The loop: ``getmany`` a batch, hand each partition's records to its task (decode,
process, drain outputs to the sink), update the combined watermark, queue the produced
batches, wait while too much is unacknowledged (backpressure), checkpoint every
``checkpoint_interval_ms``. A checkpoint is: snapshot every partition's changed state,
flush outputs, write the changelog (metadata last), flush, commit offsets. So whatever
a checkpoint covers was produced before it was recorded, and a restart replays only
input after it: at-least-once output with deterministic ids.

Rebalances: the group's listener checkpoints revoked partitions and drops them, and
restores assigned ones from the changelog (state, watermark generator, offset) before
they are fetched.

Failures: any error of the loop, the producer, a timer or a checkpoint ends the session;
its in-memory state is dropped (the changelog has it) and a new session starts after an
exponential backoff. A stop is graceful: the batch in hand is finished, outputs are
flushed, every partition is checkpointed and committed, and the consumer leaves the
group, so a restart re-emits nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError
from aiokafka.structs import OffsetAndMetadata

from service.core.alignment import WatermarkAlignment
from service.core.time import MIN_TIMESTAMP, Clock, SystemClock
from service.core.watermarks import make_generator
from service.runtime.batch_producer import BatchProducer
from service.runtime.changelog import (
    RestoredPartition,
    append_checkpoint,
    encode_checkpoint,
    read_changelog,
)
from service.runtime.decoding import DeadLetter, RecordDecoder
from service.runtime.definition import PipelineDefinition
from service.runtime.metrics import METRICS, RuntimeMetrics
from service.runtime.partition import PartitionTask
from service.runtime.pauses import PauseControl
from service.runtime.settings import RuntimeSettings
from service.runtime.sinks import OutputSink
from service.runtime.status import PartitionStatus, PipelineState, PipelineStatus
from service.runtime.topics import ensure_topics
from service.runtime.watermark_emitter import WatermarkEmitter

logger = logging.getLogger(__name__)

_HEALTHY_SESSION_S = 30.0

T = TypeVar("T")


class Interrupted(Exception):
    """A stop cancelled an await that can block for long (a group join)."""


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, session: _Session) -> None:
        self._session = session

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._session.on_revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self._session.on_assigned(list(assigned))


class PipelineRunner:
    """Runs one pipeline until stopped; restarts its session after errors."""

    def __init__(
        self,
        definition: PipelineDefinition,
        settings: RuntimeSettings,
        clock: Clock | None = None,
        metrics: RuntimeMetrics = METRICS,
    ) -> None:
        self.definition = definition
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics
        self.state = PipelineState.STARTING
        self.reason: str | None = None
        self.restarts = 0
        self.paused = False
        self._stop = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._session: _Session | None = None

    # -- control ---------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._main(), name=f"clockwork-pipeline-{self.definition.name}"
            )

    async def stop(self) -> None:
        """Graceful: finish the batch in hand, flush, checkpoint, commit, leave the group.

        A consumer still joining its group (``start``, or a ``getmany`` held by a
        rebalance) is interrupted rather than waited for: a join can take the whole
        rebalance timeout.
        """
        self._stop.set()
        if self._session is not None:
            self._session.interrupt()
        task = self._task
        if task is not None:
            await asyncio.shield(task)
        if self.state is not PipelineState.FINISHED:
            self._set_state(PipelineState.STOPPED)

    async def kill(self) -> None:
        """Stop without a checkpoint (tests: a crash that keeps the process)."""
        self._stop.set()
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._set_state(PipelineState.STOPPED)

    def pause(self) -> None:
        """Stop consuming now (a fetch in flight is dropped by the consumer); state kept.

        Holds for partitions assigned later too (a rebalance), until :meth:`resume`.
        """
        self.paused = True
        if self._session is not None:
            self._session.set_user_paused(True)
        if self.state is PipelineState.RUNNING:
            self._set_state(PipelineState.PAUSED)

    def resume(self) -> None:
        """Consume again; partitions paused for another reason (restoring, finished,
        watermark alignment) stay paused until that reason is gone."""
        self.paused = False
        if self._session is not None:
            self._session.set_user_paused(False)
        if self.state is PipelineState.PAUSED:
            self._set_state(PipelineState.RUNNING)

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    async def wait_for_state(self, *states: PipelineState, timeout_s: float) -> PipelineState:
        """Wait until the pipeline is in one of ``states``; TimeoutError otherwise."""
        async with asyncio.timeout(timeout_s):
            while self.state not in states:
                self._changed.clear()
                await self._changed.wait()
        return self.state

    def _set_state(self, state: PipelineState, reason: str | None = None) -> None:
        self.state = state
        self.reason = reason
        self.metrics.pipeline_up.labels(self.definition.name).set(
            1 if state in (PipelineState.RUNNING, PipelineState.PAUSED) else 0
        )
        self._changed.set()

    # -- status ----------------------------------------------------------------------
    def status(self) -> PipelineStatus:
        session = self._session
        parts: tuple[PartitionStatus, ...] = ()
        watermark = None
        records_in = 0
        if session is not None:
            now = self.clock.now_ms()
            parts = tuple(session.partition_status(p, now) for p in session.partitions.values())
            watermark = session.emitter.current
            records_in = session.records_in
            idle_advancing = session.emitter.idle_advancing
        else:
            idle_advancing = False
        return PipelineStatus(
            name=self.definition.name,
            state=self.state,
            reason=self.reason,
            watermark=watermark,
            partitions=parts,
            records_in=records_in,
            restarts=self.restarts,
            idle_advancing=idle_advancing,
        )

    # -- sessions --------------------------------------------------------------------
    async def _main(self) -> None:
        backoff = self.settings.restart_backoff_initial_s
        name = self.definition.name
        while not self._stop.is_set():
            started = time.monotonic()
            session = _Session(self)
            self._session = session
            try:
                finished = await session.run()
            except asyncio.CancelledError:
                await session.close(checkpoint=False)
                raise
            except Exception as exc:
                await session.close(checkpoint=False)
                if time.monotonic() - started > _HEALTHY_SESSION_S:
                    backoff = self.settings.restart_backoff_initial_s
                self.restarts += 1
                self.metrics.pipeline_restarts.labels(name).inc()
                reason = f"{type(exc).__name__}: {exc}"
                logger.warning(
                    "pipeline %s failed (%s); restarting in %.1fs", name, reason, backoff
                )
                self._set_state(PipelineState.FAILED, f"{reason} (retrying in {backoff:.1f}s)")
                try:
                    async with asyncio.timeout(backoff):
                        await self._stop.wait()
                except TimeoutError:
                    pass
                backoff = min(backoff * 2, self.settings.restart_backoff_max_s)
                continue
            if finished:
                self._set_state(PipelineState.FINISHED)
            return


class _Session:
    """One consumer-group membership of a pipeline: its clients and partitions."""

    def __init__(self, runner: PipelineRunner) -> None:
        self.runner = runner
        self.definition = definition = runner.definition
        self.settings = runner.settings
        self.clock = runner.clock
        self.metrics = runner.metrics
        self.name = definition.name
        self.partitions: dict[TopicPartition, PartitionTask] = {}
        self.decoder = RecordDecoder(definition)
        wm = definition.watermark
        self.per_record = wm.interval_ms == 0
        self.alignment: WatermarkAlignment[TopicPartition] | None = (
            WatermarkAlignment(wm.max_drift_ms) if wm.max_drift_ms is not None else None
        )
        self.pauses = PauseControl(runner.paused)
        self.emitter = WatermarkEmitter(
            self.partitions,
            self.clock,
            wm.interval_ms,
            wm.idle_timeout_ms,
            self._after_emit,
            idle_advance=wm.idle_advance,
            on_tick=self.align if self.alignment is not None else None,
        )
        self.records_in = 0
        self.polls = 0
        """Fetches (``getmany`` calls) done: lets tests wait for the loop to turn."""
        self.interrupted = False
        self._pending: asyncio.Task[Any] | None = None
        self.error: BaseException | None = None
        self.consumer: Any = None
        self.producer: Any = None
        self.batches: BatchProducer | None = None
        self.sink: OutputSink | None = None
        self.checkpoint_on_revoke = True
        # Checkpoints and restores run one at a time: the group's listener can run
        # while the loop awaits a checkpoint, and two checkpoints interleaving their
        # changelog writes could put an older snapshot after a newer one.
        self.lock = asyncio.Lock()
        self.last_checkpoint = time.monotonic()
        self.last_metrics = 0.0
        self._alignment_reported = (0, 0)
        self._m_in: dict[TopicPartition, Any] = {}
        self._m_batch = self.metrics.batch_seconds.labels(self.name)
        self._m_lateness = self.metrics.processing_timer_lateness.labels(self.name)

    # -- lifecycle -------------------------------------------------------------------
    async def run(self) -> bool:
        """Consume until stopped (False) or until bounded input is finished (True)."""
        runner = self.runner
        settings = self.settings
        definition = self.definition
        counts = await ensure_topics(
            settings.bootstrap_servers, definition, settings.replication_factor
        )
        self.producer = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap_servers,
            acks="all",
            linger_ms=0,
            max_batch_size=settings.max_batch_bytes,
            request_timeout_ms=settings.request_timeout_ms,
            enable_idempotence=False,
        )
        await self.producer.start()
        self.batches = BatchProducer(self.producer, settings.max_pending_bytes)
        self.batches.start()
        self.sink = OutputSink(definition, self.batches, counts)
        heartbeat = settings.heartbeat_interval_ms or max(100, settings.session_timeout_ms // 3)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap_servers,
            group_id=definition.group_id,
            enable_auto_commit=False,
            auto_offset_reset=definition.start_from,
            fetch_max_wait_ms=settings.fetch_max_wait_ms,
            max_partition_fetch_bytes=settings.max_partition_fetch_bytes,
            fetch_max_bytes=settings.fetch_max_bytes,
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=heartbeat,
            request_timeout_ms=settings.request_timeout_ms,
        )
        self.pauses.consumer = self.consumer
        self.consumer.subscribe(list(definition.topics), listener=_Listener(self))
        try:
            await self.interruptible(self.consumer.start())  # joins the group
        except Interrupted:
            await self.close(checkpoint=True)
            return False
        self.emitter.start(self.fail)
        runner._set_state(PipelineState.PAUSED if runner.paused else PipelineState.RUNNING)
        finished = await self._loop()
        if finished:
            await self.close(checkpoint=False)  # the finish already checkpointed
        else:
            await self.close(checkpoint=True)
        return finished

    async def close(self, checkpoint: bool) -> None:
        """Stop the clients; with ``checkpoint`` first make every partition durable."""
        await self.emitter.stop()
        for part in self.partitions.values():
            part.close()
        if checkpoint and self.consumer is not None and self.error is None:
            await self.checkpoint(list(self.partitions.values()))
        self.checkpoint_on_revoke = False
        if self.consumer is not None:
            if self.interrupted and not self.partitions:
                await _abandon_join(self.consumer)
            try:
                await self.consumer.stop()
            except Exception:
                logger.warning(
                    "pipeline %s: consumer did not stop cleanly", self.name, exc_info=True
                )
            self.consumer = None
        if self.batches is not None:
            await self.batches.close()
        if self.producer is not None:
            try:
                await self.producer.stop()
            except Exception:
                logger.warning(
                    "pipeline %s: producer did not stop cleanly", self.name, exc_info=True
                )
            self.producer = None
        for tp in list(self.partitions):
            self._forget_metrics(tp)
        self.partitions.clear()

    async def interruptible(self, awaitable: Coroutine[Any, Any, T]) -> T:
        """Await ``awaitable`` in a task that :meth:`interrupt` can cancel.

        Raises :class:`Interrupted` when a stop cancelled it; a cancellation of the
        session itself (``kill``) propagates as it is.
        """
        if self.interrupted:
            awaitable.close()
            raise Interrupted
        task = asyncio.get_running_loop().create_task(awaitable)
        self._pending = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.interrupted and (current is None or current.cancelling() == 0):
                raise Interrupted from None
            raise
        finally:
            self._pending = None

    def interrupt(self) -> None:
        """A stop: cancel the join or fetch being awaited; the loop then ends gracefully."""
        self.interrupted = True
        if self._pending is not None:
            self._pending.cancel()

    def fail(self, exc: BaseException) -> None:
        """An error outside the loop (a timer, the emitter): the loop ends the session."""
        if self.error is None:
            self.error = exc

    def _raise_error(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"pipeline {self.name}: {self.error!r}") from self.error

    def _after_emit(self) -> None:
        if self.batches is not None:
            self.batches.send_open()

    # -- the loop --------------------------------------------------------------------
    async def _loop(self) -> bool:
        runner = self.runner
        consumer = self.consumer
        settings = self.settings
        batches = self.batches
        assert batches is not None  # set by run()
        stop = runner._stop
        timeout_ms = settings.fetch_timeout_ms
        max_records = settings.max_records
        interval_s = settings.checkpoint_interval_ms / 1000.0
        bounded = self.definition.bounded
        perf = time.perf_counter
        pauses = self.pauses
        aligning = self.alignment is not None
        while not stop.is_set():
            pauses.apply()
            try:
                batch = await self.interruptible(
                    consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
                )
            except Interrupted:
                break
            self.polls += 1
            self._raise_error()
            if batch:
                started = perf()
                self._process(batch)
                if aligning:
                    # A partition racing ahead is caught after its batch, not only at
                    # the next tick: getmany can return many batches without yielding.
                    self.align(self.clock.now_ms())
                self._m_batch.observe(perf() - started)
            batches.send_open()
            await batches.wait_capacity()
            self._update_highwaters()
            if bounded and await self._bounded_done(batch):
                await self._finish()
                return True
            now = time.monotonic()
            if now - self.last_checkpoint >= interval_s:
                await self.checkpoint(list(self.partitions.values()))
            if now - self.last_metrics >= settings.metrics_interval_s:
                self.last_metrics = now
                self._refresh_metrics()
        return False

    def _process(self, batch: dict[TopicPartition, list[Any]]) -> None:
        partitions = self.partitions
        sink = self.sink
        assert sink is not None
        combiner = self.emitter.combiner
        now = self.clock.now_ms()
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
                self._process_per_record(part, records, failed, now)
            else:
                part.process(records, failed)
                combiner.update(tp, part.generator.current_watermark, now)
            count = len(records)
            self.records_in += count
            counter = self._m_in.get(tp)
            if counter is None:
                counter = self._m_in[tp] = self.metrics.records_in.labels(
                    self.name, f"{tp.topic}/{tp.partition}"
                )
            counter.inc(count)
            if failed:
                sink.dead_letters(tp.partition, failed)
                failed.clear()

    def _process_per_record(
        self, part: PartitionTask, records: list[Any], failed: list[DeadLetter], now: int
    ) -> None:
        """``interval_ms = 0``: the combined watermark is recomputed after every record."""
        combiner = self.emitter.combiner
        emit = self.emitter.emit
        tp = part.tp
        inputs = part.decode(records, failed)
        for record in inputs:
            part.process_one(record)
            combiner.update(tp, part.generator.current_watermark, now)
            emit(now)
        if not inputs:
            combiner.update(tp, part.generator.current_watermark, now)
        part.timers.reschedule()

    def set_user_paused(self, paused: bool) -> None:
        """The user paused or resumed the pipeline: takes effect at once."""
        self.pauses.user_paused = paused
        self.pauses.apply()

    def align(self, now: int) -> None:
        """Watermark alignment after a tick: pause partitions too far ahead, resume the
        ones back within ``max_drift_ms`` (issue 10; the decision is the core's)."""
        alignment = self.alignment
        if alignment is None:
            return
        combiner = self.emitter.combiner
        watermarks = {tp: combiner.partition_watermark(tp) for tp in combiner.partitions}
        to_pause, to_resume = alignment.decide(
            watermarks, combiner.current, combiner.idle_partitions(now)
        )
        if to_pause or to_resume:
            self.pauses.aligned = set(alignment.paused)
            self.pauses.apply()

    def _update_highwaters(self) -> None:
        consumer = self.consumer
        for tp, part in self.partitions.items():
            highwater = consumer.highwater(tp)
            if highwater is not None:
                part.highwater = highwater
                if self.definition.bounded and part.end_offset is None:
                    part.end_offset = highwater

    async def _bounded_done(self, batch: dict[TopicPartition, list[Any]]) -> bool:
        """Whether every assigned partition reached the end offset captured at start."""
        if not self.partitions or len(self.partitions) != len(self.consumer.assignment()):
            return False  # an assignment is still being restored
        done = True
        for tp, part in self.partitions.items():
            if part.finished:
                continue
            end = part.end_offset
            if end is None:
                done = False
                continue
            position = part.next_offset
            if (position is None or position < end) and not batch.get(tp):
                # offsets can have gaps (compaction, transaction markers): ask the consumer
                position = await self.consumer.position(tp)
                part.next_offset = position
            if position is not None and position >= end:
                part.finished = True
                self.pauses.finished.add(tp)
                self.pauses.apply()
            else:
                done = False
        return done

    async def _finish(self) -> None:
        """Bounded input ended: watermark MAX fires everything; then flush and checkpoint."""
        self.emitter.finish()
        await self.checkpoint(list(self.partitions.values()))
        self._refresh_metrics()
        logger.info("pipeline %s: bounded input finished", self.name)

    # -- checkpoints -----------------------------------------------------------------
    async def checkpoint(self, parts: list[PartitionTask]) -> None:
        """Flush outputs, write the partitions' changed state, then commit their offsets."""
        if self.batches is None or not parts:
            return
        async with self.lock:
            await self._checkpoint(parts, self.batches)

    async def _checkpoint(self, parts: list[PartitionTask], batches: BatchProducer) -> None:
        started = time.perf_counter()
        fingerprint = self.definition.state_fingerprint
        encoded = []
        for part in parts:
            if part.next_offset is None:
                continue
            version = (part.next_offset, part.operator.current_watermark, part.timers.fired)
            if version == part.checkpointed:
                continue  # nothing happened since the last checkpoint
            part.checkpointed = version
            changes = part.operator.snapshot_changes()
            meta = {
                "offset": part.next_offset,
                "generator": part.generator.snapshot(),
                "watermark": part.operator.current_watermark,
                "fingerprint": fingerprint,
            }
            encoded.append((part, encode_checkpoint(part.tp, changes, meta)))
        try:
            await batches.flush()  # outputs first: the changelog must not get ahead of them
            size = 0
            entries = 0
            topic = self.definition.changelog_topic
            for part, records in encoded:
                size += append_checkpoint(batches, topic, part.partition, records)
                entries += len(records)
            await batches.flush()
            offsets = {part.tp: OffsetAndMetadata(part.next_offset, "") for part, _ in encoded}
            if offsets and self.consumer is not None:
                try:
                    await self.consumer.commit(offsets)
                except (CommitFailedError, IllegalStateError) as exc:
                    # The changelog, not the group offset, is where a restore resumes.
                    logger.info("pipeline %s: offset commit skipped: %s", self.name, exc)
        except Exception:
            self.metrics.checkpoint_failures.labels(self.name).inc()
            raise
        wall = int(time.time() * 1000)
        for part, _ in encoded:
            part.last_checkpoint_ms = wall
        self.last_checkpoint = time.monotonic()
        self.metrics.checkpoint_seconds.labels(self.name).observe(time.perf_counter() - started)
        self.metrics.checkpoint_entries.labels(self.name).inc(entries)
        self.metrics.checkpoint_bytes.labels(self.name).inc(size)

    # -- rebalances ------------------------------------------------------------------
    async def on_revoked(self, revoked: list[TopicPartition]) -> None:
        parts = [self.partitions.pop(tp) for tp in revoked if tp in self.partitions]
        for part in parts:
            part.close()
            self._report_timer_counts(part)  # what happened since the last refresh
            self.emitter.combiner.revoke(part.tp)
            self._forget_metrics(part.tp)
        for tp in revoked:
            self.pauses.forget(tp)
            if self.alignment is not None:
                self.alignment.forget(tp)
        if parts and self.checkpoint_on_revoke and self.error is None:
            try:
                await self.checkpoint(parts)
            except Exception as exc:
                logger.warning("pipeline %s: checkpoint on revoke failed: %r", self.name, exc)
                self.fail(exc)
        if parts:
            logger.info("pipeline %s: revoked %s", self.name, ", ".join(_tp(p.tp) for p in parts))

    async def on_assigned(self, assigned: list[TopicPartition]) -> None:
        new = [tp for tp in assigned if tp not in self.partitions]
        if not new:
            return
        # No fetching until the state is restored: records fetched meanwhile would be
        # skipped and fetched again after the seek. The consumer forgot every pause on
        # the rebalance, so the user's pause is applied again here too.
        self.pauses.restoring.update(new)
        self.pauses.apply()
        try:
            async with self.lock:
                await self._restore(new)
        except Exception as exc:
            logger.warning("pipeline %s: restore failed: %r", self.name, exc)
            self.fail(exc)

    async def _restore(self, new: list[TopicPartition]) -> None:
        started = time.perf_counter()
        definition = self.definition
        restored = await read_changelog(
            self.settings.bootstrap_servers, definition.changelog_topic, new
        )
        sink = self.sink
        assert sink is not None
        loop = asyncio.get_running_loop()
        repairs: list[tuple[PartitionTask, dict[str, Any]]] = []
        ready: list[PartitionTask] = []
        for tp in new:
            state = restored.get(tp) or RestoredPartition()
            meta = state.meta
            if meta is not None and meta.get("fingerprint", "") != definition.state_fingerprint:
                logger.warning(
                    "pipeline %s: %s has state of another spec; starting it afresh",
                    self.name,
                    _tp(tp),
                )
                state, meta = RestoredPartition(), None
            operator = definition.operator_factory(self.clock)
            if state.entries:
                operator.restore_changes(state.entries.items())
            wm = definition.watermark
            generator = make_generator(wm.strategy, wm.max_out_of_orderness_ms, wm.field)
            part = PartitionTask(
                tp,
                operator,
                generator,
                self.decoder,
                sink,
                self.clock,
                loop,
                self.fail,
                self._m_lateness.observe,
            )
            if meta is not None:
                generator.restore(meta["generator"])
                watermark = int(meta.get("watermark", MIN_TIMESTAMP))
                if watermark > operator.current_watermark:
                    part.advance_watermark(watermark)
                part.next_offset = int(meta["offset"])
            else:
                part.next_offset = await self._start_offset(tp)
            if state.repair:
                repairs.append((part, state.repair))
            ready.append(part)
        # All at once, after the last await: the loop never sees half an assignment.
        now = self.clock.now_ms()
        for part in ready:
            # Records fetched before this point were skipped; the seek fetches them again.
            self.consumer.seek(part.tp, part.next_offset)
            self.pauses.restoring.discard(part.tp)
            self.partitions[part.tp] = part
            self.emitter.combiner.assign(part.tp, now, part.generator.current_watermark)
            part.timers.reschedule()
        self.pauses.apply()
        for part, repair in repairs:
            # Entries of a checkpoint cut short: write their committed values back now.
            meta = {
                "offset": part.next_offset,
                "generator": part.generator.snapshot(),
                "watermark": part.operator.current_watermark,
                "fingerprint": definition.state_fingerprint,
            }
            assert self.batches is not None
            append_checkpoint(
                self.batches,
                definition.changelog_topic,
                part.partition,
                encode_checkpoint(part.tp, repair, meta),
            )
        if repairs:
            assert self.batches is not None
            await self.batches.flush()
        self.metrics.restore_seconds.labels(self.name).observe(time.perf_counter() - started)
        logger.info("pipeline %s: assigned %s", self.name, ", ".join(_tp(tp) for tp in new))

    async def _start_offset(self, tp: TopicPartition) -> int:
        """Where a partition without a checkpoint starts (``start_from``)."""
        if self.definition.start_from == "earliest":
            offsets = await self.consumer.beginning_offsets([tp])
        else:
            offsets = await self.consumer.end_offsets([tp])
        return int(offsets[tp])

    # -- reporting -------------------------------------------------------------------
    def partition_status(self, part: PartitionTask, now: int) -> PartitionStatus:
        gauges = part.operator.gauges()
        combiner = self.emitter.combiner
        idle = part.tp in combiner.partitions and combiner.is_idle(part.tp, now)
        watermark = part.watermark
        combined = self.emitter.current
        drift = None if watermark is None or combined is None else max(0, watermark - combined)
        return PartitionStatus(
            topic=part.tp.topic,
            partition=part.tp.partition,
            offset=part.next_offset,
            end_offset=part.end_offset if part.end_offset is not None else part.highwater,
            lag=part.lag(),
            watermark=watermark,
            idle=idle,
            event_timers=gauges.event_timers,
            processing_timers=gauges.processing_timers,
            windows_open=gauges.windows_open,
            keys=gauges.keys,
            records_in=part.records_in,
            last_checkpoint_ms=part.last_checkpoint_ms,
            finished=part.finished,
            aligned_paused=part.tp in self.pauses.aligned,
            drift_ms=drift,
        )

    def _refresh_metrics(self) -> None:
        m = self.metrics
        name = self.name
        now = self.clock.now_ms()
        wall = time.time()
        combiner = self.emitter.combiner
        current = self.emitter.current
        for tp, part in self.partitions.items():
            label = f"{tp.topic}/{tp.partition}"
            gauges = part.operator.gauges()
            m.timers_queued.labels(name, label, "event").set(gauges.event_timers)
            m.timers_queued.labels(name, label, "processing").set(gauges.processing_timers)
            m.windows_open.labels(name, label).set(gauges.windows_open)
            m.keys.labels(name, label).set(gauges.keys)
            watermark = part.watermark
            if watermark is not None:
                m.watermark.labels(name, label).set(watermark)
                m.watermark_lag.labels(name, label).set(now - watermark)
                if current is not None:
                    m.watermark_drift.labels(name, label).set(max(0, watermark - current))
            lag = part.lag()
            if lag is not None:
                m.consumer_lag.labels(name, label).set(lag)
            if part.last_checkpoint_ms is not None:
                m.checkpoint_age.labels(name, label).set(wall - part.last_checkpoint_ms / 1000.0)
            for kind, count in part.firings.items():
                m.window_firings.labels(name, kind).inc(count)
            part.firings.clear()
            if part.late_dropped:
                m.late_records.labels(name, "dropped").inc(part.late_dropped)
                part.late_dropped = 0
            self._report_timer_counts(part)
            wakeups = part.timers.wakeups
            if wakeups:
                m.timers_fired.labels(name).inc(wakeups)
                part.timers.wakeups = 0
        if current is not None:
            m.combined_watermark.labels(name).set(current)
            m.combined_watermark_lag.labels(name).set(now - current)
        m.idle_partitions.labels(name).set(len(combiner.idle_partitions(now)))
        m.idle_advancing.labels(name).set(1 if self.emitter.idle_advancing else 0)
        alignment = self.alignment
        if alignment is not None:
            m.alignment_paused.labels(name).set(len(self.pauses.aligned))
            pauses, resumes = self._alignment_reported
            if alignment.pauses > pauses:
                m.alignment_pauses.labels(name).inc(alignment.pauses - pauses)
            if alignment.resumes > resumes:
                m.alignment_resumes.labels(name).inc(alignment.resumes - resumes)
            self._alignment_reported = (alignment.pauses, alignment.resumes)
        sink = self.sink
        if sink is not None:
            if sink.results_sent:
                m.records_out.labels(name, "result").inc(sink.results_sent)
                sink.results_sent = 0
            if sink.late_sent:
                m.records_out.labels(name, "late").inc(sink.late_sent)
                m.late_records.labels(name, "side_output").inc(sink.late_sent)
                sink.late_sent = 0
            for reason, count in sink.dead_lettered.items():
                m.records_out.labels(name, "dead_letter").inc(count)
                m.dead_lettered.labels(name, reason).inc(count)
            sink.dead_lettered.clear()

    def _report_timer_counts(self, part: PartitionTask) -> None:
        m = self.metrics
        for domain, (registered, fired, deleted) in part.take_timer_counts().items():
            if registered:
                m.timers_registered.labels(self.name, domain).inc(registered)
            if fired:
                m.timer_fires.labels(self.name, domain).inc(fired)
            if deleted:
                m.timers_deleted.labels(self.name, domain).inc(deleted)

    def _forget_metrics(self, tp: TopicPartition) -> None:
        self._m_in.pop(tp, None)
        label = f"{tp.topic}/{tp.partition}"
        m = self.metrics
        for gauge in (
            m.windows_open,
            m.keys,
            m.watermark,
            m.watermark_lag,
            m.watermark_drift,
            m.consumer_lag,
            m.checkpoint_age,
        ):
            with contextlib.suppress(KeyError):
                gauge.remove(self.name, label)
        for domain in ("event", "processing"):
            with contextlib.suppress(KeyError):
                m.timers_queued.remove(self.name, label, domain)


async def _abandon_join(consumer: Any) -> None:
    """Cancel a group join in progress, so that ``consumer.stop()`` does not wait for it.

    aiokafka's ``stop()`` lets its coordination task "finish all pending work" first,
    and a join can take the whole rebalance timeout (50+ s were seen). Nothing is
    assigned here (the caller checks), so there is nothing to hand over: the member
    simply never completes its join, and the group rebalances without it. This reaches
    into aiokafka's private ``_coordinator._coordination_task`` (aiokafka 0.14); if
    that changes, the stop falls back to waiting for the join.
    """
    coordinator = getattr(consumer, "_coordinator", None)
    task = getattr(coordinator, "_coordination_task", None)
    if isinstance(task, asyncio.Task) and not task.done():
        task.cancel()
        await asyncio.wait([task])


def _tp(tp: TopicPartition) -> str:
    return f"{tp.topic}/{tp.partition}"
