"""JSON Schema payloads in Confluent's wire format: the header, then the JSON text.

The value is decoded as a ``json`` source's is (orjson); the writer schema must be one
the registry has, of type ``JSON``, but each record is not validated against it (the
producer's serializer did that; Confluent's deserializer can skip it too), so a
record's value is what its JSON says (docs/formats.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from service.runtime.formats.base import FAILED, Failure
from service.runtime.formats.schemas import WriterSchemas
from service.runtime.formats.wire import HEADER_SIZE, REASON_UNDECODABLE, frame

SCHEMA_TYPE = "JSON"

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError


def parse(text: str) -> object:
    """The schema must be JSON (an object or a boolean, as JSON Schema's are)."""
    schema = orjson.loads(text)
    if not isinstance(schema, dict | bool):
        raise ValueError(f"a JSON Schema is an object or a boolean, not {type(schema).__name__}")
    return schema


def registry_schemas() -> WriterSchemas[object]:
    return WriterSchemas(SCHEMA_TYPE, parse)


class FramedJsonReader:
    """Confluent-framed JSON values, each naming a JSON Schema the registry has."""

    __slots__ = ("schemas",)

    def __init__(self, schemas: WriterSchemas[object]) -> None:
        self.schemas = schemas

    def read(self, records: Sequence[Any], values: list[Any], failures: list[Failure]) -> None:
        append = values.append
        loads = _loads
        for index, raw, _ in self.schemas.heads(records, values, failures):
            try:
                append(loads(memoryview(raw)[HEADER_SIZE:]))
            except _JSONDecodeError as exc:
                append(FAILED)
                failures.append((records[index], REASON_UNDECODABLE, str(exc)))


def framed_encoder(
    schema_id: int, fallback: Callable[[Any], bytes]
) -> Callable[[dict[str, Any]], bytes]:
    """Encode one result value per call in the wire format with schema ``schema_id``:
    the header, then the JSON text the ``json`` sink writes (plain orjson, and
    ``fallback`` for a value it refuses: the sink's, so both write the same bytes)."""
    prefix = frame(schema_id, b"")
    dumps = orjson.dumps
    encode_error = orjson.JSONEncodeError

    def encode(value: dict[str, Any]) -> bytes:
        try:
            return prefix + dumps(value)
        except encode_error:
            return prefix + fallback(value)

    return encode
