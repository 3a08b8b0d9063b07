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
from collections.abc import Awaitable, Callable

from service.core.time import Clock, SystemClock
from service.runtime.definition import PipelineDefinition
from service.runtime.metrics import METRICS, RuntimeMetrics
from service.runtime.session import Session
from service.runtime.settings import RuntimeSettings
from service.runtime.status import PipelineState, PipelineStatus

logger = logging.getLogger(__name__)

_HEALTHY_SESSION_S = 30.0

_CLOSE_TIMEOUT_S = 5.0
"""How long a failed session's clients may take to stop (a dead broker never answers)."""


class BrokerUnavailable(ConnectionError):
    """The broker stopped answering the runtime's health check."""


class PipelineRunner:
    """Runs one pipeline until stopped; restarts its session after errors."""

    def __init__(
        self,
        definition: PipelineDefinition,
        settings: RuntimeSettings,
        clock: Clock | None = None,
        metrics: RuntimeMetrics = METRICS,
        broker_check: Callable[[], Awaitable[bool]] | None = None,
        broker_up: asyncio.Event | None = None,
    ) -> None:
        """``broker_check`` and ``broker_up`` are the runtime's health check and its
        result: after a failure with the broker unreachable, the runner waits for
        ``broker_up`` instead of failing again at every backoff (no crash loop)."""
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
        self._session_task: asyncio.Task[bool] | None = None
        self._broker_check = broker_check
        self._broker_up = broker_up

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

    def broker_lost(self) -> None:
        """The health check lost the broker: end the session now, without a checkpoint.

        Its consumer would otherwise keep retrying in place, and after a broker restart
        that lost its data (the embedded broker) it would seek to offsets of topics that
        no longer exist and checkpoint state that no longer matches them. A new session
        starts when the broker is back and restores from the changelog (on Kafka, it has
        everything the last checkpoint covered; the input after it is replayed).
        """
        session = self._session
        if session is not None:
            session.abort(BrokerUnavailable("the broker is not reachable"))
        task = self._session_task
        if task is not None:
            task.cancel()

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
        if session is None:
            return PipelineStatus(
                name=self.definition.name,
                state=self.state,
                reason=self.reason,
                watermark=None,
                partitions=(),
                records_in=0,
                restarts=self.restarts,
            )
        now = self.clock.now_ms()
        report = session.reporter.partition_status
        done, total = session.partitions_done
        return PipelineStatus(
            name=self.definition.name,
            state=self.state,
            reason=self.reason,
            watermark=session.emitter.current,
            partitions=tuple(report(p, now) for p in session.partitions.values())
            or session.final_partitions,
            records_in=session.records_in,
            restarts=self.restarts,
            loop_turns=session.polls,
            idle_advancing=session.emitter.idle_advancing,
            finished_here=tuple(sorted(f"{t.topic}/{t.partition}" for t in session.finished_here)),
            partitions_finished=done if total else None,
            partitions_total=total or None,
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
                finished = await self._run_session(session)
            except asyncio.CancelledError:
                await session.close(checkpoint=False)
                raise
            except Exception as exc:
                reason = f"{type(exc).__name__}: {exc}"
                self._set_state(PipelineState.FAILED, reason)  # at once: closing can be slow
                await self._close_failed(session)
                if time.monotonic() - started > _HEALTHY_SESSION_S:
                    backoff = self.settings.restart_backoff_initial_s
                self.restarts += 1
                self.metrics.pipeline_restarts.labels(name).inc()
                logger.warning(
                    "pipeline %s failed (%s); restarting in %.1fs", name, reason, backoff
                )
                if await self._broker_down():
                    logger.warning("pipeline %s: waiting for the broker", name)
                    self._set_state(PipelineState.FAILED, f"{reason} (waiting for the broker)")
                    await self._wait_for_broker()
                    backoff = self.settings.restart_backoff_initial_s
                    continue
                self._set_state(PipelineState.FAILED, f"{reason} (retrying in {backoff:.1f}s)")
                await self._wait_stop(backoff)
                backoff = min(backoff * 2, self.settings.restart_backoff_max_s)
                continue
            if finished:
                self._set_state(PipelineState.FINISHED)
            return

    async def _run_session(self, session: Session) -> bool:
        """``session.run()`` in a task of its own, so :meth:`broker_lost` can end it
        wherever it waits (a fetch, a flush awaiting acks, a join); the session's error
        is then raised here as its failure."""
        task = asyncio.get_running_loop().create_task(
            session.run(), name=f"clockwork-session-{self.definition.name}"
        )
        self._session_task = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if session.error is not None and (current is None or current.cancelling() == 0):
                raise session.error from None
            raise
        finally:
            self._session_task = None

    async def _close_failed(self, session: Session) -> None:
        """Close a failed session's clients, bounded: with the broker gone, aiokafka's
        ``stop()`` can wait for requests that are never answered."""
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT_S):
                await session.close(checkpoint=False)
        except TimeoutError:
            logger.warning(
                "pipeline %s: failed session did not close in time", self.definition.name
            )

    async def _broker_down(self) -> bool:
        """Whether the runtime's health check (asked now) finds the broker unreachable."""
        if self._broker_check is None or self._stop.is_set():
            return False
        return not await self._broker_check()

    async def _wait_for_broker(self) -> None:
        """Until the health check sees the broker again, or a stop; no session meanwhile."""
        up = self._broker_up
        if up is None:
            return
        stop = asyncio.ensure_future(self._stop.wait())
        back = asyncio.ensure_future(up.wait())
        try:
            await asyncio.wait({stop, back}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            back.cancel()
            await asyncio.gather(stop, back, return_exceptions=True)

    async def _wait_stop(self, delay_s: float) -> None:
        """Sleep ``delay_s``, or less if a stop comes."""
        try:
            async with asyncio.timeout(delay_s):
                await self._stop.wait()
        except TimeoutError:
            pass
