"""Decoded input a partition processes before anything the consumer fetches for it, and
how much of it is taken at a time. Pure: no I/O.

Input waits for two reasons: the prefetcher read it during the group join
(:mod:`.prefetch`), or watermark alignment held it back (:mod:`service.core.alignment`).
Either way it is kept as :class:`Chunk`\\s, one per fetch of the partition, in offset
order, and the loop takes what it may of the first chunk each turn (:func:`cut`).

The rules of a cut:

- without alignment a chunk is taken whole;
- with alignment, the records the alignment admits, but never between two inputs of one
  source record (an unnest): a checkpoint would have the first in its state and replay
  it from that source offset;
- the partition's next offset after a cut is the offset of the first source record held
  back, or the chunk's end once it is taken whole;
- every source record of the chunk is counted once over its cuts: those behind the
  inputs taken, plus, with the first cut, those that gave no input (dead letters,
  filtered out).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from service.operators.base import InputRecord
from service.runtime.partition.decoding import DeadLetter


@dataclass(slots=True)
class Chunk:
    """Decoded records of one fetch of one partition: the offsets of its first record and
    after its last, and how many records it had (each is an input or a dead letter).

    A chunk can be taken in parts (watermark alignment holds back the rest):
    ``inputs[taken:]`` are still to process, and ``counted`` of ``count`` records are
    accounted for."""

    inputs: list[InputRecord]
    failed: list[DeadLetter]
    count: int
    first: int
    end: int
    taken: int = 0
    counted: int = 0


@dataclass(slots=True)
class PendingInput:
    """Decoded records of one assigned partition waiting to be processed before anything
    the consumer fetches for it (which stays paused meanwhile): prefetched during the
    join, from its resume offset on, or held back by watermark alignment."""

    chunks: deque[Chunk] = field(default_factory=deque)
    records: int = 0
    end: int = 0
    """Where the consumer resumes once every chunk is processed."""
    prefetched: bool = True
    """Read during the join (counted in the prefetch metric); else held by alignment."""

    @property
    def held(self) -> int:
        """Decoded records held back by watermark alignment (none if prefetched)."""
        if self.prefetched:
            return 0
        return sum(len(chunk.inputs) - chunk.taken for chunk in self.chunks)


class Cut(NamedTuple):
    """What the loop takes of a chunk now: ``inputs[chunk.taken:stop]``, which account
    for ``records`` source records, after which the partition resumes at ``next_offset``."""

    stop: int
    records: int
    next_offset: int


def cut(chunk: Chunk, admitted: int | None) -> Cut | None:
    """What may be taken of ``chunk`` now: ``admitted`` is how many of its inputs from
    ``chunk.taken`` on watermark alignment admits, at most what is left (None: no
    alignment, all of them).
    None: nothing (alignment holds back the first input still to take)."""
    inputs = chunk.inputs
    start = chunk.taken
    if admitted is None:
        stop = len(inputs)
    else:
        stop = start + admitted
        # never between two inputs of one source record (an unnest)
        while start < stop < len(inputs) and inputs[stop - 1][4] is inputs[stop][4]:
            stop -= 1
        if stop == start and start < len(inputs):
            return None
    if stop < len(inputs):
        records = sources(inputs, start, stop)
        next_offset = inputs[stop][4].offset  # the first source record held back
        if chunk.counted == 0:
            # this chunk's records that gave no input (dead letters, filtered out)
            records += chunk.count - sources(inputs, 0, len(inputs))
    else:
        records = chunk.count - chunk.counted
        next_offset = chunk.end
    return Cut(stop, records, next_offset)


def sources(inputs: Sequence[InputRecord], start: int, stop: int) -> int:
    """How many source records ``inputs[start:stop]`` came from (an unnest makes several
    inputs of one record; they are adjacent)."""
    count = 0
    previous = None
    for i in range(start, stop):
        source = inputs[i][4]
        if source is not previous:
            count += 1
            previous = source
    return count
