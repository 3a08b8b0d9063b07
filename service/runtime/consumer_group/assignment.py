"""Which partitions a session holds: the one owner of assigning and revoking them.

On revoke, the partitions' timers are stopped, they leave the watermark combiner, the
pause reasons, alignment and the pending input, and their state is checkpointed (so the
member that gets them next resumes where this one stopped) and kept in memory until the
next assignment, in case they come straight back (:meth:`Checkpointer.park`). On assign,
the partitions are paused until their state is restored (records fetched meanwhile would
be skipped); the checkpointer rebuilds them and :meth:`Assignment.join` puts them in
every place at once, so the loop never sees half an assignment.

Nothing else adds a partition to the session or takes one out of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from aiokafka import TopicPartition

from service.runtime.consumer_group.checkpointing import Restored, tp_label
from service.runtime.consumer_group.views import HeldPartitions, SessionBasics
from service.runtime.kafka.transactions import PartitionTransactions
from service.runtime.partition.task import PartitionTask

logger = logging.getLogger(__name__)


class AssignedWatermarks(Protocol):
    """What joining and leaving change of the watermark emitter."""

    def assign(self, tp: TopicPartition, now: int, watermark: int, delivered: int) -> None: ...
    def finish(self, tp: TopicPartition) -> None: ...
    def revoke(self, tp: TopicPartition) -> None: ...


class AssignedCheckpoints(Protocol):
    """What joining and leaving ask of the checkpointer: rebuild, save, keep."""

    async def restore(
        self, new: list[TopicPartition], join: Callable[[Restored], None]
    ) -> None: ...
    async def checkpoint(self, parts: list[PartitionTask], *, release: bool = False) -> None: ...
    async def park(self, parts: list[PartitionTask]) -> None: ...
    def release_local(self, tps: list[TopicPartition]) -> None: ...
    async def stop_standbys(self) -> None: ...
    def begin_standbys(self, owned: list[TopicPartition]) -> None: ...


class LeavingReport(Protocol):
    """What the reporter does for a partition that leaves: its last counts, then forget
    its series."""

    def report_timer_counts(self, part: PartitionTask) -> None: ...
    def report_shuffle(self, part: PartitionTask) -> None: ...
    def forget(self, tp: TopicPartition) -> None: ...


class AssignmentSession(SessionBasics, HeldPartitions, Protocol):
    """What joining and leaving change of the session: the partitions it holds and
    every place a partition is in, with the checkpointer that saves and rebuilds them."""

    @property
    def consumer(self) -> Any: ...
    @property
    def transactions(self) -> PartitionTransactions | None: ...
    @property
    def emitter(self) -> AssignedWatermarks: ...
    @property
    def reporter(self) -> LeavingReport: ...
    @property
    def checkpointer(self) -> AssignedCheckpoints: ...
    @property
    def checkpoint_on_revoke(self) -> bool: ...
    @property
    def error(self) -> BaseException | None: ...
    def fail(self, exc: BaseException) -> None: ...


class Assignment:
    """Assigns and revokes one session's partitions (the rebalance listener's work).

    aiokafka runs both inside a ``getmany`` (or the join of ``start``), so an error
    cannot be raised to the loop: it is recorded with ``session.fail``, and the loop
    ends the session after its fetch returns.
    """

    def __init__(self, session: AssignmentSession) -> None:
        self._session = session

    async def assign(self, assigned: list[TopicPartition]) -> None:
        session = self._session
        new = [tp for tp in assigned if tp not in session.partitions]
        if new:
            # No fetching until the state is restored: records fetched meanwhile would be
            # skipped and fetched again after the seek. The consumer forgot every pause on
            # the rebalance, so the user's pause is applied again here too.
            session.pauses.restoring.update(new)
            session.pauses.apply()
            try:
                await session.checkpointer.restore(new, self.join)
            except Exception as exc:
                logger.warning("pipeline %s: restore failed: %r", session.name, exc)
                session.fail(exc)
                return
        # The copies of other members' partitions (standby replicas), now that this
        # member's own are open: never one of those. They start in a task of their own,
        # which the next revoke stops (and awaits) before anything else.
        session.checkpointer.begin_standbys(list(assigned))

    def join(self, restored: Restored) -> None:
        """Put rebuilt partitions in every place at once: the consumer's position, the
        pending input, the pauses, the partitions, the watermark combiner, the timers."""
        session = self._session
        consumer = session.consumer
        emitter = session.emitter
        now = session.clock.now_ms()
        for part in restored.ready:
            # Records fetched before this point were skipped; the seek fetches them again.
            pending = restored.prefetched.get(part.tp)
            if pending is None:
                consumer.seek(part.tp, part.next_offset)
            else:  # the prefetched records come first, then the consumer's from their end
                consumer.seek(part.tp, pending.end)
                session.pending[part.tp] = pending
                session.pauses.draining.add(part.tp)
            session.pauses.restoring.discard(part.tp)
            session.partitions[part.tp] = part
            emitter.assign(
                part.tp, now, part.generator.current_watermark, part.operator.current_watermark
            )
            if part.finished:  # kept in memory after this member finished it
                emitter.finish(part.tp)
            part.timers.reschedule()
        session.pauses.apply()

    async def revoke(self, revoked: list[TopicPartition]) -> None:
        session = self._session
        # A rebalance begins: the standby copies stop first (their task, starting or
        # tailing, cancelled and awaited; their stores closed), so a partition assigned
        # here next opens its store alone.
        await session.checkpointer.stop_standbys()
        parts = self._leave(revoked)
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
        session.checkpointer.release_local(revoked)
        if session.transactions is not None:  # committed above, or to be aborted
            await session.transactions.close(revoked, drop=session.error is not None)
        if parts:
            logger.info(
                "pipeline %s: revoked %s", session.name, ", ".join(tp_label(p.tp) for p in parts)
            )

    def _leave(self, revoked: list[TopicPartition]) -> list[PartitionTask]:
        """Take ``revoked`` out of every place; the tasks this session held of them."""
        session = self._session
        parts = [session.partitions.pop(tp) for tp in revoked if tp in session.partitions]
        for part in parts:
            part.close()
            session.reporter.report_timer_counts(part)  # what happened since the last refresh
            session.reporter.report_shuffle(part)
            session.emitter.revoke(part.tp)
            session.reporter.forget(part.tp)
        for tp in revoked:
            session.pending.pop(tp, None)  # not processed: the next owner reads them again
            session.pauses.forget(tp)
            if session.alignment is not None:
                session.alignment.forget(tp)
        return parts
