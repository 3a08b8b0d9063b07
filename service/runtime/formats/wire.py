"""The Confluent wire format: a magic byte 0, the writer schema's registry id (4 bytes,
big-endian), then the payload in the schema's format (Protobuf's first: the message
indexes, :func:`message_indexes`).

Pure bytes. The head every framed reader checks (magic byte, id, the id's schema) is
walked over a batch once, by :meth:`.schemas.WriterSchemas.heads`."""

from __future__ import annotations

import struct
from collections.abc import Sequence

MAGIC = 0
HEADER_SIZE = 5
"""The magic byte and the schema id."""

_HEADER = struct.Struct(">bI")
header = _HEADER.unpack_from
"""``header(value) -> (magic, schema_id)``; ``struct.error`` when shorter than 5 bytes."""

REASON_BAD_MAGIC = "bad_magic"
"""The value does not start with the magic byte (or is too short, or empty)."""
REASON_UNKNOWN_SCHEMA = "unknown_schema"
"""The registry has no schema with the value's id (or none it can read)."""
REASON_UNDECODABLE = "undecodable"
"""The payload does not decode with its writer schema."""


def frame(schema_id: int, payload: bytes) -> bytes:
    """``payload`` in the wire format, written with schema ``schema_id``."""
    return _HEADER.pack(MAGIC, schema_id) + payload


def schema_id_of(value: bytes | None) -> int | None:
    """The schema id a framed value names; None when it is not framed."""
    if value is None or len(value) < HEADER_SIZE or value[0] != MAGIC:
        return None
    return int(_HEADER.unpack_from(value)[1])


def bad_magic(value: bytes | None) -> str:
    """Why ``value`` is not in the wire format (the detail of a ``bad_magic`` letter)."""
    if not value:
        return "record has no value"
    if len(value) < HEADER_SIZE:
        return f"{len(value)} bytes, shorter than the wire format's 5-byte header"
    return f"the first byte is {value[0]}, not the wire format's magic byte 0"


def _zigzag_varint(raw: bytes, at: int) -> tuple[int, int]:
    """The zigzag varint at ``raw[at]``, and where the next byte is."""
    shift = 0
    result = 0
    while True:
        byte = raw[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def message_indexes(raw: bytes) -> tuple[tuple[int, ...], int]:
    """Protobuf's message indexes after the header (the message's path in its schema: a
    zigzag varint count, then that many zigzag varint indexes; a single ``0`` byte for
    the first message of the file), and where the message starts; raises
    ``IndexError`` or ``ValueError`` when they are not there."""
    if raw[HEADER_SIZE] == 0:  # the first message of the file: the common case
        return (0,), HEADER_SIZE + 1
    count, at = _zigzag_varint(raw, HEADER_SIZE)
    if not 0 < count <= 64:
        raise ValueError(f"{count} message indexes")
    path = []
    for _ in range(count):
        index, at = _zigzag_varint(raw, at)
        path.append(index)
    return tuple(path), at


def encode_message_indexes(path: Sequence[int]) -> bytes:
    """Protobuf's message indexes for ``path`` (for producers and tests)."""
    if tuple(path) == (0,):
        return b"\x00"

    def zigzag(value: int) -> bytes:
        encoded = (value << 1) ^ (value >> 63)
        out = bytearray()
        while True:
            byte = encoded & 0x7F
            encoded >>= 7
            if encoded:
                out.append(byte | 0x80)
            else:
                out.append(byte)
                return bytes(out)

    return zigzag(len(path)) + b"".join(zigzag(i) for i in path)
