"""What a pull query of the runtime answers, or why not (runtime/lifecycle/queries.py):
the key's partition by Kafka's default partitioner, its operator's state with its
as_of, and each reason it cannot answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import TopicPartition

from service.core.partitioner import partition_for
from service.core.time import ManualClock
from service.operators.table import build_running_aggregate
from service.runtime.lifecycle.queries import (
    NotOwnedHere,
    NotQueryable,
    StateUnavailable,
    query_key,
    scan,
)
from service.runtime.observability.status import PipelineState

TOPIC = "orders"
RUNNING = PipelineState.RUNNING


@dataclass
class Pauses:
    restoring: set[TopicPartition] = field(default_factory=set)


@dataclass
class Part:
    """What a query reads of a partition task."""

    tp: TopicPartition
    operator: Any
    next_offset: int | None = None


@dataclass
class Session:
    partitions: dict[TopicPartition, Any] = field(default_factory=dict)
    pauses: Pauses = field(default_factory=Pauses)
    counts: dict[str, int] = field(default_factory=lambda: {TOPIC: 4})
    joined_group: bool = True


def holding(*partitions: int) -> Session:
    session = Session()
    for p in partitions:
        op = build_running_aggregate(
            "p", {"type": "aggregate", "aggregations": {"n": {"fn": "count"}}}, ManualClock()
        )
        keys = [f"k{i}" for i in range(40) if partition_for(f"k{i}".encode(), 4) == p]
        op.process_batch([(k, 5, {}, i, None) for i, k in enumerate(keys)])
        op.advance_watermark(3)
        tp = TopicPartition(TOPIC, p)
        session.partitions[tp] = Part(tp, op, next_offset=len(keys))
    return session


def test_a_key_is_answered_by_its_partition_with_what_it_is_as_of() -> None:
    key = "k1"
    p = partition_for(key.encode(), 4)
    answer = query_key(RUNNING, (TOPIC,), holding(p), key)  # type: ignore[arg-type]
    assert answer.kind == "aggregate"
    assert answer.state is not None and answer.state["result"] == {"n": 1}
    assert answer.as_of["partition"] == p and answer.as_of["watermark"] == 3
    assert answer.as_of["offset"] > 0 and answer.partitions == 4


def test_a_key_without_state_in_a_held_partition_is_none() -> None:
    p = partition_for(b"nobody", 4)
    answer = query_key(RUNNING, (TOPIC,), holding(p), "nobody")  # type: ignore[arg-type]
    assert answer.state is None and answer.as_of["partition"] == p


def test_a_partition_held_elsewhere_names_itself() -> None:
    p = partition_for(b"k1", 4)
    others = [q for q in range(4) if q != p]
    with pytest.raises(NotOwnedHere) as caught:
        query_key(RUNNING, (TOPIC,), holding(*others), "k1")  # type: ignore[arg-type]
    assert (caught.value.topic, caught.value.partition, caught.value.partitions) == (TOPIC, p, 4)


def test_a_partition_being_restored_is_unavailable() -> None:
    p = partition_for(b"k1", 4)
    session = holding()
    session.pauses.restoring.add(TopicPartition(TOPIC, p))
    with pytest.raises(StateUnavailable):
        query_key(RUNNING, (TOPIC,), session, "k1")  # type: ignore[arg-type]


def test_before_the_group_is_joined_the_state_is_unavailable() -> None:
    session = holding(0, 1, 2, 3)
    session.joined_group = False
    with pytest.raises(StateUnavailable):
        query_key(RUNNING, (TOPIC,), session, "k1")  # type: ignore[arg-type]
    with pytest.raises(StateUnavailable):
        query_key(RUNNING, (TOPIC,), None, "k1")


@pytest.mark.parametrize("state", [PipelineState.FINISHED, PipelineState.FAILED])
def test_a_finished_or_failed_pipeline_is_not_queryable(state: PipelineState) -> None:
    with pytest.raises(NotQueryable):
        query_key(state, (TOPIC,), holding(0, 1, 2, 3), "k1")  # type: ignore[arg-type]


def test_several_topics_read_unshuffled_are_not_queryable() -> None:
    with pytest.raises(NotQueryable):
        query_key(RUNNING, (TOPIC, "more"), holding(0), "k1")  # type: ignore[arg-type]


def test_an_operator_without_queries_is_not_queryable() -> None:
    p = partition_for(b"k1", 4)
    session = holding()
    tp = TopicPartition(TOPIC, p)
    session.partitions[tp] = Part(tp, object())
    with pytest.raises(NotQueryable):
        query_key(RUNNING, (TOPIC,), session, "k1")  # type: ignore[arg-type]


def test_a_scan_merges_the_partitions_held_by_key_up_to_the_limit() -> None:
    found = scan(RUNNING, (TOPIC,), holding(0, 2), None, None, 5)  # type: ignore[arg-type]
    expected = sorted(f"k{i}" for i in range(40) if partition_for(f"k{i}".encode(), 4) in (0, 2))[
        :5
    ]
    assert [key for key, _ in found.rows] == expected
    assert [a["partition"] for a in found.as_of] == [0, 2]
    assert (found.topic, found.partitions, found.kind) == (TOPIC, 4, "aggregate")
