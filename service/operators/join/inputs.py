"""A join as the runtime's one-input operator: records tell their side by their source.

The keyed stage of a join reads one shuffle topic that both inputs were routed into
(semantics.md sections 8 and 10). A routed record's position is ``source position <<
16 | source partition number``, and the route stage numbers the source partitions of
both inputs, so the number says which input a record came from. :class:`SidedJoin`
splits each batch into runs of one side, in order, and hands them to the join's
``process_left`` and ``process_right``; everything else is the join's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from service.operators.base import Collector, InputRecord, OperatorGauges
from service.operators.join.rows import Side

SOURCE_MASK = 0xFFFF


class TwoInputOperator(Protocol):
    """What a join operator is (``interval``, ``window``, ``temporal``)."""

    collector: Collector
    inputs: tuple[str, str]

    @property
    def current_watermark(self) -> int: ...
    def process_left(self, records: Sequence[InputRecord]) -> None: ...
    def process_right(self, records: Sequence[InputRecord]) -> None: ...
    def advance_watermark(self, watermark: int) -> None: ...
    def advance_processing_time(self, now: int) -> None: ...
    def next_processing_time(self) -> int | None: ...
    def rows_held(self, side: Side) -> int: ...
    def gauges(self) -> OperatorGauges: ...
    def timer_counts(self) -> dict[str, tuple[int, int, int]]: ...
    def snapshot(self) -> dict[str, Any]: ...
    def restore(self, snapshot: dict[str, Any]) -> None: ...
    def snapshot_changes(self) -> dict[str, Any]: ...
    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None: ...


class SidedJoin:
    """A join fed through ``process_batch`` (see the module docstring)."""

    __slots__ = ("_sides", "collector", "join")

    def __init__(self, join: TwoInputOperator, sides: Sequence[Side]) -> None:
        self.join = join
        self.collector = join.collector
        self._sides = tuple(sides)
        """The side of each source partition number."""

    @property
    def current_watermark(self) -> int:
        return self.join.current_watermark

    def process_batch(self, records: Sequence[InputRecord]) -> None:
        sides = self._sides
        start = 0
        current = -1
        for index, record in enumerate(records):
            side = sides[record[3] & SOURCE_MASK]
            if side != current:
                if index > start:
                    self._feed(current, records[start:index])
                start, current = index, side
        if start < len(records):
            self._feed(current, records[start:])

    def sources_of(self, side: Side) -> list[int]:
        """The source partition numbers of one input."""
        return [source for source, of in enumerate(self._sides) if of == side]

    def _feed(self, side: int, records: Sequence[InputRecord]) -> None:
        if side == Side.LEFT:
            self.join.process_left(records)
        else:
            self.join.process_right(records)

    def advance_watermark(self, watermark: int) -> None:
        self.join.advance_watermark(watermark)

    def advance_processing_time(self, now: int) -> None:
        self.join.advance_processing_time(now)

    def next_processing_time(self) -> int | None:
        return self.join.next_processing_time()

    def rows_held(self, side: Side) -> int:
        return self.join.rows_held(side)

    def gauges(self) -> OperatorGauges:
        return self.join.gauges()

    def timer_counts(self) -> dict[str, tuple[int, int, int]]:
        return self.join.timer_counts()

    def snapshot(self) -> dict[str, Any]:
        return self.join.snapshot()

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.join.restore(snapshot)

    def snapshot_changes(self) -> dict[str, Any]:
        return self.join.snapshot_changes()

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        self.join.restore_changes(entries)
