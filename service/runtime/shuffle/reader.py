"""Stage 2's end of the shuffle: a shuffle partition's records back into input records.

Per record: a frame (``core/frames.py``) gives its rows in one decode, less those its
source applied before (a frame replayed whole or in part after a kill is applied once);
a marker updates the partition's :class:`~service.core.shuffle.ShuffleInput` (never
reaching the operator); a routed record of the layout before frames (one row per
record) is read as it was, so a shuffle topic written by the previous version drains.

Markers are applied in order with the records around them, which the partition task
does (:class:`ShuffleDecoder` only notes where each falls): a record before a marker is
processed before the watermark the marker raises is delivered. A frame's marks (a stage
1 with ``interval_ms: 0``) are markers at their rows; those before rows already applied
were applied with them, and one at the first fresh row may have been, which applying
again cannot change (a source's watermark only rises).

The input record's position (what keyed process functions build output ids from) is
``position << 16 | source``: unique per source record (and element), the same on every
replay and replica. Up to 65,536 source partitions.

The source an operator hands back in a late record or a failure is the frame's row (or
the routed record); :class:`RoutedOrigin` tells the sink the source record behind it
(topic, partition, offset, key, value, timestamp and the producer's headers, the
shuffle's own never among them), only on those paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import orjson
from aiokafka import TopicPartition

from service.core.frames import Frame, FrameError
from service.core.frames import decode as decode_frame
from service.core.shuffle import INDEX_BITS, ShuffleInput
from service.operators.base import InputRecord
from service.runtime.partition.decoding import REASON_DECODE, DeadLetter
from service.runtime.partition.sinks import Origin, fetched_origin
from service.runtime.shuffle.records import (
    FRAME,
    MARKER,
    ROUTED,
    ROUTED_SIZE,
    unpack_marker,
    unpack_routed,
)

Marker = tuple[int, int, int, bool, int]
"""``(index in the decoded inputs, source, watermark, idle, count)``."""

REASON_NOT_ROUTED = "not_routed"

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError


class ShuffleDecoder:
    """Decodes one shuffle partition's records; one per partition (it holds its state)."""

    __slots__ = ("_reported", "frame_rows", "frames", "input", "legacy_rows", "markers")

    def __init__(self, shuffle_input: ShuffleInput) -> None:
        self.input = shuffle_input
        self.markers: list[Marker] = []
        """Markers decoded and not applied yet, at their index in the inputs list."""
        self.frames = 0
        """Frames read since this decoder was made (status, metrics)."""
        self.frame_rows = 0
        """The rows those frames held, replays included."""
        self.legacy_rows = 0
        """Rows read in the previous version's layout, one per record, and applied: after
        an upgrade, what the topic still held of it (status: the drain's progress)."""
        self._reported = (0, 0)

    def take_frame_counts(self) -> tuple[int, int]:
        """Frames and their rows since the last call (the metrics' deltas)."""
        before = self._reported
        self._reported = (self.frames, self.frame_rows)
        return self.frames - before[0], self.frame_rows - before[1]

    def decode(
        self, records: Sequence[Any], inputs: list[InputRecord], failed: list[DeadLetter]
    ) -> None:
        fresh = self.input.fresh
        take_frame = self.input.take_frame
        append = inputs.append
        loads = _loads
        for record in records:
            headers = record.headers
            name, meta = headers[-1] if headers else ("", b"")
            if name == FRAME:
                try:
                    frame = decode_frame(record.value)
                except FrameError as exc:  # not written by stage 1
                    failed.append(DeadLetter(record, None, REASON_DECODE, str(exc)))
                    continue
                rows = len(frame)
                self.frames += 1
                self.frame_rows += rows
                start = frame.start_after(take_frame(frame.source, frame.last))
                if start:
                    self.input.replays += start
                if frame.marks:
                    self._frame_marks(frame, start, len(inputs))
                if start < rows:
                    inputs.extend(frame.records(start))
            elif name == ROUTED:
                timestamp, source, at = unpack_routed(meta)
                if not fresh(source, at):
                    continue
                raw = record.value
                try:
                    value = None if raw is None else loads(raw)  # None: a table's tombstone
                except (_JSONDecodeError, TypeError) as exc:  # not written by stage 1
                    failed.append(DeadLetter(record, None, REASON_DECODE, str(exc)))
                    continue
                key = meta[ROUTED_SIZE:].decode()
                append((key, timestamp, value, at << 16 | source, record))
                self.legacy_rows += 1
            elif name == MARKER:
                self.markers.append((len(inputs), *unpack_marker(meta)))
            else:
                failed.append(
                    DeadLetter(record, None, REASON_NOT_ROUTED, "not a record of the shuffle")
                )

    def _frame_marks(self, frame: Frame, start: int, at: int) -> None:
        """The marks of ``frame`` from row ``start`` on, as markers at their inputs (its
        fresh rows go from input ``at``)."""
        append = self.markers.append
        source, count = frame.source, frame.sources
        for index, watermark, idle in frame.marks:
            if index >= start:
                append((at + index - start, source, watermark, idle, count))

    def apply(self, through: int) -> bool:
        """Apply the pending markers that come before input ``through``; True if any."""
        markers = self.markers
        if not markers or markers[0][0] > through:
            return False
        marker = self.input.marker
        done = 0
        for index, source, watermark, idle, count in markers:
            if index > through:
                break
            marker(source, watermark, idle, count)
            done += 1
        del markers[:done]
        return True

    def apply_all(self) -> None:
        """Apply every pending marker (after the inputs were processed)."""
        marker = self.input.marker
        for _, source, watermark, idle, count in self.markers:
            marker(source, watermark, idle, count)
        self.markers.clear()


class RoutedOrigin:
    """A shuffle record's origin (:data:`~service.runtime.partition.sinks.OriginOf`):
    the source partition its header numbers, the offset of its position, and the
    headers stage 1 copied from the source record, the shuffle's own (always last) cut
    off. A record of the shuffle topic that stage 1 did not write is its own origin."""

    __slots__ = ("sources",)

    def __init__(self, sources: Sequence[TopicPartition]) -> None:
        self.sources = sources
        """Every source partition of the pipeline, by its number (``source_numbers``)."""

    def __call__(self, tp: TopicPartition, record: Any) -> Origin | None:
        if type(record) is tuple:  # a frame's row: (frame, index)
            frame, index = record
            assert isinstance(frame, Frame)
            row = frame.origin(index)
            topic, partition = self._where(tp, frame.source)
            return Origin(
                topic,
                partition,
                row.position >> INDEX_BITS,
                cast(Sequence[tuple[str, bytes]], row.headers),
                row.key,
                row.value,
                row.timestamp,
            )
        headers = record.headers
        if not headers or headers[-1][0] != ROUTED:
            return fetched_origin(tp, record)
        _, source, at = unpack_routed(headers[-1][1])
        own = tuple(headers[:-1])
        if source >= len(self.sources):  # a source partition added since this stage began
            return Origin(
                tp.topic,
                tp.partition,
                record.offset,
                own,
                record.key,
                record.value,
                record.timestamp,
            )
        where = self.sources[source]
        return Origin(
            where.topic,
            where.partition,
            at >> INDEX_BITS,
            own,
            record.key,
            record.value,
            record.timestamp,
        )

    def _where(self, tp: TopicPartition, source: int) -> tuple[str, int]:
        """The source partition numbered ``source``; the shuffle partition itself for
        one added since this stage began (its number unknown here)."""
        if source >= len(self.sources):
            return tp.topic, tp.partition
        where = self.sources[source]
        return where.topic, where.partition
