"""JSON Schema payloads in Confluent's wire format: the header, then the JSON text.

The value is decoded as a ``json`` source's is (orjson); the writer schema must be one
the registry has, of type ``JSON``, but each record is not validated against it (the
producer's serializer did that; Confluent's deserializer can skip it too), so a
record's value is what its JSON says (docs/formats.md). A schema whose ``$ref`` s name
other registry schemas (its references, each named by the URL a ``$ref`` gives) is
known once each of them is, and each is a JSON Schema too: :class:`JsonSchema` keeps
them by those URLs, as a validator's resolver would take them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from service.runtime.formats.base import FAILED, Failure
from service.runtime.formats.schemas import Reference, WriterSchemas
from service.runtime.formats.wire import HEADER_SIZE, REASON_UNDECODABLE, frame

SCHEMA_TYPE = "JSON"

_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError


@dataclass(frozen=True, slots=True)
class JsonSchema:
    """A registry's JSON Schema and the documents its ``$ref`` s name, by their URLs."""

    schema: dict[str, Any] | bool
    documents: Mapping[str, dict[str, Any] | bool]


def parse(text: str, references: Sequence[Reference] = ()) -> JsonSchema:
    """The schema and each of its references must be JSON Schemas (an object or a
    boolean); raises ``ValueError`` (orjson's included) where one is not."""
    documents: dict[str, dict[str, Any] | bool] = {}
    for reference in references:
        documents[reference.name] = _document(reference.text, f"reference {reference.name!r}")
    return JsonSchema(_document(text, "the schema"), documents)


def _document(text: str, what: str) -> dict[str, Any] | bool:
    schema = orjson.loads(text)
    if not isinstance(schema, dict | bool):
        raise ValueError(
            f"{what}: a JSON Schema is an object or a boolean, not {type(schema).__name__}"
        )
    return schema


def registry_schemas() -> WriterSchemas[JsonSchema]:
    return WriterSchemas(SCHEMA_TYPE, parse)


class FramedJsonReader:
    """Confluent-framed JSON values, each naming a JSON Schema the registry has."""

    __slots__ = ("schemas",)

    def __init__(self, schemas: WriterSchemas[JsonSchema]) -> None:
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
