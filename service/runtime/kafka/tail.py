"""A live tail of a few topics: the newest records, read by a consumer of their own.

For the console's view of a pipeline's result, late-data and dead-letter topics. Why a
separate consumer and not a hook in the sinks: the pipeline's hot path stays as it is
(nothing per record, whether anyone watches or not), and the tail sees exactly what a
downstream consumer sees, from any replica. The consumer has no group (nothing is
committed, no rebalance touches the pipeline's groups), reads at most ``backlog``
records back per partition when it starts, and is closed with the tail.

Bounded everywhere: the fetch size, and each batch handed out keeps only its newest
``max_batch`` records (the rest are counted as skipped), so a topic written at 100k
records/s costs a watcher a few dozen records per fetch. Topics that do not exist yet
(a late topic nothing was late for) are looked for again every few seconds.

Each record is handed out as JSON (:func:`tail_record`): a key, a header value or a
value that is not readable text (:func:`readable`) comes as hex and says so, so a page
never shows bytes as text.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import ConsumerRecord, TopicPartition

from service.runtime.kafka.clients import KafkaCluster

__all__ = ["TailBatch", "TopicTail", "open_tails", "readable", "tail_record"]

logger = logging.getLogger(__name__)

_OPEN: set[TopicTail] = set()


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Control characters but tab, line feed and carriage return: in a string that decodes
as UTF-8, a sign of binary data (a big-endian integer's zero bytes)."""


def open_tails() -> int:
    """Tails whose consumer is open in this process."""
    return len(_OPEN)


def readable(data: bytes) -> tuple[str, str]:
    """``(text, "text")`` when ``data`` is UTF-8 without control characters (tabs and
    line breaks allowed); otherwise ``(lowercase hex of every byte, "hex")``."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return data.hex(), "hex"
    if _CONTROL.search(text):
        return data.hex(), "hex"
    return text, "text"


def tail_record(record: ConsumerRecord[bytes, bytes], kind: str) -> dict[str, Any]:
    """One record as the tail's event shows it. ``value_format`` is ``json`` (a JSON
    value, parsed), ``text`` or ``hex`` (see :func:`readable`); ``key_format`` and each
    header's ``format`` are ``text`` or ``hex``; a null key or value is ``None``."""
    value: Any = None
    value_format = "json"
    if record.value is not None:
        try:
            value = orjson.loads(record.value)
        except orjson.JSONDecodeError:
            value, value_format = readable(record.value)
    key, key_format = (None, "text") if record.key is None else readable(record.key)
    headers = []
    for name, data in record.headers or ():
        shown, shown_format = readable(data)
        headers.append({"name": name, "value": shown, "format": shown_format})
    return {
        "kind": kind,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": key,
        "key_format": key_format,
        "headers": headers,
        "value": value,
        "value_format": value_format,
    }


@dataclass(frozen=True, slots=True)
class TailBatch:
    """Records of one fetch in the order they were written (per partition), and how many
    older ones of that fetch were left out."""

    records: list[dict[str, Any]]
    skipped: int


class TopicTail:
    """``async with TopicTail(...) as tail: async for batch in tail.batches(): ...``"""

    def __init__(
        self,
        cluster: KafkaCluster,
        topics: Mapping[str, str],
        *,
        backlog: int = 20,
        max_batch: int = 50,
        fetch_max_wait_ms: int = 100,
        rediscover_s: float = 2.0,
    ) -> None:
        """``topics``: kind (``result``, ``late``, ``dead_letter``) -> topic name."""
        self.topics = dict(topics)
        self._kinds = {topic: kind for kind, topic in self.topics.items()}
        self.backlog = backlog
        self.max_batch = max_batch
        self.rediscover_s = rediscover_s
        self._consumer = cluster.consumer(
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_max_bytes=1024 * 1024,
            max_partition_fetch_bytes=256 * 1024,
        )
        self._assigned: set[TopicPartition] = set()
        self._fresh: set[TopicPartition] = set()
        """Assigned, no fetch with a high watermark yet (see :meth:`_backlog`)."""
        self._next_look = 0.0
        self._complete = False

    async def __aenter__(self) -> TopicTail:
        # Open from before the start: a start that fails or is cancelled (the client
        # left, the service stops) has connections too, and only stop() ends them.
        _OPEN.add(self)
        try:
            await self._consumer.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the consumer, even when the caller is being cancelled (a client that went
        away): the stop runs on in its own task."""
        if self not in _OPEN:
            return
        _OPEN.discard(self)
        await asyncio.shield(self._consumer.stop())

    async def batches(self, timeout_ms: int = 500) -> AsyncIterator[TailBatch]:
        """Batches as they arrive; an empty one every ``timeout_ms`` when nothing does (a
        chance for the caller to notice its client left)."""
        while True:
            await self._discover()
            if not self._assigned:
                await asyncio.sleep(timeout_ms / 1000)
                yield TailBatch([], 0)
                continue
            fetched = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=1000)
            # Arrival order (offsets) per partition; record timestamps are event time, which
            # a result topic does not write in order.
            records = [r for tp, batch in fetched.items() for r in self._backlog(tp, batch)]
            skipped = max(len(records) - self.max_batch, 0)
            kinds = self._kinds
            yield TailBatch(
                [tail_record(r, kinds.get(r.topic, r.topic)) for r in records[skipped:]], skipped
            )

    async def _discover(self) -> None:
        """Assign the partitions of the topics that exist now, each from ``backlog``
        records before its end; look again every ``rediscover_s`` until all exist."""
        now = time.monotonic()
        if self._complete or now < self._next_look:
            return
        self._next_look = now + self.rediscover_s
        try:
            # What consumer.topics() asks, but its answer is used: topics() does not keep
            # it, so partitions_for_topic() would not see a topic created since start.
            cluster = await self._consumer._client.fetch_all_metadata()
        except Exception as exc:  # no metadata this time: the next look
            logger.debug("tail metadata not read: %r", exc)
            return
        partitions = {t: cluster.partitions_for_topic(t) or set() for t in self.topics.values()}
        found = {TopicPartition(t, p) for t, ps in partitions.items() for p in ps}
        self._complete = all(partitions.values())
        new = found - self._assigned
        if not new:
            return
        # assign() replaces the assignment and forgets positions: keep the old ones.
        positions = {tp: await self._consumer.position(tp) for tp in self._assigned}
        self._assigned |= new
        self._fresh |= new
        self._consumer.assign(sorted(self._assigned))
        for tp, position in positions.items():
            self._consumer.seek(tp, position)
        starts = await self._consumer.beginning_offsets(list(new))
        ends = await self._consumer.end_offsets(list(new))
        for tp in new:
            self._consumer.seek(tp, max(starts[tp], ends[tp] - self.backlog))

    def _backlog(
        self, tp: TopicPartition, batch: list[ConsumerRecord[bytes, bytes]]
    ) -> list[ConsumerRecord[bytes, bytes]]:
        """A new partition's first fetch, cut to ``backlog`` records before the fetch's
        high watermark: the start offset came from ``end_offsets()``, which the embedded
        broker (Tansu) can answer too low; the high watermark it fetches with is right."""
        if tp not in self._fresh:
            return batch
        highwater = self._consumer.highwater(tp)
        if highwater is None:
            return batch
        self._fresh.discard(tp)
        start = highwater - self.backlog
        if batch and batch[-1].offset + 1 < start:
            self._consumer.seek(tp, start)
        return [r for r in batch if r.offset >= start]
