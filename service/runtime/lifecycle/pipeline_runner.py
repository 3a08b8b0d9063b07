"""One pipeline on this instance: its stages, controls, status and lifecycle.

Layers (style.md, "task, operator, state"): the runner owns a pipeline's life; it runs
the pipeline's stages (:mod:`~service.runtime.consumer_group.stages`: one, or two around
a keyed shuffle), each in a :class:`~service.runtime.lifecycle.stage_runner.StageRunner`
that runs its consumer-group memberships one after the other as
:class:`~service.runtime.consumer_group.session.Session` objects (clients, partitions,
the fetch loop in ``fetch_loop.py``, rebalances in ``rebalance.py``, checkpoints and
restores in ``checkpointing.py``, status and metrics in ``reporting.py``); each assigned
partition is a :class:`~service.runtime.partition.task.PartitionTask` with its own
operator instance and watermark generator; operators stay synchronous.

State of the pipeline, from its stages': ``failed`` if one failed (with its reason),
``finished`` once all finished, ``stopped`` after a stop, ``paused`` or ``running`` once
every stage runs, ``starting`` before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from aiokafka import TopicPartition

from service.core.time import Clock, SystemClock
from service.runtime.consumer_group.stages import LookupStage, stages_of
from service.runtime.definition import PipelineDefinition
from service.runtime.lifecycle import queries
from service.runtime.lifecycle.queries import KeyAnswer, ScanAnswer
from service.runtime.lifecycle.stage_runner import BrokerUnavailable, StageRunner
from service.runtime.observability.metrics import METRICS, RuntimeMetrics
from service.runtime.observability.status import (
    LookupTableStatus,
    PartitionStatus,
    PipelineState,
    PipelineStatus,
    StageStatus,
    StandbyStatus,
)
from service.runtime.partition.task import PartitionTask
from service.runtime.settings import RuntimeSettings

__all__ = ["BrokerUnavailable", "PipelineRunner"]

logger = logging.getLogger(__name__)


class StatusWatermarks(Protocol):
    """What a pipeline's status reads of a session's watermark emitter."""

    @property
    def current(self) -> int | None: ...
    @property
    def idle_advancing(self) -> bool: ...


class StatusReport(Protocol):
    """What a pipeline's status asks of a session's reporter."""

    def partition_status(self, part: PartitionTask, now: int) -> PartitionStatus: ...


class StatusSession(Protocol):
    """What a pipeline's status reads of a stage's current (or last) session."""

    @property
    def partitions(self) -> Mapping[TopicPartition, PartitionTask]: ...
    @property
    def final_partitions(self) -> tuple[PartitionStatus, ...]: ...
    @property
    def partitions_done(self) -> tuple[int, int]: ...
    @property
    def finished_here(self) -> set[TopicPartition]: ...
    @property
    def records_in(self) -> int: ...
    @property
    def polls(self) -> int: ...
    @property
    def emitter(self) -> StatusWatermarks: ...
    @property
    def reporter(self) -> StatusReport: ...
    def standby_status(self) -> tuple[StandbyStatus, ...]: ...


class PipelineRunner:
    """Runs one pipeline until stopped: its stages side by side."""

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
        result: after a failure with the broker unreachable, a stage waits for
        ``broker_up`` instead of failing again at every backoff (no crash loop)."""
        self.definition = definition
        self.settings = settings
        self.clock: Clock = clock or SystemClock()
        self.metrics = metrics
        self.state = PipelineState.STARTING
        self.reason: str | None = None
        self.paused = False
        self._stopped = False
        self._stop = asyncio.Event()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.stages = [
            StageRunner(
                stage,
                settings,
                self.clock,
                metrics,
                self._stop,
                self._stage_changed,
                broker_check,
                broker_up,
            )
            for stage in stages_of(definition)
        ]

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
        for stage in self.stages:
            stage.interrupt()
        task = self._task
        if task is not None:
            await asyncio.shield(task)
        self._stopped = True
        self._stage_changed()

    def broker_lost(self) -> None:
        """The health check lost the broker: end the sessions now, without a checkpoint.

        A consumer would otherwise keep retrying in place, and after a broker restart
        that lost its data (the embedded broker) it would seek to offsets of topics that
        no longer exist and checkpoint state that no longer matches them. New sessions
        start when the broker is back and restore from the changelog (on Kafka, it has
        everything the last checkpoint covered; the input after it is replayed).
        """
        for stage in self.stages:
            stage.broker_lost()

    def pause(self) -> None:
        """Stop consuming now (a fetch in flight is dropped by the consumer); state kept.

        Holds for partitions assigned later too (a rebalance), until :meth:`resume`.
        """
        self.paused = True
        for stage in self.stages:
            stage.set_paused(True)

    def resume(self) -> None:
        """Consume again; partitions paused for another reason (restoring, finished,
        watermark alignment) stay paused until that reason is gone."""
        self.paused = False
        for stage in self.stages:
            stage.set_paused(False)

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    @property
    def restarts(self) -> int:
        return sum(stage.restarts for stage in self.stages)

    @property
    def _session(self) -> StatusSession | None:
        """The keyed stage's session (the last stage): where the operators run."""
        return self.stages[-1].session

    async def wait_for_state(self, *states: PipelineState, timeout_s: float) -> PipelineState:
        """Wait until the pipeline is in one of ``states``; TimeoutError otherwise."""
        async with asyncio.timeout(timeout_s):
            while self.state not in states:
                self._changed.clear()
                await self._changed.wait()
        return self.state

    def _stage_changed(self) -> None:
        """A stage changed state: the pipeline's follows (see the module docstring)."""
        states = [stage.state for stage in self.stages]
        failed = next((s for s in self.stages if s.state is PipelineState.FAILED), None)
        # a stage waiting for something outside it (the schema registry) says why
        waiting = next(
            (s for s in self.stages if s.state is PipelineState.PAUSED and s.reason), None
        )
        if failed is not None:
            state, reason = PipelineState.FAILED, self._reason(failed)
        elif waiting is not None and not self._stopped:
            state, reason = PipelineState.PAUSED, self._reason(waiting)
        elif all(s is PipelineState.FINISHED for s in states):
            state, reason = PipelineState.FINISHED, None
        elif self._stopped:
            state, reason = PipelineState.STOPPED, None
        elif all(
            s in (PipelineState.RUNNING, PipelineState.PAUSED, PipelineState.FINISHED)
            for s in states
        ):
            state = PipelineState.PAUSED if self.paused else PipelineState.RUNNING
            reason = None
        else:
            state, reason = PipelineState.STARTING, None
        if self._stopped and state is PipelineState.FAILED:
            state, reason = PipelineState.STOPPED, None
        self.state = state
        self.reason = reason
        self.metrics.pipeline_up.labels(self.definition.name).set(
            1 if state in (PipelineState.RUNNING, PipelineState.PAUSED) else 0
        )
        self._changed.set()

    def _reason(self, stage: StageRunner) -> str | None:
        if len(self.stages) == 1 or stage.reason is None:
            return stage.reason
        return f"{stage.stage.name} stage: {stage.reason}"

    async def _main(self) -> None:
        tasks = [
            asyncio.get_running_loop().create_task(
                stage.run(), name=f"clockwork-{self.definition.name}-{stage.stage.name}"
            )
            for stage in self.stages
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- pull queries (queries.py) -----------------------------------------------------
    def query_key(self, key: str) -> KeyAnswer:
        """``key``'s state in the keyed stage's partition that owns it, if held here."""
        keyed = self.stages[-1]
        return queries.query_key(self.state, keyed.stage.topics, keyed.session, key)

    def scan(self, from_key: str | None, to_key: str | None, limit: int) -> ScanAnswer:
        """Up to ``limit`` keys of ``[from_key, to_key)`` over the partitions held here."""
        keyed = self.stages[-1]
        return queries.scan(self.state, keyed.stage.topics, keyed.session, from_key, to_key, limit)

    # -- status ----------------------------------------------------------------------
    def status(self) -> PipelineStatus:
        now = self.clock.now_ms()
        stages: list[StageStatus] = []
        partitions: list[PartitionStatus] = []
        for runner in self.stages:
            session: StatusSession | None = runner.session
            stage_name = runner.stage.name
            if session is None:
                stages.append(StageStatus(stage_name, runner.state, runner.reason))
                continue
            report = session.reporter.partition_status
            parts = tuple(report(p, now) for p in session.partitions.values())
            partitions.extend(parts or session.final_partitions)
            done, total = session.partitions_done
            stages.append(
                StageStatus(
                    stage_name,
                    runner.state,
                    runner.reason,
                    watermark=session.emitter.current,
                    records_in=session.records_in,
                    loop_turns=session.polls,
                    partitions_finished=done if total else None,
                    partitions_total=total or None,
                )
            )
        # the first stage reads the source (records in, bounded input), the last runs the
        # operators (the combined watermark)
        source: StatusSession | None = self.stages[0].session
        keyed: StatusSession | None = self.stages[-1].session
        done, total = source.partitions_done if source is not None else (0, 0)
        return PipelineStatus(
            name=self.definition.name,
            state=self.state,
            reason=self.reason,
            watermark=keyed.emitter.current if keyed is not None else None,
            partitions=tuple(partitions),
            records_in=source.records_in if source is not None else 0,
            restarts=self.restarts,
            loop_turns=sum(s.session.polls for s in self.stages if s.session is not None),
            idle_advancing=source.emitter.idle_advancing if source is not None else False,
            finished_here=tuple(
                sorted(
                    f"{t.topic}/{t.partition}"
                    for s in self.stages
                    if s.session is not None
                    for t in s.session.finished_here
                )
            ),
            partitions_finished=done if total else None,
            partitions_total=total or None,
            stages=tuple(stages) if len(stages) > 1 else (),
            lookup_table=self._lookup_table(),
            standbys=tuple(
                copy
                for s in self.stages
                if s.session is not None
                for copy in s.session.standby_status()
            ),
        )

    def _lookup_table(self) -> LookupTableStatus | None:
        stage = self.stages[0].stage
        table = stage.table if isinstance(stage, LookupStage) else None
        if table is None:
            return None
        return LookupTableStatus(
            table.input, len(table), table.max_rows, table.loaded, table.updates
        )
