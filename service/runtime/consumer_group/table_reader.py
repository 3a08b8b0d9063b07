"""A lookup join's table on this replica: its topic read whole, then followed live.

Kafka Streams' global table: every replica reads every partition of the table's topic
itself, with a consumer outside any group (no shuffle, no co-partitioning, nothing
checkpointed: the compacted topic *is* the table's durable state). Reading starts at
the beginning; the table is **loaded** once every partition's position reached the end
it had when reading started (the fetch high watermark, ``end_offsets.py``), and the
keyed stage's session does not join its group before that
(:meth:`~service.runtime.consumer_group.stages.LookupStage.ready`), so no left row
meets a half-read table. After that, updates are applied as they come, between the
loop's batches (one event loop: never in the middle of a batch).

Each record goes through the table input's decoder (a null value is a tombstone of its
Kafka key, :class:`~service.runtime.partition.decoding.TableDecoder`); one that fails
goes to the dead-letter topic, named as the table input's. A table in a registry format
is decoded as a source is (docs/formats.md): the writer schemas a fetch names are asked
of the registry (a client of the reader's own: the reader outlives sessions) before it
is decoded, and while the registry cannot be reached the reader waits, the fetch in
hand, and asks again with backoff (the session's status shows why), never
dead-lettering a good record for it. A table with more keys than
``max_rows`` raises :class:`~service.operators.join.lookup.LookupTableFull`: the reader
stops, and the stage fails with that reason (and, after its backoff, reads the table
again: it may have shrunk). Partitions added to the topic later are found within
``RuntimeSettings.table_partition_discovery_s`` and read from their start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from service.operators.base import InputRecord
from service.operators.join.lookup import LookupTable
from service.runtime.definition import PipelineDefinition
from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.end_offsets import probe_end_offsets, topic_partitions
from service.runtime.kafka.topics import TopicError
from service.runtime.observability.metrics import RuntimeMetrics
from service.runtime.partition.decoding import DeadLetter, RecordDecoder, TableDecoder
from service.runtime.partition.sinks import OutputSink
from service.runtime.pipeline_topics.creation import ensure_topics
from service.runtime.schema_registry.client import SchemaRegistry
from service.runtime.schema_registry.waiting import resolve_waiting
from service.runtime.settings import RuntimeSettings

logger = logging.getLogger(__name__)

_MAX_RECORDS = 10_000
"""Records applied per fetch (between two turns of the event loop's other tasks)."""


class TableReader:
    """Reads one lookup join's table into a :class:`LookupTable` and keeps it current."""

    def __init__(
        self,
        cluster: KafkaCluster,
        settings: RuntimeSettings,
        definition: PipelineDefinition,
        table: LookupTable,
        metrics: RuntimeMetrics,
    ) -> None:
        table_input = definition.lookup_table
        if table_input is None:
            raise ValueError(f"pipeline {definition.name} has no lookup table")
        self.table = table
        self.failed: BaseException | None = None
        """Why reading stopped; the table is then not to be used any more."""
        self.on_failure: Callable[[BaseException], None] | None = None
        """Told when reading fails after the table was loaded (the session to end)."""
        self._cluster = cluster
        self._settings = settings
        self._definition = definition
        self._topics = table_input.topics
        view = definition.as_input(1)
        unnest = view.steps is not None and view.steps.has_unnest
        records = RecordDecoder(view)
        self._decoder = TableDecoder(records, positioned=unnest)
        self._schemas = records.schemas
        self._registry: SchemaRegistry | None = None
        self.on_waiting: Callable[[str | None], None] | None = None
        """Told why the reader waits for the schema registry (None: no more)."""
        self._rows = metrics.lookup_table_rows.labels(definition.name, table_input.name)
        self._loaded_gauge = metrics.lookup_table_loaded.labels(definition.name, table_input.name)
        self._loaded = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._loaded_gauge.set(0)
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"clockwork-{self._definition.name}-table"
        )

    async def wait_loaded(self) -> None:
        """Until the table is loaded; raises why reading failed, if it did."""
        await self._loaded.wait()
        if self.failed is not None:
            raise self.failed

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        try:
            await self._follow()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failed = exc
            self._loaded_gauge.set(0)
            self._loaded.set()
            logger.warning(
                "pipeline %s: lookup table %r: %s",
                self._definition.name,
                self.table.input,
                exc,
            )
            if self.on_failure is not None:
                self.on_failure(exc)

    async def _follow(self) -> None:
        ends = await probe_end_offsets(self._cluster, self._topics)
        missing = sorted(set(self._topics) - {tp.topic for tp in ends})
        if missing:
            raise TopicError(f"lookup table topic(s) do not exist: {', '.join(missing)}")
        settings = self._settings
        definition = self._definition
        counts = await ensure_topics(self._cluster, definition, settings.replication_factor)
        consumer = self._cluster.consumer(
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=settings.fetch_max_wait_ms,
            request_timeout_ms=settings.request_timeout_ms,
            isolation_level=definition.isolation_level,
        )
        producer = self._cluster.producer(
            acks="all", request_timeout_ms=settings.request_timeout_ms
        )
        batches: BatchProducer | None = None
        if self._schemas is not None:
            self._registry = SchemaRegistry(settings.schema_registry)
        try:
            await consumer.start()
            await producer.start()
            batches = BatchProducer(producer, settings.max_pending_bytes)
            batches.start()
            sink = OutputSink(definition, batches, counts)
            assigned = list(ends)
            consumer.assign(assigned)
            await consumer.seek_to_beginning(*ends)
            unread = dict(ends)
            await self._check_loaded(consumer, unread)
            discover_at = time.monotonic() + settings.table_partition_discovery_s
            while True:
                if time.monotonic() >= discover_at:
                    await self._add_new_partitions(consumer, assigned)
                    discover_at = time.monotonic() + settings.table_partition_discovery_s
                fetched = await consumer.getmany(
                    timeout_ms=settings.fetch_max_wait_ms, max_records=_MAX_RECORDS
                )
                dead_letters = False
                for tp, records in fetched.items():
                    await self._resolve_schemas(records)
                    inputs: list[InputRecord] = []
                    failed: list[DeadLetter] = []
                    self._decoder.decode(records, inputs, failed)
                    self.table.apply(inputs)
                    if failed:
                        sink.dead_letters(tp, failed)
                        dead_letters = True
                if dead_letters:
                    batches.send_open()
                self._rows.set(len(self.table))
                if unread:
                    await self._check_loaded(consumer, unread)
        finally:
            await consumer.stop()
            if batches is not None:
                await batches.close()
            await producer.stop()
            if self._registry is not None:
                await self._registry.close()

    async def _add_new_partitions(
        self, consumer: AIOKafkaConsumer, assigned: list[TopicPartition]
    ) -> None:
        """Read the table topics' partitions added since the read started, from their
        start; the others go on where they are (a new assignment would forget it)."""
        added = [tp for tp in await topic_partitions(consumer, self._topics) if tp not in assigned]
        if not added:
            return
        positions = {tp: await consumer.position(tp) for tp in assigned}
        assigned.extend(added)
        consumer.assign(assigned)
        for tp, offset in positions.items():
            consumer.seek(tp, offset)
        await consumer.seek_to_beginning(*added)
        logger.info(
            "pipeline %s: lookup table %r reads its new partitions %s",
            self._definition.name,
            self.table.input,
            ", ".join(f"{tp.topic}/{tp.partition}" for tp in added),
        )

    async def _resolve_schemas(self, records: Sequence[Any]) -> None:
        """Fetch the writer schemas ``records`` name that are not known yet; while the
        registry cannot be reached, say so and ask again with backoff (as the fetch loop
        does for a source)."""
        schemas, registry = self._schemas, self._registry
        if schemas is None or registry is None:
            return
        settings = self._settings
        await resolve_waiting(
            registry,
            [(schemas, schemas.missing(records))],
            pipeline=self._definition.name,
            what=f" (lookup table {self.table.input!r})",
            backoff_s=(settings.restart_backoff_initial_s, settings.restart_backoff_max_s),
            say=self._say_waiting,
        )

    def _say_waiting(self, reason: str | None) -> None:
        if self.on_waiting is not None:
            self.on_waiting(reason)

    async def _check_loaded(
        self, consumer: AIOKafkaConsumer, unread: dict[TopicPartition, int]
    ) -> None:
        """Drop the partitions read to their starting end; the table is loaded when
        none is left."""
        for tp, end in list(unread.items()):
            if await consumer.position(tp) >= end:
                del unread[tp]
        if not unread and not self.table.loaded:
            self.table.loaded = True
            self._rows.set(len(self.table))
            self._loaded_gauge.set(1)
            self._loaded.set()
