"""Reading and decoding the source while the consumer group join is under way.

Why: a session cannot fetch until the group has assigned it partitions, and a join is
slow on some brokers: Tansu answers after half the session timeout (1 s at the least),
Kafka after ``group.initial.rebalance.delay.ms`` (3 s by default) when the group is new.
Meanwhile the process is idle, and a pipeline that starts behind (a new pipeline over a
full topic, a bounded job, a restart after downtime) has records waiting.

What: at a session's start, a consumer with the pipeline's group id that only ``assign``s
(so it never joins) reads every source partition from where the group would start it
(its committed offset, else ``start_from``), decoding as it goes, until the first
assignment arrives or it holds ``max_records`` (an even share per partition).

Why it stays correct: nothing is processed, produced or committed; only Kafka's log is
read, which does not change, and decoding is a function of the record alone. When the
restore has decided where an assigned partition resumes (the checkpoint's offset, or
``start_from``), the prefetched records are used only if the range read, from its start
``S`` to the offset after its last record ``E``, contains that offset ``R``: the records
from ``R`` on are processed first (the partition stays paused at the consumer until they
are), and the consumer resumes at ``E``. Anything else -- another resume offset, a
partition assigned elsewhere -- is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import TopicPartition

from service.operators.base import InputRecord
from service.runtime.consumer_group.pending_input import Chunk, PendingInput
from service.runtime.definition import PipelineDefinition
from service.runtime.kafka.batch_reader import BatchReader
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.end_offsets import topic_partitions
from service.runtime.partition.decoding import DeadLetter, RecordDecoder
from service.runtime.schema_registry.client import SchemaRegistry
from service.runtime.settings import RuntimeSettings

logger = logging.getLogger(__name__)

_READ_TIMEOUT_MS = 100


class Prefetcher:
    """Reads a session's source partitions during its group join (see the module)."""

    __slots__ = ("_decoder", "_max", "_read", "_registry", "_settings", "_task", "definition")

    def __init__(
        self,
        settings: RuntimeSettings,
        definition: PipelineDefinition,
        decoder: RecordDecoder,
        max_records: int,
        registry: SchemaRegistry | None = None,
    ) -> None:
        """``registry``: where the writer schemas the records name are fetched first
        (a source in Confluent's wire format); a registry that cannot be reached ends
        the prefetch, as any error does, before anything is decoded."""
        self._registry = registry
        self._settings = settings
        self.definition = definition
        self._decoder = decoder
        self._max = max_records
        self._task: asyncio.Task[None] | None = None
        # tp -> (start offset, chunks in offset order)
        self._read: dict[TopicPartition, tuple[int, list[Chunk]]] = {}

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"clockwork-prefetch-{self.definition.name}"
        )

    async def stop(self) -> None:
        """Stop reading (what was read stays for :meth:`take`); idempotent."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        settings = self._settings
        definition = self.definition
        consumer = KafkaCluster.of(settings).consumer(
            group_id=definition.group_id,  # for the committed offsets; it never joins
            enable_auto_commit=False,
            auto_offset_reset=definition.start_from,
            fetch_max_wait_ms=settings.fetch_max_wait_ms,
            max_partition_fetch_bytes=settings.max_partition_fetch_bytes,
            fetch_max_bytes=settings.fetch_max_bytes,
            request_timeout_ms=settings.request_timeout_ms,
            isolation_level=definition.isolation_level,
        )
        try:
            await consumer.start()
            tps = await topic_partitions(consumer, definition.topics)  # they exist by now
            if not tps:
                return
            consumer.assign(tps)
            starts = {tp: await consumer.position(tp) for tp in tps}
            reader = BatchReader(consumer)
            decode = self._decoder.decode
            schemas = self._decoder.schemas
            registry = self._registry
            # An even share per partition: the combined watermark is the minimum over
            # them, so one partition read far ahead would only wait for the others.
            share = max(1, self._max // len(tps))
            held: dict[TopicPartition, int] = dict.fromkeys(tps, 0)
            chunk_records = settings.max_records  # what the loop takes per fetch, too
            while True:
                full = [tp for tp in tps if held[tp] >= share]
                if len(full) == len(tps):
                    break
                if full:
                    consumer.pause(*full)
                batch = await reader.read(_READ_TIMEOUT_MS, chunk_records)
                for tp, records in batch.items():
                    room = share - held[tp]
                    if room <= 0 or not records:
                        continue
                    records = records[:room]  # a fetch can bring more than the share
                    entry = self._read.get(tp)
                    if entry is None:
                        entry = self._read[tp] = (starts[tp], [])
                    # in pieces the loop processes one per turn (a fetch can be ~100k)
                    for i in range(0, len(records), chunk_records):
                        piece = records[i : i + chunk_records]
                        if schemas is not None and registry is not None:
                            missing = schemas.missing(piece)
                            if missing:
                                await registry.resolve(schemas, missing)
                        inputs: list[InputRecord] = []
                        failed: list[DeadLetter] = []
                        decode(piece, inputs, failed)
                        entry[1].append(
                            Chunk(inputs, failed, len(piece), piece[0].offset, piece[-1].offset + 1)
                        )
                    held[tp] += len(records)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # only an optimisation: the session reads it all anyway
            logger.info("pipeline %s: prefetch stopped: %r", definition.name, exc)
        finally:
            with contextlib.suppress(Exception):
                await consumer.stop()

    @property
    def records_read(self) -> int:
        """Records read so far and not taken: what the join's end would find."""
        return sum(chunk.count for _, chunks in self._read.values() for chunk in chunks)

    def take(self, tp: TopicPartition, resume: int, stop: int | None = None) -> PendingInput | None:
        """The prefetched records of ``tp`` from ``resume`` on (and before ``stop``, the
        end of bounded input), if the range read contains ``resume`` and has records
        after it; None otherwise."""
        entry = self._read.pop(tp, None)
        if entry is None:
            return None
        start, chunks = entry
        if not chunks:
            return None
        end = chunks[-1].end if stop is None else min(chunks[-1].end, stop)
        if not start <= resume < end:
            return None
        pending = PendingInput(end=end)
        for chunk in chunks:
            if chunk.end <= resume or chunk.first >= end:
                continue
            if chunk.first < resume or chunk.end > end:
                chunk = _between(chunk, resume, end)
            if chunk.count:
                pending.chunks.append(chunk)
                pending.records += chunk.count
        return pending if pending.chunks else None


def _between(chunk: Chunk, resume: int, end: int) -> Chunk:
    """``chunk`` without its records before offset ``resume`` or from offset ``end``."""
    inputs = [record for record in chunk.inputs if resume <= record[4].offset < end]
    failed = [letter for letter in chunk.failed if resume <= letter.source.offset < end]
    return Chunk(
        inputs, failed, len(inputs) + len(failed), max(resume, chunk.first), min(end, chunk.end)
    )
