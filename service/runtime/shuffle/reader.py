"""Stage 2's end of the shuffle: a shuffle partition's records back into input records.

Per record: a marker updates the partition's :class:`~service.core.shuffle.ShuffleInput`
(never reaching the operator); a routed record already applied from its source (a
replay) is dropped; any other becomes the operator's input record with the key, event
time and position stage 1 found, and the payload decoded again.

Markers are applied in order with the records around them, which the partition task
does (:class:`ShuffleDecoder` only notes where each falls): a record before a marker is
processed before the watermark the marker raises is delivered.

The input record's position (what keyed process functions build output ids from) is
``position << 16 | source``: unique per source record (and element), the same on every
replay and replica. Up to 65,536 source partitions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from service.core.shuffle import ShuffleInput
from service.operators.base import InputRecord
from service.runtime.partition.decoding import REASON_DECODE, DeadLetter
from service.runtime.shuffle.records import (
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

    __slots__ = ("input", "markers")

    def __init__(self, shuffle_input: ShuffleInput) -> None:
        self.input = shuffle_input
        self.markers: list[Marker] = []
        """Markers decoded and not applied yet, at their index in the inputs list."""

    def decode(
        self, records: Sequence[Any], inputs: list[InputRecord], failed: list[DeadLetter]
    ) -> None:
        fresh = self.input.fresh
        append = inputs.append
        loads = _loads
        for record in records:
            headers = record.headers
            name, meta = headers[-1] if headers else ("", b"")
            if name == ROUTED:
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
            elif name == MARKER:
                self.markers.append((len(inputs), *unpack_marker(meta)))
            else:
                failed.append(
                    DeadLetter(record, None, REASON_NOT_ROUTED, "not a record of the shuffle")
                )

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
