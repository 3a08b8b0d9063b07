"""What every join operator is, whatever its kind: the settings all kinds take, the two
inputs' entry points, the join's watermark, late rows and its checkpoint plumbing
(:class:`~service.operators.join.checkpoint.CheckpointedJoin`).

A kind implements :meth:`JoinOperator._process` (one input's records), its watermark
advance, its numbers and the checkpoint hooks; the rest is here once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.core.time import MIN_TIMESTAMP
from service.operators.base import Collector, InputRecord, OperatorGauges
from service.operators.join.checkpoint import CheckpointedJoin
from service.operators.join.projection import RowEmitter
from service.operators.join.rows import How, JoinConfigError, Projection, Side, send_late

_NO_COUNTS: dict[str, tuple[int, int, int]] = {}


class JoinOperator(CheckpointedJoin):
    """One partition's join of two inputs (Flink's ``TwoInputStreamOperator``)."""

    kind = ""
    """``interval``, ``window``, ``temporal`` or ``lookup``: the output rows' ``kind``."""

    def __init__(
        self,
        pipeline: str,
        how: How,
        allowed_lateness_ms: int,
        project: Projection,
        inputs: tuple[str, str],
        late_output: bool,
    ) -> None:
        if allowed_lateness_ms < 0:
            raise JoinConfigError("allowed_lateness_ms must not be negative")
        self._pipeline = pipeline
        self.how = how
        self.lateness = allowed_lateness_ms
        self._project = project
        self.inputs = inputs
        self.late_output = late_output
        self._dirty: set[Any] = set()
        self._watermark = MIN_TIMESTAMP
        self.collector = Collector()
        self._emit = RowEmitter(self.collector, project, pipeline, self.kind).emit

    # -- input ----------------------------------------------------------------------------
    def process_left(self, records: Sequence[InputRecord]) -> None:
        self._process(Side.LEFT, records)

    def process_right(self, records: Sequence[InputRecord]) -> None:
        self._process(Side.RIGHT, records)

    def process_batch(self, records: Sequence[InputRecord]) -> None:
        raise TypeError("a join takes its inputs through process_left and process_right")

    def _process(self, side: Side, records: Sequence[InputRecord]) -> None:
        """One run of ``side``'s records, in order."""
        raise NotImplementedError

    def _late(self, side: Side, key: str, ts: int, source: Any) -> None:
        """A late row of ``side``: to the late output naming its input, or dropped."""
        send_late(
            self.collector, self.late_output, source, key, ts, self._watermark, self.inputs[side]
        )

    # -- time -----------------------------------------------------------------------------
    @property
    def current_watermark(self) -> int:
        return self._watermark

    def advance_watermark(self, watermark: int) -> None:
        raise NotImplementedError

    def advance_processing_time(self, now: int) -> None:
        return None

    def next_processing_time(self) -> int | None:
        return None

    # -- numbers --------------------------------------------------------------------------
    def rows_held(self, side: Side) -> int:
        raise NotImplementedError

    def gauges(self) -> OperatorGauges:
        raise NotImplementedError

    def timer_counts(self) -> dict[str, tuple[int, int, int]]:
        return _NO_COUNTS
