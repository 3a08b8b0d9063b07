"""Watermark alignment: pause partitions that run too far ahead (Flink's FLIP-182 idea).

During a backfill one partition can race ahead of the others; every window it opens
waits for the combined watermark (the slowest partition), so its state grows without
bound. With ``max_drift_ms = D``, a partition whose own watermark is more than ``D``
ahead of the combined watermark is paused at the consumer, and resumed once it is
within ``D`` again. This module only decides; the runtime pauses and resumes.

Invariants:
- the partition holding the combined watermark is never paused (its drift is <= 0), so
  the combined watermark can always move;
- idle partitions are left out of the minimum already (they hold no one back); and if
  every partition that is not paused is idle, nothing can catch up, so every paused
  partition is resumed (a paused partition produces no records and would otherwise
  turn idle itself and stall the pipeline);
- before the first combined watermark (MIN) nothing is paused: there is no reference.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from typing import Generic, TypeVar

from service.core.errors import ConfigError
from service.core.time import MIN_TIMESTAMP

P = TypeVar("P", bound=Hashable)


class WatermarkAlignment(Generic[P]):
    """Decides which partitions to pause and resume so none drifts more than ``max_drift_ms``."""

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

    def drift(self, watermark: int, combined: int) -> int:
        """How far a partition's watermark is ahead of the combined one (0 if behind)."""
        if combined == MIN_TIMESTAMP or watermark <= combined:
            return 0
        return watermark - combined

    def decide(
        self, watermarks: Mapping[P, int], combined: int, idle: Collection[P]
    ) -> tuple[list[P], list[P]]:
        """``(to_pause, to_resume)`` given each partition's watermark and the combined one.

        ``watermarks`` holds every assigned partition; a paused partition no longer in it
        (revoked) is forgotten without a resume.
        """
        self._paused &= watermarks.keys()
        limit = self.max_drift_ms
        wanted = {p for p, w in watermarks.items() if self.drift(w, combined) > limit}
        if wanted and all(p in idle for p in watermarks if p not in wanted):
            wanted = set()  # nothing left running could catch up: pause no one
        to_pause = [p for p in watermarks if p in wanted and p not in self._paused]
        to_resume = [p for p in watermarks if p in self._paused and p not in wanted]
        self._paused = wanted
        self.pauses += len(to_pause)
        self.resumes += len(to_resume)
        return to_pause, to_resume

    def forget(self, partition: P) -> None:
        """``partition`` was revoked: it is no longer paused by us."""
        self._paused.discard(partition)
