"""Which assigned partitions the consumer fetches: every reason to pause, in one place.

A partition can be held back for four independent reasons: the user paused the whole
pipeline, its state is still being restored, bounded input reached its end offset, or
watermark alignment (issue 10) found it too far ahead. Each reason is owned by a
different part of the runner and changes at a different time (a REST call, a
rebalance, a fetch, a watermark tick), so none of them may call ``consumer.resume()``
on its own: a resume for one reason would undo a pause for another (a user-paused
pipeline resumed by alignment; an alignment-paused partition resumed by the user).
Instead each reason updates its set here and :meth:`PauseControl.apply` makes the
consumer's paused set equal to the union.

The consumer forgets pauses on a rebalance (a newly assigned partition starts
fetchable), so :meth:`apply` compares with what the consumer reports as paused, not
with what was last asked of it.
"""

from __future__ import annotations

from typing import Any

from aiokafka import TopicPartition


class PauseControl:
    """The desired paused set of one consumer, and its application."""

    __slots__ = ("aligned", "consumer", "draining", "finished", "restoring", "user_paused")

    def __init__(self, user_paused: bool = False) -> None:
        self.consumer: Any = None
        self.user_paused = user_paused
        """The pipeline was paused over the API: every assigned partition is paused."""
        self.restoring: set[TopicPartition] = set()
        """Assigned, state not restored yet: records fetched now would be skipped."""
        self.finished: set[TopicPartition] = set()
        """Bounded mode: reached the end offset captured at start."""
        self.aligned: set[TopicPartition] = set()
        """Paused by watermark alignment: too far ahead of the combined watermark."""
        self.draining: set[TopicPartition] = set()
        """Records prefetched during the join are processed first (see prefetch.py)."""

    def wanted(self, assignment: set[TopicPartition]) -> set[TopicPartition]:
        """The partitions of ``assignment`` that must not be fetched now."""
        if self.user_paused:
            return set(assignment)
        return (self.restoring | self.finished | self.aligned | self.draining) & assignment

    def apply(self) -> None:
        """Pause and resume at the consumer so its paused set is :meth:`wanted`.

        Synchronous and cheap (set operations over the assignment): called after every
        change and once per fetch loop, never per record.
        """
        consumer = self.consumer
        if consumer is None:
            return
        assignment = set(consumer.assignment())
        want = self.wanted(assignment)
        current = set(consumer.paused()) & assignment
        to_pause = want - current
        to_resume = current - want
        if to_pause:
            consumer.pause(*to_pause)
        if to_resume:
            consumer.resume(*to_resume)

    def forget(self, tp: TopicPartition) -> None:
        """``tp`` was revoked: no reason of ours holds it any more."""
        self.restoring.discard(tp)
        self.finished.discard(tp)
        self.aligned.discard(tp)
        self.draining.discard(tp)
