"""A shuffle partition of stage 2: a partition task that applies markers in order.

The watermark a marker raises must be delivered after the records before it and before
the records after it (Flink's order of records and watermarks in a channel). With
periodic emission the partition's watermark is read only between batches, so applying a
batch's markers after processing the inputs before them is enough; with
``interval_ms = 0`` the fetch loop asks before every record (:meth:`markers_before`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.operators.base import InputRecord
from service.runtime.partition.decoding import DeadLetter
from service.runtime.partition.task import PartitionTask
from service.runtime.shuffle.reader import ShuffleDecoder

_NO_MARKER = 1 << 62


class ShuffledPartitionTask(PartitionTask):
    """:class:`PartitionTask` over a shuffle partition (its decoder is its own)."""

    __slots__ = ()

    def process(self, records: Sequence[Any], failed: list[DeadLetter]) -> int:
        """As a source partition's, counting a frame's rows as the records they were
        (``records_in`` says how many source records crossed, whatever the framing)."""
        decoder = self._decoder()
        frames, rows = decoder.frames, decoder.frame_rows
        total = super().process(records, failed)
        decoder.apply_all()  # the markers after the last input
        unframed = (decoder.frame_rows - rows) - (decoder.frames - frames)
        self.records_in += unframed
        return total + unframed

    def _process_slice(self, inputs: Sequence[InputRecord]) -> None:
        decoder = self._decoder()
        if not decoder.markers:
            super()._process_slice(inputs)
            return
        start = 0
        for index, source, watermark, idle, count in decoder.markers:
            if index > start:
                super()._process_slice(inputs[start:index])
                start = index
            decoder.input.marker(source, watermark, idle, count)
        decoder.markers.clear()
        if start < len(inputs):
            super()._process_slice(inputs[start:])

    def markers_before(self, index: int) -> bool:
        return self._decoder().apply(index)

    def next_marker(self) -> int:
        """The input index of the next marker not applied yet (the end of the decoded
        inputs is past any index: a large number when there is none)."""
        markers = self._decoder().markers
        return markers[0][0] if markers else _NO_MARKER

    def _decoder(self) -> ShuffleDecoder:
        decoder = self.decoder
        assert isinstance(decoder, ShuffleDecoder)
        return decoder
