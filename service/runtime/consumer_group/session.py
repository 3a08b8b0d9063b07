"""One consumer-group membership of a pipeline: its clients, partitions and lifecycle.

A session starts the producer and the consumer (joining the group), runs the
:class:`~service.runtime.consumer_group.fetch_loop.FetchLoop` until a stop or the end of
bounded input, and closes: graceful (checkpoint every partition, then leave the group)
unless it failed. Its parts, one concern each:
:class:`~service.runtime.consumer_group.assignment.Assignment` (assign and revoke, which
the group's :class:`~service.runtime.consumer_group.rebalance.RebalanceListener` calls),
:class:`~service.runtime.consumer_group.checkpointing.Checkpointer` (checkpoint, and
rebuild what is assigned),
:class:`~service.runtime.consumer_group.reporting.SessionReporter` (status and metrics),
:class:`~service.runtime.consumer_group.pauses.PauseControl` (which partitions are
fetched) and the
:class:`~service.runtime.consumer_group.watermark_emitter.WatermarkEmitter`.

Any error of the loop, the producer, a timer or a checkpoint ends the session; the
:class:`~service.runtime.lifecycle.pipeline_runner.PipelineRunner` drops it (the
changelog has its state) and starts a new one after a backoff.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeVar

from aiokafka import TopicPartition

from service.core.alignment import WatermarkAlignment
from service.core.time import Clock
from service.runtime.consumer_group.assignment import Assignment
from service.runtime.consumer_group.checkpointing import Checkpointer
from service.runtime.consumer_group.fetch_loop import FetchLoop
from service.runtime.consumer_group.pauses import PauseControl
from service.runtime.consumer_group.pending_input import PendingInput
from service.runtime.consumer_group.prefetch import Prefetcher
from service.runtime.consumer_group.rebalance import RebalanceListener
from service.runtime.consumer_group.reporting import SessionReporter
from service.runtime.consumer_group.stages import Stage
from service.runtime.consumer_group.watermark_emitter import WatermarkEmitter
from service.runtime.definition import PipelineDefinition
from service.runtime.formats.results import result_encoder
from service.runtime.kafka.batch_producer import BatchProducer, drop_unsent
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.end_offsets import probe_end_offsets
from service.runtime.kafka.interrupts import Interrupted, Interruptible, abandon_join
from service.runtime.kafka.transactions import PartitionTransactions
from service.runtime.observability.metrics import RuntimeMetrics
from service.runtime.observability.status import PartitionStatus, StandbyStatus
from service.runtime.partition.sinks import OutputSink, dumps
from service.runtime.partition.state_hold import StateHold
from service.runtime.partition.task import PartitionTask
from service.runtime.pipeline_topics.creation import ensure_topics
from service.runtime.schema_registry.client import SchemaRegistry
from service.runtime.settings import RuntimeSettings

logger = logging.getLogger(__name__)

T = TypeVar("T")

REBALANCE_TIMEOUT_MS = 300_000
"""How long the group waits for a member to rejoin a rebalance: its revoke first (the
revoked partitions checkpointed, their rocksdb stores closed). aiokafka's default is the
session timeout (10 s, 2 s in tests), shorter than a revoke's checkpoint of much state:
the group then dropped the member during its revoke and gave its partitions to another,
whose restore met RocksDB's lock on their stores (issue 53). This is the Java consumer's
``max.poll.interval.ms`` default, which Kafka Streams' revokes run within. A member that
dies is still dropped after the session timeout (its heartbeats stop)."""


class SessionRunner(Protocol):
    """What a session takes from the runner that runs its stage's sessions one after
    the other: the stage, its settings, and the pipeline's controls."""

    @property
    def stage(self) -> Stage: ...
    @property
    def definition(self) -> PipelineDefinition: ...
    @property
    def settings(self) -> RuntimeSettings: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def metrics(self) -> RuntimeMetrics: ...
    @property
    def paused(self) -> bool: ...
    @property
    def stopping(self) -> asyncio.Event: ...
    def joined(self) -> None:
        """The session joined its group: the stage runs, or is paused."""

    def waiting(self, reason: str | None) -> None:
        """The stage waits for something outside it (the schema registry), shown with
        ``reason`` in its status; None: it goes on."""


class Session:
    """One consumer-group membership of a pipeline: its clients and partitions."""

    def __init__(self, runner: SessionRunner) -> None:
        self.runner = runner
        self.stage = stage = runner.stage
        self.definition = definition = runner.definition
        self.settings = runner.settings
        self.clock = runner.clock
        self.metrics = runner.metrics
        self.stopping = runner.stopping
        """The pipeline's stop: the loop ends once it is set."""
        self.name = definition.name
        self.partitions: dict[TopicPartition, PartitionTask] = {}
        self.decoder = stage.decoder()
        wm = stage.watermark
        self.alignment: WatermarkAlignment[TopicPartition] | None = (
            WatermarkAlignment(wm.max_drift_ms) if wm.max_drift_ms is not None else None
        )
        self.pauses = PauseControl(runner.paused)
        self.state_hold = StateHold()
        """Held while a checkpoint's snapshot is taken (:mod:`~service.runtime.partition.
        state_hold`): the emitter's ticks and the partitions' processing-time wake-ups
        wait for it."""
        self.emitter = WatermarkEmitter(
            self.partitions,
            self.clock,
            wm.interval_ms,
            wm.idle_timeout_ms,
            self._after_emit,
            idle_advance=wm.idle_advance,
            on_tick=self.align if self.alignment is not None else None,
            on_emit=self._on_emit,
            hold=self.state_hold,
        )
        self.records_in = 0
        self.polls = 0
        """Fetches (``getmany`` calls) done: lets tests wait for the loop to turn."""
        self.interrupts = Interruptible()
        self.error: BaseException | None = None
        self.consumer: Any = None
        self.producer: Any = None
        self.batches: BatchProducer | None = None
        self.transactions: PartitionTransactions | None = None
        """Exactly-once delivery: the transactional producers of the partitions."""
        self.sink: OutputSink | None = None
        self.checkpoint_on_revoke = True
        self.prefetcher: Prefetcher | None = None
        """Reads the source during the first join; the first restore takes it over."""
        self.pending: dict[TopicPartition, PendingInput] = {}
        """Decoded records of assigned partitions processed before anything fetched for
        them: prefetched during the join, or held back by watermark alignment."""
        self.end_offsets: dict[TopicPartition, int] = {}
        """Bounded input: where every partition of the pipeline ends (end_offsets.py)."""
        self.finished_here: set[TopicPartition] = set()
        """Bounded input: the partitions this session read to their end."""
        self.partitions_done = (0, 0)
        """Bounded input: partitions of the pipeline finished, of all, at the last look."""
        self.counts: dict[str, int] = {}
        """The partition counts of the pipeline's topics (pull queries find a key's
        partition among its stage topic's)."""
        self.joined_group = False
        """Whether the consumer has joined the group (pull queries answer only then)."""
        self.final_partitions: tuple[PartitionStatus, ...] = ()
        """Bounded input, once finished: the partitions' status as they ended here."""
        self.reporter = SessionReporter(self)
        self.checkpointer = Checkpointer(self)
        self.assignment = Assignment(self)
        self.registry = SchemaRegistry(self.settings.schema_registry)
        """Writer schemas for the decoder, the results' schema id for the sink."""
        self.loop = FetchLoop(self)

    # -- lifecycle -------------------------------------------------------------------
    async def run(self) -> bool:
        """Consume until stopped (False) or until bounded input is finished (True)."""
        runner = self.runner
        settings = self.settings
        definition = self.definition
        stage = self.stage
        cluster = KafkaCluster.of(settings)
        counts = await ensure_topics(cluster, definition, settings.replication_factor)
        stage.prepare(self, counts)
        self.counts = counts
        try:
            await self.interruptible(stage.ready(self))
        except Interrupted:
            await self.close(checkpoint=False)
            return False
        if definition.bounded and stage.reads_source:
            self.end_offsets = await self.bounded_ends()
        self.producer = cluster.producer(
            acks="all",
            linger_ms=0,
            max_batch_size=settings.max_batch_bytes,
            request_timeout_ms=settings.request_timeout_ms,
            enable_idempotence=False,
        )
        await self.producer.start()
        self.batches = BatchProducer(self.producer, settings.max_pending_bytes)
        self.batches.start()
        if definition.exactly_once:
            self.transactions = PartitionTransactions(settings, stage.group_id, stage.group_id)
        try:
            encode = await self.result_encoder()
        except Interrupted:
            await self.close(checkpoint=False)
            return False
        self.sink = OutputSink(
            definition,
            self.batches,
            counts,
            self.transactions.by_partition if self.transactions is not None else None,
            encode,
            stage.origin(),
        )
        heartbeat = settings.heartbeat_interval_ms or max(100, settings.session_timeout_ms // 3)
        self.consumer = cluster.consumer(
            group_id=stage.group_id,
            enable_auto_commit=False,
            auto_offset_reset=stage.start_from,
            fetch_max_wait_ms=settings.fetch_max_wait_ms,
            max_partition_fetch_bytes=settings.max_partition_fetch_bytes,
            fetch_max_bytes=settings.fetch_max_bytes,
            session_timeout_ms=settings.session_timeout_ms,
            rebalance_timeout_ms=max(REBALANCE_TIMEOUT_MS, settings.session_timeout_ms),
            heartbeat_interval_ms=heartbeat,
            request_timeout_ms=settings.request_timeout_ms,
            isolation_level=definition.isolation_level,
            partition_assignment_strategy=self.checkpointer.assignors(),
        )
        self.pauses.consumer = self.consumer
        self.consumer.subscribe(list(stage.topics), listener=RebalanceListener(self.assignment))
        if (
            settings.prefetch_max_records > 0
            and stage.prefetches
            and stage.watermark.interval_ms > 0  # per-record mode: no batches to take
            and self.alignment is None  # alignment paces partitions batch by batch
        ):
            self.prefetcher = Prefetcher(
                settings, definition, self.decoder, settings.prefetch_max_records, self.registry
            )
            self.prefetcher.start()
        try:
            await self.interruptible(self.consumer.start())  # joins the group
        except Interrupted:
            await self.close(checkpoint=True)
            return False
        self.emitter.start(self.fail)
        self.joined_group = True
        runner.joined()
        finished = await self.loop.run()
        if finished:
            # what status shows of a finished pipeline: its partitions as they ended here
            now = self.clock.now_ms()
            report = self.reporter.partition_status
            self.final_partitions = tuple(report(p, now) for p in self.partitions.values())
            await self.close(checkpoint=False)  # the finish already checkpointed
        else:
            await self.close(checkpoint=True)
        return finished

    async def result_encoder(self) -> Callable[[dict[str, Any]], bytes] | None:
        """The sink's encoding of a result value: None for JSON; for the formats with a
        schema, with the id of the results' schema, registered under ``<topic>-value``
        if new. A registry that cannot be reached (or refuses the schema) fails the
        session: it starts again after the stage's backoff, with the reason in the
        status."""
        sink = self.definition.sink
        if sink.format == "json" or sink.value_schema is None:
            return None
        schema_id = await self.interruptible(
            self.registry.register(sink.subject, sink.schema_type, sink.value_schema)
        )
        return result_encoder(sink.format, sink.value_schema, schema_id, dumps)

    async def close(self, checkpoint: bool) -> None:
        """Stop the clients; with ``checkpoint`` first make every partition durable."""
        self.joined_group = False  # what it holds now is on its way out: no queries
        await self.checkpointer.close_standbys()
        await self.emitter.stop()
        await self.stop_prefetch()
        self.pending.clear()
        graceful = checkpoint and self.consumer is not None and self.error is None
        if not graceful:
            await self.checkpointer.cancel()  # a graceful close's checkpoint waits for it
        if graceful:
            # Deliver the watermark of everything processed before checkpointing. Without
            # it a stop right after a batch (before the next tick) checkpoints operators
            # behind their input, and the next owner fires those windows on its first
            # tick: a graceful restart that re-emits (the flake of
            # test_graceful_shutdown_then_restart_reemits_nothing under load).
            self.emitter.emit(self.clock.now_ms())
        for part in self.partitions.values():
            part.close()
        if graceful:
            await self.checkpointer.checkpoint(list(self.partitions.values()), release=True)
        self.checkpoint_on_revoke = False
        # The stores closed before the group hears that this member leaves: the member
        # that gets their partitions next opens them at once (again below, for any a
        # rebalance finishing inside the consumer's stop opened meanwhile).
        self.checkpointer.close_local()
        if self.consumer is not None:
            if self.interrupts.interrupted and not self.partitions:
                await abandon_join(self.consumer)
            try:
                await self.consumer.stop()
            except (Exception, asyncio.CancelledError):
                # aiokafka's fetcher can re-raise the cancellation of a fetch that an
                # abort (broker lost) cut short; only a cancellation of this task counts.
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
                logger.warning(
                    "pipeline %s: consumer did not stop cleanly", self.name, exc_info=True
                )
            self.consumer = None
        if self.transactions is not None:
            await self.transactions.close_all(drop=not checkpoint or self.error is not None)
        if self.batches is not None:
            await self.batches.close()
        if self.producer is not None:
            if not checkpoint or self.error is not None:
                drop_unsent(self.producer, self.error)
            try:
                await self.producer.stop()
            except Exception:
                logger.warning(
                    "pipeline %s: producer did not stop cleanly", self.name, exc_info=True
                )
            self.producer = None
        for tp in list(self.partitions):
            self.reporter.forget(tp)
        self.partitions.clear()
        self.checkpointer.close_local()
        await self.registry.close()

    async def bounded_ends(self) -> dict[TopicPartition, int]:
        """Bounded input: the pipeline's end offsets, pinned in its definition (the API
        reads them once, when the pipeline is created) or read now."""
        pinned = self.definition.end_offsets
        if pinned is not None:
            return {TopicPartition(topic, p): end for topic, p, end in pinned}
        return await probe_end_offsets(KafkaCluster.of(self.settings), self.definition.topics)

    async def stop_prefetch(self) -> Prefetcher | None:
        """Stop the prefetcher, if it runs; returns it (its records stay for the taking)."""
        prefetcher, self.prefetcher = self.prefetcher, None
        if prefetcher is not None:
            await prefetcher.stop()
        return prefetcher

    def standby_placement(self) -> Mapping[TopicPartition, tuple[str, ...]]:
        """Every partition's standby members, as the last rebalance placed them."""
        standbys = self.checkpointer.standbys
        return standbys.placement() if standbys is not None else {}

    def standby_status(self) -> tuple[StandbyStatus, ...]:
        """The warm copies this session keeps of other members' partitions."""
        standbys = self.checkpointer.standbys
        return standbys.status() if standbys is not None else ()

    def waiting(self, reason: str | None) -> None:
        """The loop waits for something outside the session (``reason``); None: no more."""
        self.runner.waiting(reason)

    async def interruptible(self, awaitable: Coroutine[Any, Any, T]) -> T:
        """Await ``awaitable`` so that :meth:`interrupt` can cancel it (:class:`Interrupted`)."""
        return await self.interrupts.run(awaitable)

    def interrupt(self) -> None:
        """A stop: cancel the join or fetch being awaited; the loop then ends gracefully."""
        self.interrupts.interrupt()

    def fail(self, exc: BaseException) -> None:
        """An error outside the loop (a timer, the emitter): the loop ends the session."""
        if self.error is None:
            self.error = exc

    def abort(self, exc: BaseException) -> None:
        """End the session now with ``exc``, also if it waits in a fetch or a join."""
        self.fail(exc)
        self.interrupts.abort(exc)

    def raise_error(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"pipeline {self.name}: {self.error!r}") from self.error

    def batches_for(self, tp: TopicPartition) -> BatchProducer:
        """Where the outputs of ``tp`` go: its transaction's batches with exactly-once,
        else the session's."""
        if self.transactions is not None:
            return self.transactions.batches(tp)
        assert self.batches is not None  # set by run()
        return self.batches

    def _after_emit(self) -> None:
        if self.batches is not None:
            self.batches.send_open()
        if self.transactions is not None:
            self.transactions.send_open()

    def _on_emit(self, now: int) -> bool:
        return self.stage.on_emit(self, now)

    # -- pauses ----------------------------------------------------------------------
    def set_user_paused(self, paused: bool) -> None:
        """The user paused or resumed the pipeline: takes effect at once."""
        self.pauses.user_paused = paused
        self.pauses.apply()

    def align(self, now: int) -> None:
        """Watermark alignment, on each tick of the emitter: the loop's
        (:meth:`FetchLoop.align`)."""
        self.loop.align(now)
