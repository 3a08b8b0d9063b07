"""The shuffle topic's records: frames of routed rows, and watermark markers.

A frame (``core/frames.py``) is one Kafka record holding the rows one source partition
routed to one shuffle partition in one flush: its value is the frame, its one header
``clockwork.frame`` (empty) says so. The rows carry the source records' Kafka keys,
values, timestamps and headers, so late and dead-letter outputs of the keyed stage can
still forward what the producer wrote.

Before frames, each row was a routed record of its own, which stage 2 still reads, so a
shuffle topic written by the previous version drains after an upgrade. Such a record
keeps the source record's Kafka key, value (the payload as the steps left it),
timestamp and headers, and appends one header, last, with what stage 2 needs without
parsing the payload for it:

    clockwork.shuffle = event time (int64) | source partition number (uint32) |
                        position in the source (int64: offset << 20 | element index) |
                        the pipeline key, UTF-8

A marker has no key and no value and one header:

    clockwork.marker = source partition number (uint32) | watermark (int64) |
                       idle (uint8) | source partitions in all (uint32)

Big-endian; a record's partition is its key's (``core/partitioner.py``); a marker goes
to every shuffle partition. The layout is internal: only this service reads the topic.
"""

from __future__ import annotations

import struct
from typing import Final

FRAME: Final = "clockwork.frame"
ROUTED: Final = "clockwork.shuffle"
MARKER: Final = "clockwork.marker"

_ROUTED = struct.Struct(">qIq")
_MARKER = struct.Struct(">IqBI")

ROUTED_SIZE: Final = _ROUTED.size

pack_routed = _ROUTED.pack
"""``(event time, source, position) -> bytes``; the key's UTF-8 bytes follow."""

unpack_routed = _ROUTED.unpack_from
"""``bytes -> (event time, source, position)``; the key starts at :data:`ROUTED_SIZE`."""


def pack_marker(source: int, watermark: int, idle: bool, count: int) -> bytes:
    return _MARKER.pack(source, watermark, 1 if idle else 0, count)


def unpack_marker(data: bytes) -> tuple[int, int, bool, int]:
    """``(source, watermark, idle, count)``."""
    source, watermark, idle, count = _MARKER.unpack(data)
    return source, watermark, bool(idle), count
