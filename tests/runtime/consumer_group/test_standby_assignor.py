"""The standby assignor (consumer_group/standby.py) over given group metadata, no broker:
the active partitions are Kafka's round-robin assignment, and every member learns the
same placement of the standbys, named by the members' own names."""

from __future__ import annotations

from aiokafka import TopicPartition
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocol

from service.runtime.consumer_group.standby import StandbyAssignor


class Partitions:
    """What an assignor reads of the cluster's metadata: a topic's partitions."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        count = self.counts.get(topic)
        return set(range(count)) if count is not None else None


def group(names: dict[str, str], topics: list[str]) -> dict[str, object]:
    """Each member's JoinGroup metadata as the leader decodes it (member id -> name)."""
    return {
        member_id: ConsumerProtocol.METADATA.decode(
            StandbyAssignor(name, 1).metadata(topics).encode()
        )
        for member_id, name in names.items()
    }


def test_the_active_assignment_is_kafka_s_round_robin() -> None:
    cluster = Partitions({"in": 6})
    members = group({"m-2": "two", "m-1": "one", "m-3": "three"}, ["in"])
    ours = StandbyAssignor("one", 1).assign(cluster, members)
    kafka = RoundRobinPartitionAssignor.assign(cluster, members)
    assert {m: a.partitions() for m, a in ours.items()} == {
        m: a.partitions() for m, a in kafka.items()
    }


def test_every_member_learns_its_copies_and_the_whole_placement() -> None:
    cluster = Partitions({"in": 4})
    members = group({"m-1": "one", "m-2": "two"}, ["in"])
    assignments = StandbyAssignor("one", 1).assign(cluster, members)
    learnt = {}
    for member_id, assignment in assignments.items():
        # through the wire, as SyncGroup hands it to the member
        decoded = ConsumerProtocol.ASSIGNMENT.decode(assignment.encode())
        assignor = StandbyAssignor("?", 1)
        assignor.on_assignment(decoded)
        learnt[member_id] = assignor
        owned = set(decoded.partitions())
        assert owned.isdisjoint(assignor.standby)
    tps = [TopicPartition("in", p) for p in range(4)]
    assert learnt["m-1"].standby == {tps[1], tps[3]}  # m-2's partitions
    assert learnt["m-2"].standby == {tps[0], tps[2]}
    placement = {tps[0]: ("two",), tps[1]: ("one",), tps[2]: ("two",), tps[3]: ("one",)}
    assert learnt["m-1"].placement == learnt["m-2"].placement == placement


def test_a_member_alone_stands_by_for_nothing() -> None:
    cluster = Partitions({"in": 2})
    members = group({"m-1": "one"}, ["in"])
    (assignment,) = StandbyAssignor("one", 2).assign(cluster, members).values()
    assignor = StandbyAssignor("one", 2)
    assignor.on_assignment(assignment)
    assert assignor.standby == set()
    assert set(assignor.placement.values()) == {()}


def test_an_assignment_without_standbys_forgets_the_last() -> None:
    assignor = StandbyAssignor("one", 1)
    assignor.standby = {TopicPartition("in", 0)}
    assignor.on_assignment(ConsumerProtocol.ASSIGNMENT(0, [("in", [1])], b"not json"))
    assert assignor.standby == set()
    assert assignor.placement == {}
