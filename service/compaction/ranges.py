"""Offset ranges: what one run reads from each topic-partition (pure, no I/O)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from service.compaction.errors import DataLossError

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
"""``(topic, partition)``."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``start`` (inclusive) to ``end`` (exclusive) of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass(frozen=True, slots=True)
class Watermarks:
    """The low (first kept) and high (next to be written) offsets of a partition."""

    low: int
    high: int


def plan_ranges(
    stored: Mapping[TopicPartition, int],
    watermarks: Mapping[TopicPartition, Watermarks],
    *,
    fail_on_data_loss: bool = True,
) -> list[OffsetRange]:
    """One range per partition in ``watermarks``: from the stored offset (or the low
    watermark when nothing is stored) to the high watermark. Sorted by topic and partition.

    A stored offset below the low watermark means retention deleted records this job never
    read: :class:`DataLossError` unless ``fail_on_data_loss`` is false (then it starts at the
    low watermark and logs a warning). A stored offset above the high watermark (the topic
    was recreated) restarts that partition from its low watermark, with a warning.
    """
    ranges = []
    for tp in sorted(watermarks):
        marks = watermarks[tp]
        start = stored.get(tp, marks.low)
        if start < marks.low:
            message = (
                f"{tp[0]}[{tp[1]}]: stored offset {start} is below the first kept offset "
                f"{marks.low}; {marks.low - start} records were deleted before they were read"
            )
            if fail_on_data_loss:
                raise DataLossError(message)
            logger.warning("%s; starting at %s", message, marks.low)
            start = marks.low
        elif start > marks.high:
            logger.warning(
                "%s[%s]: stored offset %s is past the end %s (topic recreated?); "
                "reading it again from %s",
                tp[0],
                tp[1],
                start,
                marks.high,
                marks.low,
            )
            start = marks.low
        ranges.append(OffsetRange(tp[0], tp[1], start, marks.high))
    return ranges


def split_ranges(ranges: Iterable[OffsetRange], max_records: int) -> list[OffsetRange]:
    """Cut every non-empty range into pieces of at most ``max_records`` offsets; empty
    ranges are dropped. The pieces cover exactly the same offsets."""
    if max_records < 1:
        raise ValueError(f"max_records must be at least 1, not {max_records}")
    pieces = []
    for r in ranges:
        for start in range(r.start, r.end, max_records):
            pieces.append(OffsetRange(r.topic, r.partition, start, min(r.end, start + max_records)))
    return pieces


def end_offsets(ranges: Iterable[OffsetRange]) -> dict[TopicPartition, int]:
    """The offset each partition is read up to: what the next run starts from."""
    return {(r.topic, r.partition): r.end for r in ranges}
