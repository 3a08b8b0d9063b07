"""The changelog: per-partition state made durable in a compacted Kafka topic.

Layout. One changelog topic per pipeline, with as many partitions as its widest source
topic; source partition ``p`` of topic ``t`` is checkpointed to changelog partition
``p``. Record keys are ``"{t}|{p}|s|{entry}"`` for an operator state entry (value: JSON,
or null as a tombstone when the entry is gone) and ``"{t}|{p}|m"`` for the partition's
checkpoint metadata (the next source offset, the watermark generator's state, the state
fingerprint). Compaction keeps the newest value per key, which is all a restore needs.

Atomicity. A checkpoint writes the changed entries first and its metadata record last,
and the metadata record is what commits it: a restore applies entries only up to the
last metadata record of the partition and ignores what follows (a checkpoint cut short
by a crash). Those ignored keys are reported as ``repair`` so the new owner rewrites
their committed values at once, before compaction could drop the older value behind a
newer, uncommitted one. The source offset to resume from is the one in the metadata,
not the group's committed offset, so state and input position always match (a crash
between writing the changelog and committing the offset replays nothing twice into the
state).

Streamed restores (the rocksdb backend, an :class:`Applier` per partition): a partition's
entries are handed over in batches as they are read instead of folded into a dict, so a
restore holds no more of it than the operator's cache. What follows the last metadata
record was applied too; :func:`read_committed_values` then reads what to put back (and
to repair) for exactly those entries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol

import orjson
from aiokafka import TopicPartition

from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.partition.sinks import dumps
from service.runtime.pipeline_topics.names import META, STATE, entry_prefix, meta_key, state_prefix

logger = logging.getLogger(__name__)


class RestoreError(RuntimeError):
    """The changelog could not be read to its end."""


@dataclass(slots=True)
class RestoredPartition:
    """The committed state of one source partition, as read from the changelog."""

    entries: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] | None = None
    repair: dict[str, Any] = field(default_factory=dict)
    """Entries written after the last metadata record, mapped to their committed value
    (None: absent); they must be rewritten before they can shadow the committed ones."""
    records: int = 0
    """The partition's changelog records read (entries and metadata)."""
    cut_from: int | None = None
    """Streamed (an :class:`Applier`): the changelog offset of the first entry after the
    last metadata record, if any; what was applied from there was not committed (a
    checkpoint cut short) and must be put back (:func:`read_committed_values`)."""


class Applier(Protocol):
    """Where a streamed restore puts one source partition's entries, in batches (the
    rocksdb backend: onto the operator's state maps, never all in memory at once)."""

    def apply(self, entries: list[tuple[str, Any]]) -> None:
        """Entries in the changelog's order (None: deleted)."""

    def reset(self) -> None:
        """A null metadata record (a reset): forget everything applied so far."""


APPLY_BATCH = 2000
"""Entries a streamed restore hands its :class:`Applier` at once."""


RESTORE_FETCH_WAIT_MS = 5
"""The restore reader's fetch wait and ``getmany`` timeout (see :func:`read_changelog`)."""


Encoded = list[tuple[bytes, bytes | None]]
"""Changelog records ready to append: ``(key, value or None)``, metadata last."""


def _held(data: Any) -> bytes:
    """``data`` as JSON, in bytes of their own size.

    orjson (3.12 on) returns even a 100-byte result in a 4 KiB allocation, which is
    harmless for bytes copied into a batch at once but not for a checkpoint's entries,
    which are held until written: a join holding 300k rows encoded 1.2 GB for 30 MB of
    JSON, and the heap kept it. The right-sized copy costs ~0.1 us an entry."""
    return memoryview(dumps(data)).tobytes()


def _encoded_entries(
    prefix: str, changes: Iterable[tuple[str, Any]]
) -> Iterator[tuple[bytes, bytes | None]]:
    """Each changed entry (``(entry, plain data or None)``) as its changelog record, as
    it comes."""
    for entry, data in changes:
        yield (prefix + entry).encode(), None if data is None else _held(data)


def meta_record(tp: TopicPartition, meta: dict[str, Any]) -> tuple[bytes, bytes]:
    """``tp``'s checkpoint metadata as its changelog record: what commits the entries
    written before it."""
    return meta_key(tp.topic, tp.partition).encode(), _held(meta)


def encode_checkpoint(
    tp: TopicPartition, changes: Iterable[tuple[str, Any]], meta: dict[str, Any]
) -> Encoded:
    """One partition's changed entries (``(entry, plain data or None)``), then its
    metadata record, as bytes: in one synchronous step, so later changes to the
    operator's state cannot leak into what is written (a checkpoint's snapshot takes
    :func:`encode_checkpoint_in_slices`, the state held still instead); each entry as it
    comes, so an operator that streams them (``iter_changes``) never has them all as
    objects.
    """
    records: Encoded = list(_encoded_entries(state_prefix(tp.topic, tp.partition), changes))
    records.append(meta_record(tp, meta))
    return records


SNAPSHOT_SLICE = 1000
"""Entries a checkpoint encodes between two turns of the event loop: ~30 ms for session
keys on the rocksdb backend, most of them read back from RocksDB."""


def _slices(
    tp: TopicPartition, changes: Iterable[tuple[str, Any]], slice_entries: int | None
) -> Iterator[tuple[Encoded, bool]]:
    """``changes``' records in lists of ``slice_entries`` (:data:`SNAPSHOT_SLICE`), each
    with whether it was full (more may follow: the loop's turn); the last one is shorter
    (possibly empty)."""
    size = SNAPSHOT_SLICE if slice_entries is None else slice_entries
    entries = _encoded_entries(state_prefix(tp.topic, tp.partition), changes)
    while True:
        taken = list(islice(entries, size))
        full = len(taken) == size
        yield taken, full
        if not full:
            return


async def encode_checkpoint_in_slices(
    tp: TopicPartition,
    changes: Iterable[tuple[str, Any]],
    meta: dict[str, Any],
    slice_entries: int | None = None,
) -> Encoded:
    """:func:`encode_checkpoint`, the event loop let run after every ``slice_entries``
    entries (:data:`SNAPSHOT_SLICE`): a checkpoint of hundreds of thousands of changed
    keys no longer holds the loop for all of them. The caller keeps the state still
    meanwhile (:mod:`~service.runtime.partition.state_hold`)."""
    records: Encoded = []
    for taken, full in _slices(tp, changes, slice_entries):
        records += taken
        if full:
            await asyncio.sleep(0)  # the loop's turn
    records.append(meta_record(tp, meta))
    return records


@dataclass(slots=True)
class Appended:
    """What :func:`append_entries_in_slices` put into the batches."""

    entries: int = 0
    bytes: int = 0


async def append_entries_in_slices(
    batches: BatchProducer,
    changelog_topic: str,
    tp: TopicPartition,
    changes: Iterable[tuple[str, Any]],
    slice_entries: int | None = None,
) -> Appended:
    """A checkpoint's changed entries appended to the changelog's batches as they are
    encoded, a slice at a time, the batches' capacity awaited after each full slice
    (the event loop runs then): the records are never all held at once, beside their
    copies in the batches (at 1.5M session keys those two were half the service's
    heap). The metadata record that commits them is the caller's to append, once the
    outputs the checkpoint covers are delivered: entries written before it are a
    checkpoint cut short until then, which a restore repairs (the module docstring).
    The caller keeps the state still meanwhile."""
    appended = Appended()
    for taken, full in _slices(tp, changes, slice_entries):
        appended.bytes += append_checkpoint(batches, changelog_topic, tp.partition, taken)
        appended.entries += len(taken)
        if full:
            await asyncio.sleep(0)  # the loop's turn (the sender's among them)
            await batches.wait_capacity()
    return appended


def append_checkpoint(
    batches: BatchProducer, changelog_topic: str, partition: int, records: Encoded
) -> int:
    """Append encoded records to changelog partition ``partition``; returns their bytes.

    The caller flushes ``batches`` and only then commits the source offset.
    """
    size = 0
    append = batches.append
    for key, value in records:
        append(changelog_topic, partition, key, value, None)
        size += len(key) + (len(value) if value else 0)
    return size


class ChangelogReader:
    """Folds one changelog partition's records into committed per-source-partition state.

    A source with an :class:`Applier` is streamed instead: its entries go to the applier
    in batches (of :data:`APPLY_BATCH`) as they are read, whether a metadata record commits
    them later or not, and only where the uncommitted ones start is kept
    (:attr:`RestoredPartition.cut_from`). ``only``: of those sources, read only those
    entries; ``values``: False keeps None for every pending entry (only its name counts).
    """

    __slots__ = (
        "appliers",
        "batch",
        "batches",
        "committed",
        "cut",
        "only",
        "pending",
        "records",
        "values",
    )

    def __init__(
        self,
        appliers: Mapping[str, Applier] | None = None,
        only: Mapping[str, set[str]] | None = None,
        values: bool = True,
        batch: int = APPLY_BATCH,
    ) -> None:
        self.batch = batch
        self.committed: dict[str, RestoredPartition] = {}
        # source "topic|partition|" -> entries seen since that partition's last metadata
        self.pending: dict[str, dict[str, Any]] = {}
        self.records: dict[str, int] = {}
        self.appliers = appliers or {}
        self.batches: dict[str, list[tuple[str, Any]]] = {source: [] for source in self.appliers}
        self.cut: dict[str, int] = {}
        """Streamed sources: the offset of their first entry after their last metadata."""
        self.only = only or {}
        self.values = values

    def add(self, key: bytes | None, value: bytes | None, wanted: set[str], offset: int) -> None:
        if key is None:
            return
        text = key.decode()
        topic, partition, kind_entry = text.split("|", 2)
        source = f"{topic}|{partition}|"
        if source not in wanted:
            return
        self.records[source] = self.records.get(source, 0) + 1
        applier = self.appliers.get(source)
        if kind_entry == META:
            if value is None:  # a reset: forget everything of this partition
                self.committed.pop(source, None)
                self.pending.pop(source, None)
                if applier is not None:
                    self.batches[source].clear()
                    self.cut.pop(source, None)
                    applier.reset()
                return
            state = self.committed.setdefault(source, RestoredPartition())
            if applier is not None:
                self.cut.pop(source, None)  # what was applied is committed
            else:
                for entry, data in self.pending.pop(source, {}).items():
                    if data is None:
                        state.entries.pop(entry, None)
                    else:
                        state.entries[entry] = data
            state.meta = orjson.loads(value)
            return
        kind, _, entry = kind_entry.partition("|")
        if kind != STATE:
            return
        if applier is not None:
            self.cut.setdefault(source, offset)
            batch = self.batches[source]
            batch.append((entry, None if value is None else orjson.loads(value)))
            if len(batch) >= self.batch:
                applier.apply(batch)
                batch.clear()
            return
        only = self.only.get(source)
        if only is not None and entry not in only:
            return
        data = None if value is None or not self.values else orjson.loads(value)
        self.pending.setdefault(source, {})[entry] = data

    def finish(self) -> None:
        """Hand the streamed sources' last batches over."""
        for source, batch in self.batches.items():
            if batch:
                self.appliers[source].apply(batch)
                batch.clear()

    def result(self, source: str) -> RestoredPartition:
        state = self.committed.get(source) or RestoredPartition()
        state.records = self.records.get(source, 0)
        state.cut_from = self.cut.get(source)
        for entry in self.pending.get(source, {}):
            state.repair[entry] = state.entries.get(entry)
        return state


async def read_changelog(
    cluster: KafkaCluster,
    changelog_topic: str,
    partitions: list[TopicPartition],
    isolation_level: str = "read_uncommitted",
    timeout_s: float = 90.0,
    starts: dict[int, int] | None = None,
    appliers: Mapping[TopicPartition, Applier] | None = None,
    only: Mapping[TopicPartition, set[str]] | None = None,
    values: bool = True,
) -> dict[TopicPartition, RestoredPartition]:
    """Read the changelog partitions of ``partitions`` from the beginning to their end
    (``starts``: from that offset, by changelog partition: a local restore's tail).

    ``appliers``: those partitions are streamed onto them (:class:`ChangelogReader`), their
    :attr:`RestoredPartition.entries` left empty; ``only`` and ``values``: see there.

    ``timeout_s`` bounds the time without a record read, not the read: a restore that
    progresses takes what the changelog needs (a 10M-key changelog takes minutes), one
    that stalls fails. (A bound on the whole read failed a 6M-key session changelog's
    restore at 90 s again and again, each attempt starting over.)

    The end is the fetch high watermark (``end_offsets()`` can be early on some brokers).
    ``read_committed`` (exactly-once) reads to the high watermark too, not to the last
    stable offset: another partition's transaction open on the same changelog partition
    (a same-numbered partition of the other stage, or of another topic) holds the
    stable offset back while records after it may be committed entries of ours, so the
    read waits for that transaction to end (at its commit, or the transaction timeout).
    """
    if not partitions:
        return {}
    wanted = {entry_prefix(tp.topic, tp.partition) for tp in partitions}
    log_parts = sorted({TopicPartition(changelog_topic, tp.partition) for tp in partitions})
    consumer = cluster.consumer(
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        # Short: the read ends on an empty fetch (every first start reads nothing but
        # one), which some brokers (Tansu) hold for the whole wait. 5 ms instead of 20
        # took an empty changelog's read from ~42 ms to ~11 ms on Tansu.
        fetch_max_wait_ms=RESTORE_FETCH_WAIT_MS,
        max_partition_fetch_bytes=4 * 1024 * 1024,
        isolation_level=isolation_level,
    )
    reader = ChangelogReader(
        {entry_prefix(tp.topic, tp.partition): a for tp, a in (appliers or {}).items()},
        {entry_prefix(tp.topic, tp.partition): names for tp, names in (only or {}).items()},
        values,
    )
    deadline = time.monotonic() + timeout_s
    try:
        await consumer.start()  # inside: a failed start still needs its stop()
        consumer.assign(log_parts)
        starts = starts or {}
        beginning = [part for part in log_parts if starts.get(part.partition, 0) <= 0]
        if beginning:
            await consumer.seek_to_beginning(*beginning)
        for log_part in log_parts:
            start = starts.get(log_part.partition, 0)
            if start > 0:
                # Out of the log's range (a changelog made again): the reset goes to the
                # beginning, and replaying all of it onto the local state is right too.
                consumer.seek(log_part, start)
        remaining = set(log_parts)
        while remaining:
            if time.monotonic() > deadline:
                raise RestoreError(f"changelog {changelog_topic}: nothing read for {timeout_s}s")
            # Short: a getmany that gets no records waits its whole timeout even after
            # the fetch answered, and an empty changelog (every first start) gets none;
            # the end is known from the high watermark after the first fetch answer.
            batch = await consumer.getmany(timeout_ms=RESTORE_FETCH_WAIT_MS, max_records=10_000)
            if batch:
                deadline = time.monotonic() + timeout_s
            for records in batch.values():
                for record in records:
                    reader.add(record.key, record.value, wanted, record.offset)
            for tp in list(remaining):
                highwater = consumer.highwater(tp)
                if highwater is not None and await consumer.position(tp) >= highwater:
                    remaining.discard(tp)
            await asyncio.sleep(0)
        reader.finish()
    finally:
        await consumer.stop()
    return {tp: reader.result(entry_prefix(tp.topic, tp.partition)) for tp in partitions}


async def read_committed_values(
    cluster: KafkaCluster,
    changelog_topic: str,
    cut: Mapping[TopicPartition, int],
    isolation_level: str = "read_uncommitted",
    read: dict[TopicPartition, int] | None = None,
) -> dict[TopicPartition, dict[str, Any]]:
    """Streamed partitions whose changelog ends in a checkpoint cut short (``cut``: where
    its entries start, :attr:`RestoredPartition.cut_from`): each of those entries with
    its committed value (None: absent), what the restore puts back and the repair
    writes. Two reads, neither holding more than those entries: their names from where
    they start, then their committed values from the beginning. ``read``: the records
    both read, added to it by partition."""
    counted: dict[TopicPartition, int] = {} if read is None else read
    names: dict[TopicPartition, set[str]] = {}
    for tp, offset in cut.items():
        tail = await read_changelog(
            cluster,
            changelog_topic,
            [tp],
            isolation_level,
            starts={tp.partition: offset},
            values=False,
        )
        names[tp] = set(tail[tp].repair)
        counted[tp] = counted.get(tp, 0) + tail[tp].records
    whole = await read_changelog(cluster, changelog_topic, list(names), isolation_level, only=names)
    for tp in names:
        counted[tp] = counted.get(tp, 0) + whole[tp].records
    return {tp: {name: whole[tp].entries.get(name) for name in names[tp]} for tp in names}
