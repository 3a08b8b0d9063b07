"""Producing through aiokafka's batch API, with bounded buffers (backpressure).

Why not ``producer.send()`` per record: its per-message path (a future, a partitioner
call and a dict lookup each) caps aiokafka at ~150k records/s, while appending to a
``BatchBuilder`` and handing whole batches to ``send_batch`` runs at ~1M/s (see
``shared/design/embedded-broker.md``).

How it works: callers :meth:`BatchProducer.append` synchronously (so a processing-time
timer callback can emit too) into one open builder per ``(topic, partition)``. A full
builder, and every open one on :meth:`send_open`, goes to a queue that one background
task hands to the producer in order, so records of one partition keep their order.
Bytes count as pending from ``append`` until the broker acknowledged them; callers
``await wait_capacity()`` once per batch, which blocks while more than ``max_pending``
bytes are pending. :meth:`flush` returns once everything appended was acknowledged, and
raises the first delivery error. A checkpoint needs less: that what was appended before
its snapshot is acknowledged, while the loop goes on appending. :meth:`mark` closes the
open batches and returns the number of the last one queued (batches are numbered in
queue order); :meth:`wait_delivered` returns once every batch up to a mark is
acknowledged, whatever was appended after it.

Exactly-once delivery adds a gate (:meth:`hold`, :meth:`release`): a transaction's
checkpoint marks what belongs to it, and the batches queued after the mark wait in the
queue until that transaction committed and the next one began, so that the loop goes on
appending without putting the next checkpoint's outputs into this one's transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

from aiokafka.errors import KafkaConnectionError

logger = logging.getLogger(__name__)

Headers = list[tuple[str, bytes]]
"""A list, not any sequence: aiokafka's compiled batch builder accepts lists only."""

_NO_HEADERS: Headers = []  # shared and never mutated

_RECORD_OVERHEAD = 24


class ProduceError(RuntimeError):
    """Producing failed; the runtime restarts the pipeline from its last checkpoint."""


class BatchProducer:
    """Batches per topic-partition on top of one ``AIOKafkaProducer``."""

    __slots__ = (
        "_acked",
        "_acked_later",
        "_closed",
        "_error",
        "_gate",
        "_max_pending",
        "_open",
        "_open_bytes",
        "_pending",
        "_producer",
        "_progress",
        "_queued",
        "_ready",
        "_task",
        "_wakeup",
    )

    def __init__(self, producer: Any, max_pending_bytes: int = 32 * 1024 * 1024) -> None:
        self._producer = producer
        self._max_pending = max_pending_bytes
        # (topic, partition) -> [builder, bytes]
        self._open: dict[tuple[str, int], list[Any]] = {}
        self._open_bytes = 0
        # (builder, topic, partition, bytes, number): queued for the sender, in order
        self._ready: deque[tuple[Any, str, int, int, int]] = deque()
        self._pending = 0  # appended and not yet acknowledged (open + queued + in flight)
        self._queued = 0  # how many batches were queued: the number of the last one
        self._acked = 0  # every batch numbered up to this one is acknowledged (or failed)
        self._acked_later: set[int] = set()  # acknowledged, numbered above a gap
        self._error: BaseException | None = None
        self._gate: int | None = None  # batches numbered above it wait (hold/release)
        self._wakeup = asyncio.Event()
        self._progress = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="clockwork-batch-producer"
            )

    async def close(self) -> None:
        """Stop the sender; whatever was not flushed is dropped (the checkpoint has not
        covered it, so a restart reproduces it)."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def pending_bytes(self) -> int:
        return self._pending

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None,
        headers: Headers = _NO_HEADERS,
    ) -> None:
        """Add one record to the open batch of ``(topic, partition)``.

        Raises :class:`ProduceError` once closed: nothing would send the record, and a
        caller still appending holds batches it should have let go (the session then
        restarts from its checkpoint instead of losing the record in silence)."""
        if self._closed:
            raise ProduceError(f"{topic}/{partition}: appended to closed batches")
        slot = self._open.get((topic, partition))
        if slot is None:
            slot = self._open[(topic, partition)] = [self._producer.create_batch(), 0]
        size = (len(key) if key else 0) + (len(value) if value else 0) + _RECORD_OVERHEAD
        if slot[0].append(timestamp=timestamp_ms, key=key, value=value, headers=headers) is None:
            self._queued += 1
            self._ready.append((slot[0], topic, partition, slot[1], self._queued))
            self._open_bytes -= slot[1]
            slot[0] = self._producer.create_batch()
            slot[1] = 0
            self._wakeup.set()
            if (
                slot[0].append(timestamp=timestamp_ms, key=key, value=value, headers=headers)
                is None
            ):
                raise ProduceError(f"a record of {size} bytes does not fit in one batch")
        slot[1] += size
        self._open_bytes += size
        self._pending += size

    def send_open(self) -> None:
        """Queue every open batch for sending now (the runtime's linger is one loop turn)."""
        if not self._open:
            return
        ready = self._ready
        number = self._queued
        for (topic, partition), (builder, size) in self._open.items():
            number += 1
            ready.append((builder, topic, partition, size, number))
        self._queued = number
        self._open.clear()
        self._open_bytes = 0
        self._wakeup.set()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise ProduceError(f"producing failed: {self._error!r}") from self._error

    async def wait_capacity(self) -> None:
        """Return when at most ``max_pending_bytes`` are pending; raise a delivery error."""
        self._raise_error()
        if self._pending <= self._max_pending:
            return
        self.send_open()
        while self._pending > self._max_pending:
            self._progress.clear()
            await self._progress.wait()
            self._raise_error()

    def mark(self) -> int:
        """Queue the open batches; everything appended so far is in batches up to the
        returned number (see :meth:`wait_delivered`)."""
        self.send_open()
        return self._queued

    def hold(self) -> int:
        """:meth:`mark`, and send no batch queued after the mark until :meth:`release`."""
        self._gate = self.mark()
        return self._gate

    def release(self) -> None:
        """Send the batches held since :meth:`hold`."""
        self._gate = None
        self._wakeup.set()

    async def wait_delivered(self, mark: int) -> None:
        """Return once every batch up to ``mark`` is acknowledged; raise a delivery error."""
        self._raise_error()
        while self._acked < mark:
            self._progress.clear()
            await self._progress.wait()
            self._raise_error()

    async def flush(self) -> None:
        """Send everything appended so far and wait until the broker acknowledged it."""
        self._raise_error()
        while self._pending:
            self.send_open()
            self._progress.clear()
            await self._progress.wait()
            self._raise_error()

    def _delivered(
        self, topic: str, partition: int, size: int, number: int, future: asyncio.Future[Any]
    ) -> None:
        self._pending -= size
        if number == self._acked + 1:
            acked = number
            later = self._acked_later
            while acked + 1 in later:
                acked += 1
                later.discard(acked)
            self._acked = acked
        else:
            self._acked_later.add(number)
        if future.cancelled():
            if self._error is None:
                self._error = ProduceError(f"a batch to {topic}/{partition} was cancelled")
        else:
            exc = future.exception()
            if exc is not None and self._error is None:
                self._error = ProduceError(f"a batch to {topic}/{partition} failed: {exc!r}")
                self._error.__cause__ = exc
        self._progress.set()

    async def _run(self) -> None:
        ready = self._ready
        send_batch = self._producer.send_batch
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup.clear()
                while ready and (self._gate is None or ready[0][4] <= self._gate):
                    builder, topic, partition, size, number = ready.popleft()
                    future = await send_batch(builder, topic, partition=partition)
                    future.add_done_callback(
                        lambda f, t=topic, p=partition, s=size, n=number: self._delivered(
                            t, p, s, n, f
                        )
                    )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # delivered to the pipeline loop by wait_capacity/flush
            logger.warning("batch producer stopped: %r", exc)
            self._error = exc
            self._progress.set()


def drop_unsent(producer: Any, error: BaseException | None) -> None:
    """Fail the producer's queued and in-flight batches, so ``stop()`` does not wait.

    ``AIOKafkaProducer.stop()`` first delivers everything queued, retrying for as long
    as the broker is away. A failed session's outputs are not covered by a checkpoint
    (a new session reproduces them), so they are dropped instead. Otherwise a stop cut
    short by a timeout leaves the producer running: when a broker listens on the
    address again it sends stale batches, and its metadata requests auto-create the
    pipeline's topics with the broker's defaults, racing the new session's creation
    of them with the right partition counts and configs (on Tansu the changelog then
    answered produce requests with ``UnknownError``). Reaches into aiokafka's private
    ``_message_accumulator.fail_all`` (aiokafka 0.14); without it the stop waits.
    """
    accumulator = getattr(producer, "_message_accumulator", None)
    fail_all = getattr(accumulator, "fail_all", None)
    if fail_all is not None:
        fail_all(KafkaConnectionError(f"session ended: {error!r}"))
