"""Pull queries against the pipelines this process runs (docs/pull-queries.md).

A key's state lives in one partition of the pipeline's keyed stage (the last: after a
shuffle, the shuffle partition): the partition Kafka's default partitioner gives the key
among the stage's input topic's partitions (``core/partitioner.py``, what the shuffle
writes by and what ``key.partitioned`` promises). The answer is read from that
partition's operator (:class:`~service.operators.query.Queryable`) by a synchronous call
on the event loop, so it never sees half a batch: a batch is processed without an
``await`` in between, and the partition's ``next_offset`` and delivered watermark, the
answer's ``as_of``, move with it.

What this module cannot answer it says by raising: :class:`NotQueryable` (the pipeline
keeps no state a query may read: 409), :class:`StateUnavailable` (starting, restoring,
a rebalance: 503 with ``Retry-After``), :class:`NotOwnedHere` (another member holds the
partition: the API routes the query there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import TopicPartition

from service.core.partitioner import partition_for
from service.core.time import MIN_TIMESTAMP
from service.operators.query import Queryable
from service.runtime.observability.status import PipelineState
from service.runtime.partition.task import PartitionTask

__all__ = [
    "KeyAnswer",
    "NotOwnedHere",
    "NotQueryable",
    "QuerySession",
    "ScanAnswer",
    "StateUnavailable",
    "query_key",
    "scan",
]

RETRY_AFTER_S = 1
"""What a 503's ``Retry-After`` says: a restore or a rebalance is a matter of seconds."""


class NotQueryable(Exception):
    """The pipeline keeps no state a pull query can read (a join, a stateless map, a
    finished bounded pipeline), reads several topics unshuffled, or is not running (it
    failed, or is stopping)."""


class StateUnavailable(Exception):
    """The state cannot be read now, but will be: ``reason`` says why."""

    def __init__(self, reason: str, retry_after_s: int = RETRY_AFTER_S) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


class NotOwnedHere(Exception):
    """The key's partition is not held by this process."""

    def __init__(self, topic: str, partition: int, partitions: int) -> None:
        super().__init__(f"{topic}/{partition} is not held here")
        self.topic = topic
        self.partition = partition
        self.partitions = partitions


class QueryPauses(Protocol):
    @property
    def restoring(self) -> set[TopicPartition]: ...


class QuerySession(Protocol):
    """What a query reads of the keyed stage's session."""

    @property
    def partitions(self) -> Mapping[TopicPartition, PartitionTask]: ...
    @property
    def pauses(self) -> QueryPauses: ...
    @property
    def counts(self) -> Mapping[str, int]: ...
    @property
    def joined_group(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class KeyAnswer:
    kind: str
    """The operator's :attr:`Queryable.query_kind`."""
    state: dict[str, Any] | None
    """None: the partition holds nothing of the key."""
    as_of: dict[str, Any]
    partitions: int
    """How many partitions the stage's topic has (the key's is ``as_of["partition"]``)."""


@dataclass(frozen=True, slots=True)
class ScanAnswer:
    kind: str | None
    """None when this process holds no partition of the stage."""
    rows: list[tuple[str, dict[str, Any]]]
    """Up to the limit, by key, over every partition held here."""
    as_of: list[dict[str, Any]]
    """One per partition held here, by partition."""
    topic: str
    partitions: int
    """How many partitions the stage's topic has (a scan of the whole pipeline needs an
    answer for each)."""


def as_of(part: PartitionTask) -> dict[str, Any]:
    watermark = part.operator.current_watermark
    return {
        "topic": part.tp.topic,
        "partition": part.tp.partition,
        "offset": part.next_offset,
        "watermark": None if watermark == MIN_TIMESTAMP else watermark,
    }


def _usable(
    state: PipelineState, topics: tuple[str, ...], session: QuerySession | None
) -> tuple[QuerySession, str, int]:
    if state is PipelineState.FINISHED:
        raise NotQueryable(
            "the pipeline finished: its bounded input is processed and its state let go"
        )
    if state in (PipelineState.FAILED, PipelineState.STOPPED):
        # not a moment's wait: its status says why, and it holds no state until it runs
        raise NotQueryable(f"the pipeline is {state.value} here (its status says why)")
    if len(topics) != 1:
        raise NotQueryable(
            f"the pipeline's keyed state is spread over {len(topics)} topics read unshuffled"
        )
    if session is None or not session.joined_group or topics[0] not in session.counts:
        raise StateUnavailable("the pipeline is starting here")
    return session, topics[0], session.counts[topics[0]]


def _operator(part: PartitionTask) -> Queryable:
    operator = part.operator
    if not isinstance(operator, Queryable):
        raise NotQueryable("the pipeline's operator keeps no state a query can read")
    return operator


def query_key(
    state: PipelineState, topics: tuple[str, ...], session: QuerySession | None, key: str
) -> KeyAnswer:
    """The state of ``key`` in the partition that owns it, if this process holds it;
    ``state``: the pipeline's, ``topics`` and ``session``: its keyed stage's."""
    session, topic, count = _usable(state, topics, session)
    tp = TopicPartition(topic, partition_for(key.encode(), count))
    if tp in session.pauses.restoring:
        raise StateUnavailable(f"partition {tp.partition} is being restored here")
    part = session.partitions.get(tp)
    if part is None:
        raise NotOwnedHere(topic, tp.partition, count)
    operator = _operator(part)
    return KeyAnswer(operator.query_kind, operator.query_key(key), as_of(part), count)


def scan(
    state: PipelineState,
    topics: tuple[str, ...],
    session: QuerySession | None,
    from_key: str | None,
    to_key: str | None,
    limit: int,
) -> ScanAnswer:
    """Up to ``limit`` keys in ``[from_key, to_key)`` over the partitions held here."""
    session, topic, count = _usable(state, topics, session)
    if any(tp.topic == topic for tp in session.pauses.restoring):
        raise StateUnavailable("a partition is being restored here")
    parts = sorted(
        (part for tp, part in session.partitions.items() if tp.topic == topic),
        key=lambda part: part.tp.partition,
    )
    kind: str | None = None
    rows: list[tuple[str, dict[str, Any]]] = []
    for part in parts:
        operator = _operator(part)
        kind = operator.query_kind
        rows.extend(operator.scan(from_key, to_key, limit))
    rows.sort(key=lambda row: row[0])
    return ScanAnswer(kind, rows[:limit], [as_of(part) for part in parts], topic, count)
