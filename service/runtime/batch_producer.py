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
raises the first delivery error, which is what a checkpoint needs before it commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

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
        "_error",
        "_max_pending",
        "_open",
        "_open_bytes",
        "_pending",
        "_producer",
        "_progress",
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
        self._ready: deque[tuple[Any, str, int, int]] = deque()
        self._pending = 0  # appended and not yet acknowledged (open + queued + in flight)
        self._error: BaseException | None = None
        self._wakeup = asyncio.Event()
        self._progress = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="clockwork-batch-producer"
            )

    async def close(self) -> None:
        """Stop the sender; whatever was not flushed is dropped (the checkpoint has not
        covered it, so a restart reproduces it)."""
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
        """Add one record to the open batch of ``(topic, partition)``."""
        slot = self._open.get((topic, partition))
        if slot is None:
            slot = self._open[(topic, partition)] = [self._producer.create_batch(), 0]
        size = (len(key) if key else 0) + (len(value) if value else 0) + _RECORD_OVERHEAD
        if slot[0].append(timestamp=timestamp_ms, key=key, value=value, headers=headers) is None:
            self._ready.append((slot[0], topic, partition, slot[1]))
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
        for (topic, partition), (builder, size) in self._open.items():
            ready.append((builder, topic, partition, size))
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

    async def flush(self) -> None:
        """Send everything appended so far and wait until the broker acknowledged it."""
        self._raise_error()
        while self._pending:
            self.send_open()
            self._progress.clear()
            await self._progress.wait()
            self._raise_error()

    def _delivered(
        self, topic: str, partition: int, size: int, future: asyncio.Future[Any]
    ) -> None:
        self._pending -= size
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
                while ready:
                    builder, topic, partition, size = ready.popleft()
                    future = await send_batch(builder, topic, partition=partition)
                    future.add_done_callback(
                        lambda f, t=topic, p=partition, s=size: self._delivered(t, p, s, f)
                    )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # delivered to the pipeline loop by wait_capacity/flush
            logger.warning("batch producer stopped: %r", exc)
            self._error = exc
            self._progress.set()
