"""Bounded input's arithmetic: where a partition's reading ends, when it is finished,
and when the whole pipeline is. Pure: offsets in, decisions out; the fetch loop
(:meth:`~service.runtime.consumer_group.fetch_loop.FetchLoop.bounded_step`) asks the
consumer and acts on them.

- A source partition is finished once its next offset reaches its end offset. Offsets
  can have gaps (compaction, transaction markers), so a partition short of its end that
  fetched nothing asks the consumer for its position instead of waiting for a record
  that will never come.
- Offsets without a record move a partition's next offset forward to the consumer's
  position, but never past its end.
- The pipeline is finished when every partition of it is: the ones this replica holds
  by their own account, the others by the offset committed in the group. A partition
  finished here whose commit is behind (the finishing checkpoint's commit was skipped in
  a rebalance) is committed again. A shuffle partition finished here ends at the topic's
  end: what follows its last marker changes nothing.
"""

from __future__ import annotations

from typing import NamedTuple


def readable_end(reported: int | None) -> int | None:
    """A partition's readable end as the consumer reports it (its high watermark, or
    read_committed its last stable offset); None while it is not known (negative)."""
    if reported is None or reported < 0:
        return None
    return reported


def past_gap(next_offset: int, position: int, end: int | None) -> int:
    """A partition's next offset once the consumer's ``position`` is past offsets with no
    record (no further than ``end``, bounded input's; never back)."""
    if end is not None and position > end:
        position = end
    return position if position > next_offset else next_offset


def must_ask_position(next_offset: int | None, end: int, fetched: bool) -> bool:
    """Whether a source partition short of its ``end`` must ask the consumer where it is:
    it fetched nothing this turn, so a gap may lie between it and its end."""
    return (next_offset is None or next_offset < end) and not fetched


def reached(position: int | None, end: int) -> bool:
    """Whether a source partition at ``position`` has read everything up to ``end``."""
    return position is not None and position >= end


class Held(NamedTuple):
    """What this replica knows of a partition it holds."""

    end_offset: int | None
    finished: bool
    next_offset: int | None


class EndCheck(NamedTuple):
    """One partition's part in whether the pipeline is finished."""

    done: bool
    """Finished: here, or by the group's committed offset."""
    next_offset: int | None
    """The held partition's next offset after the check (None: not held here)."""
    recommit: int | None
    """Finished here but the group's offset is behind: commit this offset again."""


def check_end(probed: int, held: Held | None, committed: int | None, *, source: bool) -> EndCheck:
    """Whether one partition of the pipeline is finished: ``probed`` is where it ends
    as read at the start (for a shuffle partition: the topic's end now), ``held`` what
    this replica knows of it if it holds it, ``committed`` the group's offset;
    ``source``: a source partition (else a shuffle partition)."""
    if held is None:
        return EndCheck(committed is not None and committed >= probed, None, None)
    end = held.end_offset if held.end_offset is not None else probed
    next_offset = held.next_offset
    if not held.finished:
        return EndCheck(committed is not None and committed >= end, next_offset, None)
    if not source and (next_offset or 0) < end:
        # A shuffle partition ends where its markers said so: what follows (its last
        # transaction's marker, a replay) changes nothing, and the other replicas see
        # it finished by a commit at the topic's end.
        next_offset = end
    recommit = next_offset or end if committed is None or committed < end else None
    return EndCheck(True, next_offset, recommit)
