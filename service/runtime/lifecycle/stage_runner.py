"""One stage of a pipeline on this instance: its sessions, one after the other.

A stage (:mod:`~service.runtime.consumer_group.stages`) is one consumer-group membership
kind of a pipeline; each membership is a
:class:`~service.runtime.consumer_group.session.Session`. Any error of a session ends
it; its in-memory state is dropped (the changelog has it) and a new session starts after
an exponential backoff. With the broker unreachable the stage waits for the runtime's
health check to see it again instead of failing at every backoff (no crash loop). A stop
is graceful: the batch in hand is finished, outputs are flushed, every partition is
checkpointed and committed, and the consumer leaves the group.

The stages of one pipeline run side by side and fail and restart on their own: the
shuffle topic between them is durable, so neither needs the other to be up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from service.core.time import Clock
from service.runtime.consumer_group.session import Session
from service.runtime.consumer_group.stages import Stage
from service.runtime.definition import PipelineDefinition
from service.runtime.kafka.access import authorization_problem, connection_problem
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.observability.metrics import RuntimeMetrics
from service.runtime.observability.status import PipelineState
from service.runtime.pipeline_topics.names import INTERNAL_PREFIX
from service.runtime.settings import RuntimeSettings

logger = logging.getLogger(__name__)

_HEALTHY_SESSION_S = 30.0

_CLOSE_TIMEOUT_S = 5.0
"""How long a failed session's clients may take to stop (a dead broker never answers)."""


class BrokerUnavailable(ConnectionError):
    """The broker stopped answering the runtime's health check."""


class StageRunner:
    """Runs one stage of a pipeline until stopped; restarts its session after errors."""

    def __init__(
        self,
        stage: Stage,
        settings: RuntimeSettings,
        clock: Clock,
        metrics: RuntimeMetrics,
        stop: asyncio.Event,
        on_state: Callable[[], None],
        broker_check: Callable[[], Awaitable[bool]] | None = None,
        broker_up: asyncio.Event | None = None,
    ) -> None:
        """``stop`` is the pipeline's; ``on_state`` is called after every state change."""
        self.stage = stage
        self.definition: PipelineDefinition = stage.definition
        self.settings = settings
        self.clock = clock
        self.metrics = metrics
        self.state = PipelineState.STARTING
        self.reason: str | None = None
        self.restarts = 0
        self.paused = False
        self._stop = stop
        self._on_state = on_state
        self._session: Session | None = None
        self._session_task: asyncio.Task[bool] | None = None
        self._broker_check = broker_check
        self._broker_up = broker_up

    @property
    def session(self) -> Session | None:
        """The current session (or the last one, once the stage ended)."""
        return self._session

    @property
    def stopping(self) -> asyncio.Event:
        """The pipeline's stop: set once, when the pipeline stops."""
        return self._stop

    def _set_state(self, state: PipelineState, reason: str | None = None) -> None:
        self.state = state
        self.reason = reason
        self._on_state()

    def joined(self) -> None:
        """The session joined its group: the stage runs, or is paused."""
        self._set_state(PipelineState.PAUSED if self.paused else PipelineState.RUNNING)

    def waiting(self, reason: str | None) -> None:
        """The session waits for something outside it (the schema registry): paused
        with ``reason`` in the status; None: it runs (or is paused) again."""
        if reason is not None:
            self._set_state(PipelineState.PAUSED, reason)
        elif self.state is PipelineState.PAUSED and self.reason is not None:
            self.joined()

    # -- controls --------------------------------------------------------------------
    def interrupt(self) -> None:
        if self._session is not None:
            self._session.interrupt()

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        if self._session is not None:
            self._session.set_user_paused(paused)
        if paused and self.state is PipelineState.RUNNING:
            self._set_state(PipelineState.PAUSED)
        elif not paused and self.state is PipelineState.PAUSED:
            self._set_state(PipelineState.RUNNING)

    def broker_lost(self) -> None:
        """End the session now, without a checkpoint (see :meth:`PipelineRunner.broker_lost`)."""
        session = self._session
        if session is not None:
            session.abort(BrokerUnavailable("the broker is not reachable"))
        task = self._session_task
        if task is not None:
            task.cancel()

    # -- sessions --------------------------------------------------------------------
    async def run(self) -> None:
        try:
            await self._run()
        finally:
            await self.stage.close()

    async def _run(self) -> None:
        backoff = self.settings.restart_backoff_initial_s
        name = self.definition.name
        label = name if self.stage.name == "keyed" else f"{name} ({self.stage.name})"
        last_reason: str | None = None
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
                reason = (
                    authorization_problem(
                        exc,
                        principal=self.settings.security.principal,
                        sources=self.stage.topics,
                        group_id=self.stage.group_id,
                        own_prefix=INTERNAL_PREFIX,
                    )
                    or f"{type(exc).__name__}: {exc}"
                )
                self._set_state(PipelineState.FAILED, reason)  # at once: closing can be slow
                await self._close_failed(session)
                if time.monotonic() - started > _HEALTHY_SESSION_S:
                    backoff = self.settings.restart_backoff_initial_s
                self.restarts += 1
                self.metrics.pipeline_restarts.labels(name).inc()
                # The cause once, not at every restart while it lasts (a missing ACL).
                logger.log(
                    logging.DEBUG if reason == last_reason else logging.WARNING,
                    "pipeline %s failed (%s); restarting in %.1fs",
                    label,
                    reason,
                    backoff,
                )
                last_reason = reason
                if await self._broker_down():
                    # The status names the cause (a rejected password, an untrusted
                    # certificate), not only aiokafka's "Unable to bootstrap".
                    cause = await connection_problem(KafkaCluster.of(self.settings))
                    waiting = (
                        f"waiting for the broker: {cause}" if cause else "waiting for the broker"
                    )
                    logger.warning("pipeline %s: %s", label, waiting)
                    self._set_state(PipelineState.FAILED, f"{reason} ({waiting})")
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
