"""The consumer group's rebalance listener: aiokafka's callbacks, handed to the
session's :class:`~service.runtime.consumer_group.assignment.Assignment`."""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka import ConsumerRebalanceListener, TopicPartition

from service.runtime.consumer_group.assignment import Assignment


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """Applies the group's assignment changes to one session."""

    def __init__(self, assignment: Assignment) -> None:
        self._assignment = assignment

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._assignment.revoke(list(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self._assignment.assign(list(assigned))
