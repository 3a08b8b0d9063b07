"""The Confluent wire format: a magic byte 0, the writer schema's registry id (4 bytes,
big-endian), then the payload in the schema's format."""

from __future__ import annotations

import struct

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
