"""Which prefetched records a restored partition takes: the range rule of prefetch.py."""

from __future__ import annotations

from typing import Any, NamedTuple

from aiokafka import TopicPartition

from service.runtime.consumer_group.pending_input import Chunk
from service.runtime.consumer_group.prefetch import Prefetcher
from service.runtime.partition.decoding import DeadLetter

TP = TopicPartition("in", 0)


class Source(NamedTuple):
    offset: int


def chunk(first: int, end: int, bad: frozenset[int] = frozenset()) -> Chunk:
    """Records at offsets ``first`` to ``end - 1``; those in ``bad`` failed to decode."""
    inputs: list[Any] = [
        ("k", 1_000 + o, {"o": o}, o, Source(o)) for o in range(first, end) if o not in bad
    ]
    failed = [DeadLetter(Source(o), None, "decode_error", "x") for o in sorted(bad)]
    return Chunk(inputs, failed, end - first, first, end)


def prefetcher(start: int, *chunks: Chunk) -> Prefetcher:
    p = Prefetcher.__new__(Prefetcher)
    p._read = {TP: (start, list(chunks))}
    return p


def offsets(pending: Any) -> list[int]:
    return [r[3] for c in pending.chunks for r in c.inputs] + [
        d.source.offset for c in pending.chunks for d in c.failed
    ]


def test_resuming_where_the_prefetch_started_takes_everything() -> None:
    pending = prefetcher(10, chunk(10, 20), chunk(20, 25)).take(TP, 10)
    assert pending is not None
    assert (pending.records, pending.end, len(pending.chunks)) == (15, 25, 2)
    assert offsets(pending) == list(range(10, 25))


def test_resuming_inside_the_range_takes_the_records_from_there_on() -> None:
    pending = prefetcher(10, chunk(10, 20, bad=frozenset({12, 17})), chunk(20, 25)).take(TP, 15)
    assert pending is not None
    assert offsets(pending) == [15, 16, 18, 19, 20, 21, 22, 23, 24, 17]
    first = pending.chunks[0]
    assert (first.first, first.count, first.end) == (15, 5, 20)
    assert pending.records == 10 and pending.end == 25


def test_a_resume_in_a_gap_before_the_first_record_takes_everything_read() -> None:
    # offsets 10-11 do not exist (compacted): the read from 10 began at 12
    pending = prefetcher(10, chunk(12, 20)).take(TP, 11)
    assert pending is not None and offsets(pending) == list(range(12, 20))


def test_a_resume_before_the_range_or_at_or_after_its_end_takes_nothing() -> None:
    for resume in (9, 20, 21):
        assert prefetcher(10, chunk(10, 20)).take(TP, resume) is None, resume


def test_a_partition_is_taken_once_and_others_are_never_taken() -> None:
    p = prefetcher(0, chunk(0, 5))
    assert p.take(TopicPartition("in", 1), 0) is None
    assert p.take(TP, 0) is not None
    assert p.take(TP, 0) is None


def test_bounded_input_takes_nothing_at_or_after_its_end() -> None:
    pending = prefetcher(10, chunk(10, 20, bad=frozenset({18})), chunk(20, 25)).take(TP, 12, 19)
    assert pending is not None
    assert offsets(pending) == [*range(12, 18), 18]  # 18 is a dead letter, before the end
    assert (pending.records, pending.end, len(pending.chunks)) == (7, 19, 1)
    assert prefetcher(10, chunk(10, 20)).take(TP, 12, 12) is None
