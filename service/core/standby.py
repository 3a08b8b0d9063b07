"""Where standby replicas keep warm copies of partitions (issue #53; Kafka Streams'
``num.standby.replicas``).

Pure: the group's leader computes it from what it knows at every rebalance (the live
members, where each keeps its stores, and the partitions' owners: Kafka's assignment of
the active partitions) and hands it to every member with the assignment, so every
member sees the same placement.

The rule: the members sorted, as a ring; a partition's standbys are the first
``replicas`` members after its owner on the ring whose stores are elsewhere than the
owner's and than each other's (the workers of one replica share a state directory: a
copy beside the owner's store, or two copies side by side, buy nothing). Never the owner
itself. With the round-robin assignment (partition ``k`` of ``m`` members goes to the
``k``-th member mod ``m``) and every member's stores its own, each member stands by for
its predecessors' partitions: the standby load is as even as the active one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

__all__ = ["standby_placement"]

P = TypeVar("P")
M = TypeVar("M", bound=str)


def standby_placement(
    owners: Mapping[P, M],
    members: Iterable[M],
    replicas: int,
    stores: Mapping[M, str] | None = None,
) -> dict[P, tuple[M, ...]]:
    """Each owned partition's standby members (in ring order after its owner).

    ``owners``: partition -> the member that owns it (an owner that is not among
    ``members`` is added to the ring: it is a member); ``replicas``: standbys wanted per
    partition (0 or less: none); ``stores``: member -> where it keeps its stores (a
    member not in it: a place of its own). Independent of the order ``members`` come in."""
    ring = sorted({*members, *owners.values()})
    index = {member: i for i, member in enumerate(ring)}
    where = stores or {}

    def place(member: M) -> tuple[str, str]:
        store = where.get(member)
        return ("member", member) if store is None else ("store", store)

    placement: dict[P, tuple[M, ...]] = {}
    for partition, owner in owners.items():
        at = index[owner]
        taken = {place(owner)}
        chosen: list[M] = []
        for step in range(1, len(ring)):
            if len(chosen) >= replicas:
                break
            member = ring[(at + step) % len(ring)]
            if place(member) not in taken:
                taken.add(place(member))
                chosen.append(member)
        placement[partition] = tuple(chosen)
    return placement
