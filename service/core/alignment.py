"""Watermark alignment: no partition runs more than ``max_drift_ms`` ahead (FLIP-182's idea).

During a backfill one partition can race ahead of the others; every window it opens
waits for the combined watermark (the slowest partition), so state grows without bound.
With ``max_drift_ms = D`` a partition takes a record only while its watermark *before*
that record is at most ``D`` ahead of the minimum over the other counted partitions
(neither idle nor finished). Since the combined watermark is the minimum over all of
them, this is the bound: **no record of an aligned partition is processed while that
partition is more than D ahead of the combined watermark**, so after it the partition is
at most ``D`` plus that one record's own step ahead. Records it may not take yet are
held back by the runtime (in memory, with the partition paused at the consumer) and
taken as the others catch up; results are those of an unaligned run.

Why "before" and not "after" each record: a record can move its partition's watermark
by more than ``D`` on its own (a gap in the data). Checking the watermark after it would
hold that record forever once every partition's next record is such a jump (a
deadlock); checking before lets the partition holding the minimum always take its next
record, so the combined watermark always moves.

No reference, no limit: a partition with no other counted partition takes everything.
Before the first record of some counted partition (its watermark ``MIN``), the others
take only their first record each (a watermark of their own), then wait.

This module decides; the runtime holds, pauses and resumes.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import Generic, TypeVar

from service.core.errors import ConfigError
from service.core.time import MAX_TIMESTAMP
from service.core.watermarks import Stamped, WatermarkGenerator

P = TypeVar("P", bound=Hashable)


class WatermarkAlignment(Generic[P]):
    """Decides what each partition may take, and which partitions to pause."""

    __slots__ = ("_paused", "max_drift_ms", "pauses", "resumes")

    def __init__(self, max_drift_ms: int) -> None:
        if type(max_drift_ms) is not int or max_drift_ms < 0:
            raise ConfigError(f"max_drift_ms must be an int >= 0, not {max_drift_ms!r}")
        self.max_drift_ms = max_drift_ms
        self._paused: set[P] = set()
        self.pauses = 0
        """How many times a partition was paused (for metrics)."""
        self.resumes = 0
        """How many times a partition was resumed (for metrics)."""

    @property
    def paused(self) -> frozenset[P]:
        """The partitions paused for alignment now."""
        return frozenset(self._paused)

    def limit(self, others: int | None) -> int | None:
        """The highest watermark a partition may have *before* a record it takes, given
        the minimum over the other counted partitions (None: no limit)."""
        if others is None:
            return None
        return min(others + self.max_drift_ms, MAX_TIMESTAMP)

    def admit(
        self,
        generator: WatermarkGenerator,
        records: Sequence[Stamped],
        start: int,
        others: int | None,
    ) -> int:
        """How many of ``records[start:]`` the partition of ``generator`` may take now,
        given ``others``, the minimum over the other counted partitions (a prefix: the
        rest waits)."""
        limit = self.limit(others)
        if limit is None:
            return len(records) - start
        return generator.admit(records, start, limit)

    def decide(
        self,
        watermarks: Mapping[P, int],
        others: Mapping[P, int | None],
        holding: Collection[P],
    ) -> tuple[list[P], list[P]]:
        """``(to_pause, to_resume)``: a partition is paused while it holds records back
        or its watermark is above its :meth:`limit` (it could take nothing fetched).

        ``watermarks`` holds every assigned partition, ``others`` each one's minimum over
        the other counted partitions; a paused partition no longer assigned (revoked) is
        forgotten without a resume.
        """
        self._paused &= watermarks.keys()
        wanted: set[P] = set()
        for partition, watermark in watermarks.items():
            if partition in holding:
                wanted.add(partition)
                continue
            limit = self.limit(others.get(partition))
            if limit is not None and watermark > limit:
                wanted.add(partition)
        to_pause = [p for p in watermarks if p in wanted and p not in self._paused]
        to_resume = [p for p in watermarks if p in self._paused and p not in wanted]
        self._paused = wanted
        self.pauses += len(to_pause)
        self.resumes += len(to_resume)
        return to_pause, to_resume

    def forget(self, partition: P) -> None:
        """``partition`` was revoked: it is no longer paused by us."""
        self._paused.discard(partition)
