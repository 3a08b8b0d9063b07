"""The consumer group's rebalance listener: revoked partitions out, assigned ones in.

On revoke, the partitions' timers are stopped, they leave the watermark combiner, the
pause reasons and alignment, and their state is checkpointed (so the member that gets
them next resumes where this one stopped) and kept in memory until the assignment, in
case they come straight back (:meth:`Checkpointer.park`). On assign, the partitions are paused until
their state is restored from the changelog (records fetched meanwhile would be skipped),
then handed to the loop all at once (:meth:`Checkpointer.restore`).

aiokafka runs these callbacks inside a ``getmany`` (or the join of ``start``), so an
error here cannot be raised to the loop directly: it is recorded with
:meth:`Session.fail`, and the loop ends the session after its fetch returns.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from aiokafka import ConsumerRebalanceListener, TopicPartition

from service.core.alignment import WatermarkAlignment
from service.runtime.consumer_group.checkpointing import Checkpointer, tp_label
from service.runtime.consumer_group.pauses import PauseControl
from service.runtime.consumer_group.prefetch import PendingInput
from service.runtime.consumer_group.reporting import SessionReporter
from service.runtime.consumer_group.watermark_emitter import WatermarkEmitter
from service.runtime.kafka.transactions import PartitionTransactions
from service.runtime.partition.task import PartitionTask


class RebalanceSession(Protocol):
    """What a rebalance changes of its session: which partitions it holds, and every
    place a revoked partition must leave; the checkpointer does the rest."""

    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> dict[TopicPartition, PartitionTask]: ...
    @property
    def pending(self) -> dict[TopicPartition, PendingInput]: ...
    @property
    def pauses(self) -> PauseControl: ...
    @property
    def alignment(self) -> WatermarkAlignment[TopicPartition] | None: ...
    @property
    def emitter(self) -> WatermarkEmitter: ...
    @property
    def reporter(self) -> SessionReporter: ...
    @property
    def checkpointer(self) -> Checkpointer: ...
    @property
    def transactions(self) -> PartitionTransactions | None: ...
    @property
    def checkpoint_on_revoke(self) -> bool: ...
    @property
    def error(self) -> BaseException | None: ...
    def fail(self, exc: BaseException) -> None: ...


logger = logging.getLogger(__name__)


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Applies the group's assignment changes to one session."""

    def __init__(self, session: RebalanceSession) -> None:
        self._session = session

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self.revoke(list(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self.assign(list(assigned))

    async def revoke(self, revoked: list[TopicPartition]) -> None:
        session = self._session
        parts = [session.partitions.pop(tp) for tp in revoked if tp in session.partitions]
        for part in parts:
            part.close()
            session.reporter.report_timer_counts(part)  # what happened since the last refresh
            session.reporter.report_shuffle(part)
            session.emitter.combiner.revoke(part.tp)
            session.reporter.forget(part.tp)
        for tp in revoked:
            session.pending.pop(tp, None)  # not processed: the next owner reads them again
            session.pauses.forget(tp)
            if session.alignment is not None:
                session.alignment.forget(tp)
        if parts and session.checkpoint_on_revoke and session.error is None:
            try:
                await session.checkpointer.checkpoint(parts, release=True)
            except Exception as exc:
                logger.warning("pipeline %s: checkpoint on revoke failed: %r", session.name, exc)
                session.fail(exc)
            else:
                try:  # if they come straight back, their state need not be read back
                    await session.checkpointer.park(parts)
                except Exception as exc:  # only an optimisation: the changelog has it all
                    logger.info("pipeline %s: revoked partitions not kept: %r", session.name, exc)
        if session.transactions is not None:  # committed above, or to be aborted
            await session.transactions.close(revoked, drop=session.error is not None)
        if parts:
            logger.info(
                "pipeline %s: revoked %s", session.name, ", ".join(tp_label(p.tp) for p in parts)
            )

    async def assign(self, assigned: list[TopicPartition]) -> None:
        session = self._session
        new = [tp for tp in assigned if tp not in session.partitions]
        if not new:
            return
        # No fetching until the state is restored: records fetched meanwhile would be
        # skipped and fetched again after the seek. The consumer forgot every pause on
        # the rebalance, so the user's pause is applied again here too.
        session.pauses.restoring.update(new)
        session.pauses.apply()
        try:
            await session.checkpointer.restore(new)
        except Exception as exc:
            logger.warning("pipeline %s: restore failed: %r", session.name, exc)
            session.fail(exc)
