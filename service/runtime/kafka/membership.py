"""Whether a consumer's group membership was lost, rather than taken through a rebalance.

A member whose session timed out (no heartbeat within ``session.timeout.ms``: its event
loop held that long, a pause of the process, a network partition) is dropped by the
group coordinator, which hands its partitions to the others at once. The member learns
it only at its next heartbeat or commit: aiokafka then resets its generation and calls
the rebalance listener's revoke, as for any rebalance. By then another member may own
those partitions, restored from their changelog: a checkpoint written now would put a
zombie's entries and metadata over the new owner's (Kafka Streams' ``onPartitionsLost``
closes such tasks without committing, for this reason).
"""

from __future__ import annotations

from typing import Any

from aiokafka.protocol.commit import OffsetCommitRequest

__all__ = ["membership_lost"]


def membership_lost(consumer: Any) -> bool:
    """Whether ``consumer``'s generation was reset (the coordinator no longer knew it):
    the partitions a revoke hands over now are lost, not revoked. Reads aiokafka's
    private ``_coordinator.generation`` (aiokafka 0.14; a consumer without one: False)."""
    coordinator = getattr(consumer, "_coordinator", None)
    generation = getattr(coordinator, "generation", None)
    return bool(generation == OffsetCommitRequest.DEFAULT_GENERATION_ID)
