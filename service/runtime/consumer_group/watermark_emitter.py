"""The combined watermark of one pipeline on this instance, and its periodic emission.

semantics.md section 3: every ``interval_ms`` the minimum over this instance's
assigned, non-idle, unfinished partitions is taken
(:class:`~service.core.combiner.WatermarkCombiner`) and delivered to every partition's
operator that is behind it (an operator's watermark never goes back, so a partition
that joins behind holds the others back without winding them back). With
``interval_ms = 0`` the runner calls :meth:`WatermarkEmitter.emit` after every record
instead, which gives Flink's per-record results deterministically.

Why one task per pipeline and not per partition: the combined watermark is a property
of the instance, and delivering it to all partitions in one synchronous step keeps
every operator that is not behind at the same event time.

The periodic tick also runs while no record arrives, and it must: with ``idle_advance``
(issue 10) the combiner lets event time follow the wall clock once every partition is
idle, so the tick is what moves the watermark of a quiet stream. With ``interval_ms = 0``
there is no periodic emission, but a tick of :data:`IDLE_TICK_MS` still runs when idle
advance or alignment is on, since neither can be driven by records alone. After each
tick ``on_tick(now)`` runs (the runner's watermark alignment).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from aiokafka import TopicPartition

from service.core.combiner import WatermarkCombiner
from service.core.time import MIN_TIMESTAMP, Clock
from service.runtime.partition.task import PartitionTask

logger = logging.getLogger(__name__)

IDLE_TICK_MS = 100
"""The tick with ``interval_ms = 0`` when idle advance or alignment needs one."""


class WatermarkEmitter:
    """Combines partition watermarks and delivers the result to every partition."""

    __slots__ = (
        "_after_emit",
        "_clock",
        "_on_emit",
        "_on_tick",
        "_task",
        "combiner",
        "interval_ms",
        "partitions",
        "tick_ms",
    )

    def __init__(
        self,
        partitions: dict[TopicPartition, PartitionTask],
        clock: Clock,
        interval_ms: int,
        idle_timeout_ms: int | None,
        after_emit: Callable[[], None],
        *,
        idle_advance: bool = False,
        on_tick: Callable[[int], None] | None = None,
        on_emit: Callable[[int], bool] | None = None,
    ) -> None:
        """``on_tick(now)`` runs after each periodic tick (alignment), ``on_emit(now)``
        after each emission, periodic or per record (a shuffle's markers; True if it
        wrote something, which then leaves at once)."""
        self.partitions = partitions
        self.combiner: WatermarkCombiner[TopicPartition] = WatermarkCombiner(
            idle_timeout_ms, idle_advance=idle_advance
        )
        self._clock = clock
        self.interval_ms = interval_ms
        needs_tick = idle_advance or on_tick is not None
        self.tick_ms = interval_ms if interval_ms > 0 else (IDLE_TICK_MS if needs_tick else 0)
        """0: no periodic task (per-record emission only)."""
        self._after_emit = after_emit
        self._on_tick = on_tick
        self._on_emit = on_emit
        self._task: asyncio.Task[None] | None = None

    @property
    def idle_advancing(self) -> bool:
        """Whether event time currently follows the wall clock (every partition idle)."""
        return self.combiner.idle_advancing

    @property
    def current(self) -> int | None:
        """The combined watermark at the last emission; None before the first."""
        value = self.combiner.current
        return None if value == MIN_TIMESTAMP else value

    def emit(self, now: int) -> None:
        """Combine, and deliver to each operator behind the result (``MAX`` to the
        partitions whose bounded input is finished)."""
        deliveries = self.combiner.advance(now)
        if deliveries:
            partitions = self.partitions
            for tp, watermark in deliveries:
                part = partitions.get(tp)
                if part is not None:
                    part.advance_watermark(watermark)
        wrote = self._on_emit is not None and self._on_emit(now)
        if deliveries or wrote:
            self._after_emit()

    def start(self, on_error: Callable[[BaseException], None]) -> None:
        if self.tick_ms > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(on_error), name="clockwork-watermarks"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, on_error: Callable[[BaseException], None]) -> None:
        interval = self.tick_ms / 1000.0
        clock = self._clock
        on_tick = self._on_tick
        while True:
            await asyncio.sleep(interval)
            try:
                now = clock.now_ms()
                self.emit(now)
                if on_tick is not None:
                    on_tick(now)
            except Exception as exc:  # an operator bug: the runner restarts the pipeline
                logger.exception("watermark emission failed")
                on_error(exc)
                return
