"""Stage 1's end of the shuffle: a source partition's records to their keys' partitions.

:class:`ShuffleWriter` stands where a keyed operator stands in an unshuffled pipeline
(the partition task hands it decoded batches, the combiner delivers it watermarks, the
checkpointer snapshots it), so routing reuses the whole partition machinery: a stage-1
checkpoint waits for the routed records' acknowledgements before writing the changelog
and committing the source offset, which is what makes "nothing lost" hold.

Frames: the rows of one processed batch are grouped by target shuffle partition and
written as frames (``core/frames.py``), one Kafka record per partition and batch (more
when a frame would pass ``shuffle_frame_max_bytes``). A batch is what the fetch loop
hands over at once, so frames are as large as the input rate makes them and never wait:
at a low rate a frame holds the few rows that came, and leaves with them.

Markers: :meth:`ShuffleWriter.announce` writes the partition's ``(watermark, idle)`` to
every shuffle partition when it changed since the last announcement; the route stage
calls it after each watermark emission. A partition announced idle that gets records
announces itself active before them, and one whose bounded input ended announces ``MAX``
when the combiner delivers it ``MAX``. Markers go through the same batches as the
records, after them, so in each shuffle partition a marker follows every record of its
source that it covers.

Held routing (``interval_ms: 0``, where the watermark is recomputed after every
record): the fetch loop hands the writer one record at a time between :meth:`hold` and
:meth:`release`. Meanwhile rows wait per target and each announcement becomes a *mark*
of every target (the newest watermark before the target's next row); the release writes
each target one frame per batch with its marks inside (``core/frames.py``, version 2),
and a plain marker to a target that got marks but no rows. Each shuffle partition thus
sees the same order of rows and watermarks as with a frame and a marker per record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from service.core.frames import FrameMark, FrameRow, encode
from service.core.partitioner import KeyPartitioner
from service.core.shuffle import INDEX_BITS
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from service.operators.base import Collector, InputRecord, OperatorGauges
from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.partition.sinks import dumps
from service.runtime.shuffle.records import FRAME, MARKER, pack_marker

_NO_COUNTS: dict[str, tuple[int, int, int]] = {}
_FRAME_HEADERS: list[tuple[str, bytes]] = [(FRAME, b"")]  # shared, never mutated


class ShuffleWriter:
    """Routes one source partition's records into the shuffle topic (see the module)."""

    __slots__ = (
        "_announced",
        "_held",
        "_marks",
        "_max_bytes",
        "_outputs",
        "_partitioner",
        "_positioned",
        "_reencode",
        "_watermark",
        "collector",
        "count",
        "frames",
        "routed",
        "source",
        "topic",
    )

    def __init__(
        self,
        outputs: Callable[[], BatchProducer],
        topic: str,
        partitioner: KeyPartitioner,
        source: int,
        count: int,
        reencode: bool = False,
        positioned: bool = False,
        max_frame_bytes: int = 512 * 1024,
    ) -> None:
        self._outputs = outputs
        """Where routed records and markers go now, asked once per batch: with
        exactly-once each transactional producer of the partition has batches of its
        own, and a partition kept in memory across a rebalance gets a new producer (the
        old one's batches are closed: whatever went there would be lost)."""
        self.topic = topic
        self._partitioner = partitioner
        self.source = source
        """This source partition's number among all of the pipeline's."""
        self.count = count
        """How many source partitions the pipeline has."""
        self._reencode = reencode
        """Write the decoded value (steps changed it), not the source record's bytes."""
        self._positioned = positioned
        """Input positions are already ``position(offset, index)`` (steps with an unnest)."""
        self._watermark = MIN_TIMESTAMP
        self._announced: tuple[int, bool] | None = None
        self.collector = Collector()
        self._max_bytes = max_frame_bytes
        self.routed = 0
        """Records routed since this writer was made (status)."""
        self.frames = 0
        """Frames written since this writer was made (status)."""
        self._held: list[list[FrameRow]] | None = None
        """Between :meth:`hold` and :meth:`release`: each target's rows, unwritten."""
        self._marks: list[list[FrameMark]] = []
        """Meanwhile, each target's marks, by index in its held rows."""

    # -- routing --------------------------------------------------------------------------
    def process_batch(self, records: Sequence[InputRecord]) -> None:
        announced = self._announced
        if announced is not None and announced[1]:  # idle until now: active first
            self._mark(announced[0], False)
        partitioner = self._partitioner
        known = partitioner.known  # the recent keys' partitions, read inline
        reencode = self._reencode
        # an unnest's records already carry position(offset, index); the others their offset
        shift = 0 if self._positioned else INDEX_BITS
        buckets: list[list[FrameRow]] = [[] for _ in range(partitioner.partitions)]
        for key, timestamp, value, at, record in records:
            target = known.get(key)
            if target is None:
                target = partitioner(key)
            buckets[target].append(
                (
                    key,
                    timestamp,
                    at << shift,
                    value if reencode else record.value,
                    record.key,
                    record.timestamp,
                    record.headers or (),
                )
            )
        self.routed += len(records)
        self._write(buckets)

    def _write(self, buckets: list[list[FrameRow]]) -> None:
        """Each target partition's rows (``buckets[target]``) as frames: the values as
        the source wrote them (the JSON stage 1 decoded), or written again where steps
        or a format changed them. ``encode`` gives no frame for no rows."""
        held = self._held
        if held is not None:
            for target, rows in enumerate(buckets):
                if rows:
                    held[target].extend(rows)
            return
        append = self._outputs().append
        topic = self.topic
        source = self.source
        max_bytes = self._max_bytes
        encoded = not self._reencode
        for target, pending in enumerate(buckets):
            for frame in encode(pending, source, max_bytes, encoded=encoded, dumps=dumps):
                append(topic, target, None, frame, None, _FRAME_HEADERS)
                self.frames += 1

    # -- markers --------------------------------------------------------------------------
    def announce(self, watermark: int, idle: bool) -> bool:
        """Tell every shuffle partition this partition's watermark and idleness, if
        either changed since the last time; True if it did."""
        if self._announced == (watermark, idle):
            return False
        self._mark(watermark, idle)
        return True

    def _mark(self, watermark: int, idle: bool) -> None:
        self._announced = (watermark, idle)
        held = self._held
        if held is not None:  # a mark of every target, before its next row
            for rows, marks in zip(held, self._marks, strict=True):
                index = len(rows)
                if marks and marks[-1][0] == index:
                    marks[-1] = (index, watermark, idle)  # only the newest counts
                else:
                    marks.append((index, watermark, idle))
            return
        self._markers(range(self._partitioner.partitions), watermark, idle)

    def _markers(self, targets: Iterable[int], watermark: int, idle: bool) -> None:
        headers = [(MARKER, pack_marker(self.source, watermark, idle, self.count))]
        append = self._outputs().append
        for partition in targets:
            append(self.topic, partition, None, b"", None, headers)

    # -- held routing ---------------------------------------------------------------------
    def hold(self) -> None:
        """Keep rows and announcements until :meth:`release` (the module docstring)."""
        partitions = self._partitioner.partitions
        self._held = [[] for _ in range(partitions)]
        self._marks = [[] for _ in range(partitions)]

    def release(self) -> None:
        """Write what was held: per target, its rows as frames with their marks inside,
        or its newest mark as a marker when it got no rows."""
        held, marks = self._held, self._marks
        if held is None:
            return
        self._held = None
        self._marks = []
        append = self._outputs().append
        topic = self.topic
        source = self.source
        count = self.count
        encoded = not self._reencode
        for target, rows in enumerate(held):
            own = marks[target]
            if rows:
                frames = encode(
                    rows,
                    source,
                    self._max_bytes,
                    encoded=encoded,
                    dumps=dumps,
                    marks=own,
                    sources=count,
                )
                for frame in frames:
                    append(topic, target, None, frame, None, _FRAME_HEADERS)
                self.frames += len(frames)
            elif own:
                _, watermark, idle = own[-1]
                self._markers((target,), watermark, idle)

    # -- what the runtime asks of an operator -----------------------------------------------
    @property
    def current_watermark(self) -> int:
        return self._watermark

    def advance_watermark(self, watermark: int) -> None:
        """Routing fires nothing; ``MAX`` (bounded input ended) is the final marker."""
        if watermark > self._watermark:
            self._watermark = watermark
            if watermark == MAX_TIMESTAMP:
                self.announce(MAX_TIMESTAMP, False)

    def advance_processing_time(self, now: int) -> None:
        return None

    def next_processing_time(self) -> int | None:
        return None

    def gauges(self) -> OperatorGauges:
        return OperatorGauges(event_timers=0, processing_timers=0, windows_open=0, keys=0)

    def timer_counts(self) -> dict[str, tuple[int, int, int]]:
        return _NO_COUNTS

    def snapshot(self) -> dict[str, Any]:
        return {"watermark": self._watermark}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self._watermark = int(snapshot["watermark"])

    def snapshot_changes(self) -> dict[str, Any]:
        return {}  # no state: the generator and the offset are in the checkpoint metadata

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        return None
