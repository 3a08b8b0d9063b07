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
from dataclasses import dataclass

from aiokafka import TopicPartition

from service.core.combiner import WatermarkCombiner
from service.core.time import MIN_TIMESTAMP, Clock
from service.runtime.partition.state_hold import StateHold
from service.runtime.partition.task import PartitionTask

logger = logging.getLogger(__name__)

IDLE_TICK_MS = 100
"""The tick with ``interval_ms = 0`` when idle advance or alignment needs one."""


@dataclass(frozen=True, slots=True)
class WatermarkSnapshot:
    """What the reporter shows of the combined watermark at one moment."""

    current: int | None
    """The combined watermark at the last emission; None before the first."""
    idle: tuple[TopicPartition, ...]
    """The idle partitions, in assignment order."""
    idle_advancing: bool
    """Whether event time follows the wall clock (every partition idle)."""


class WatermarkEmitter:
    """Combines partition watermarks and delivers the result to every partition.

    The one holder of the session's :class:`~service.core.combiner.WatermarkCombiner`:
    the other parts tell it what happened to a partition (:meth:`assign`,
    :meth:`partition_active`, :meth:`finish`, :meth:`revoke`) and ask what they need
    (:meth:`minimum_excluding`, ``is_idle``, :meth:`snapshot`...)."""

    __slots__ = (
        "_after_emit",
        "_clock",
        "_combiner",
        "_hold",
        "_on_emit",
        "_on_tick",
        "_partitions",
        "_task",
        "is_idle",
        "partition_active",
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
        hold: StateHold | None = None,
    ) -> None:
        """``on_tick(now)`` runs after each periodic tick (alignment), ``on_emit(now)``
        after each emission, periodic or per record (a shuffle's markers; True if it
        wrote something, which then leaves at once). ``hold``: the session's; a tick
        while a checkpoint's snapshot holds the state is skipped."""
        self._partitions = partitions
        self._hold = hold
        combiner: WatermarkCombiner[TopicPartition] = WatermarkCombiner(
            idle_timeout_ms, idle_advance=idle_advance
        )
        self._combiner = combiner
        self.partition_active: Callable[[TopicPartition, int, int], None] = combiner.update
        """``partition_active(tp, watermark, now)``: ``tp`` took records at ``now`` (or
        holds some back), its generator at ``watermark``; it counts as active (not idle)
        from ``now``. The combiner's own bound method, so the per-record loop
        (``interval_ms = 0``) calls it with no call in between."""
        self.is_idle: Callable[[TopicPartition, int], bool] = combiner.is_idle
        """``is_idle(tp, now)``: whether held partition ``tp`` has had no record for the
        idle timeout at ``now`` (a finished one is not idle; one not held raises
        :class:`~service.core.errors.PartitionError`). The combiner's own bound method:
        stage 1's markers ask it per partition at every emission."""
        self._clock = clock
        needs_tick = idle_advance or on_tick is not None
        self.tick_ms = interval_ms if interval_ms > 0 else (IDLE_TICK_MS if needs_tick else 0)
        """0: no periodic task (per-record emission only)."""
        self._after_emit = after_emit
        self._on_tick = on_tick
        self._on_emit = on_emit
        self._task: asyncio.Task[None] | None = None

    # -- the partitions held -------------------------------------------------------------
    def assign(self, tp: TopicPartition, now: int, watermark: int, delivered: int) -> None:
        """``tp`` joins at ``now``: its generator at ``watermark``, its operator last
        delivered ``delivered`` (from its checkpoint, or MIN). It holds the minimum back
        until it catches up or goes idle."""
        self._combiner.assign(tp, now, watermark, delivered)

    def finish(self, tp: TopicPartition) -> None:
        """``tp``'s bounded input ended: it leaves the minimum, and its operator gets
        ``MAX`` at the next :meth:`emit`."""
        self._combiner.finish(tp)

    def revoke(self, tp: TopicPartition) -> None:
        """``tp`` left the session (a partition not held is ignored)."""
        self._combiner.revoke(tp)

    # -- what the others ask -------------------------------------------------------------
    def minimum_excluding(self, tp: TopicPartition, now: int) -> int | None:
        """The minimum over the counted (neither idle nor finished) partitions other
        than ``tp`` at ``now``; None if there is none. O(partitions): once per batch."""
        return self._combiner.minimum(now, excluding=tp)

    def partition_watermarks(self) -> dict[TopicPartition, int]:
        """Each held partition's generator watermark as last reported, in assignment
        order (what alignment compares)."""
        combiner = self._combiner
        return {tp: combiner.partition_watermark(tp) for tp in combiner.partitions}

    def idle_advanced(self) -> int | None:
        """The combined watermark while idle advance lets event time follow the wall
        clock (at the last emission); None while it does not."""
        combiner = self._combiner
        return combiner.current if combiner.idle_advancing else None

    @property
    def idle_advancing(self) -> bool:
        """Whether event time currently follows the wall clock (every partition idle)."""
        return self._combiner.idle_advancing

    @property
    def current(self) -> int | None:
        """The combined watermark at the last emission; None before the first."""
        value = self._combiner.current
        return None if value == MIN_TIMESTAMP else value

    def snapshot(self, now: int) -> WatermarkSnapshot:
        """The combined watermark, the idle partitions at ``now`` and whether event time
        follows the clock: read-only, for status and metrics."""
        combiner = self._combiner
        return WatermarkSnapshot(
            self.current, tuple(combiner.idle_partitions(now)), combiner.idle_advancing
        )

    # -- emission ------------------------------------------------------------------------
    def emit(self, now: int) -> None:
        """Combine, and deliver to each operator behind the result (``MAX`` to the
        partitions whose bounded input is finished)."""
        deliveries = self._combiner.advance(now)
        if deliveries:
            partitions = self._partitions
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

    def tick(self, now: int) -> None:
        """One periodic tick: emit, then ``on_tick``. Skipped while a checkpoint's
        snapshot holds the state; the next tick combines what happened meanwhile."""
        hold = self._hold
        if hold is not None and hold.held:
            return
        self.emit(now)
        if self._on_tick is not None:
            self._on_tick(now)

    async def _run(self, on_error: Callable[[BaseException], None]) -> None:
        interval = self.tick_ms / 1000.0
        clock = self._clock
        tick = self.tick
        while True:
            await asyncio.sleep(interval)
            try:
                tick(clock.now_ms())
            except Exception as exc:  # an operator bug: the runner restarts the pipeline
                logger.exception("watermark emission failed")
                on_error(exc)
                return
