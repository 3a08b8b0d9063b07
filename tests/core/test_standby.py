"""The standby replicas' placement (service/core/standby.py): pure, property-tested."""

from __future__ import annotations

import random

from hypothesis import given, seed, settings
from hypothesis import strategies as st

from service.core.standby import standby_placement

MEMBERS = st.lists(
    st.text("abcdef0123456789-", min_size=1, max_size=6), min_size=1, max_size=8, unique=True
)


def round_robin(partitions: int, members: list[str]) -> dict[int, str]:
    """Kafka's round-robin assignment of partitions 0..n-1 over the sorted members."""
    ring = sorted(members)
    return {p: ring[p % len(ring)] for p in range(partitions)}


@seed(5301)
@settings(max_examples=300, deadline=None)
@given(
    members=MEMBERS, partitions=st.integers(0, 40), replicas=st.integers(-1, 10), rng=st.randoms()
)
def test_standbys_are_other_live_members_as_many_as_there_can_be(
    members: list[str], partitions: int, replicas: int, rng: random.Random
) -> None:
    owners = {p: rng.choice(members) for p in range(partitions)}
    placement = standby_placement(owners, members, replicas)
    assert placement.keys() == owners.keys()
    for p, standbys in placement.items():
        assert owners[p] not in standbys
        assert len(set(standbys)) == len(standbys) == min(max(replicas, 0), len(members) - 1)
        assert set(standbys) <= set(members)


@seed(5302)
@settings(max_examples=200, deadline=None)
@given(members=MEMBERS, partitions=st.integers(0, 40), replicas=st.integers(0, 4), rng=st.randoms())
def test_the_placement_does_not_depend_on_the_order_members_come_in(
    members: list[str], partitions: int, replicas: int, rng: random.Random
) -> None:
    owners = {p: rng.choice(members) for p in range(partitions)}
    shuffled = list(members)
    rng.shuffle(shuffled)
    assert standby_placement(owners, members, replicas) == standby_placement(
        owners, shuffled, replicas
    )


@seed(5303)
@settings(max_examples=200, deadline=None)
@given(members=MEMBERS, partitions=st.integers(0, 40), replicas=st.integers(0, 4))
def test_over_a_round_robin_assignment_each_member_stands_by_for_as_many(
    members: list[str], partitions: int, replicas: int
) -> None:
    """Each member's standby load is the active load of the members before it on the
    ring, so no member keeps more than ``replicas`` copies above another."""
    placement = standby_placement(round_robin(partitions, members), members, replicas)
    load = dict.fromkeys(members, 0)
    for standbys in placement.values():
        for m in standbys:
            load[m] += 1
    assert max(load.values()) - min(load.values()) <= max(replicas, 1)
    assert sum(load.values()) == partitions * min(replicas, len(members) - 1)


def test_the_next_members_after_the_owner_on_the_sorted_ring() -> None:
    owners = {0: "a", 1: "b", 2: "c", 3: "a"}
    assert standby_placement(owners, ["c", "a", "b"], 1) == {
        0: ("b",),
        1: ("c",),
        2: ("a",),
        3: ("b",),
    }
    assert standby_placement(owners, ["c", "a", "b"], 5) == {
        0: ("b", "c"),
        1: ("c", "a"),
        2: ("a", "b"),
        3: ("b", "c"),
    }
    assert standby_placement({0: "a"}, ["a"], 1) == {0: ()}  # alone: no standby
