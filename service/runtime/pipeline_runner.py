"""One pipeline on this instance: its lifecycle, controls, status and restarts.

Layers (style.md, "task, operator, state"): the runner owns a pipeline's life; each
consumer-group membership is a :class:`~service.runtime.session.Session` (clients,
partitions, the fetch loop in ``fetch_loop.py``, rebalances in ``rebalance.py``,
checkpoints and restores in ``checkpointing.py``, status and metrics in
``reporting.py``); each assigned partition is a
:class:`~service.runtime.partition.PartitionTask` with its own operator instance and
watermark generator; operators stay synchronous.

Failures: any error of a session ends it; its in-memory state is dropped (the changelog
has it) and a new session starts after an exponential backoff. A stop is graceful: the
batch in hand is finished, outputs are flushed, every partition is checkpointed and
committed, and the consumer leaves the group, so a restart re-emits nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from service.core.time import Clock, SystemClock
from service.runtime.definition import PipelineDefinition
from service.runtime.metrics import METRICS, RuntimeMetrics
from service.runtime.session import Session
from service.runtime.settings import RuntimeSettings
from service.runtime.status import PartitionStatus, PipelineState, PipelineStatus

logger = logging.getLogger(__name__)

_HEALTHY_SESSION_S = 30.0


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
        self._session: Session | None = None

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
            report = session.reporter.partition_status
            parts = tuple(report(p, now) for p in session.partitions.values())
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
            session = Session(self)
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
