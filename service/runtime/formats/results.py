"""The encoder of a sink's results in its format (``sink.format``, docs/formats.md
"Results"): each result value in Confluent's wire format with the id the results'
schema was registered under."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from service.runtime.formats import avro, json_schema, protobuf

Encoder = Callable[[dict[str, Any]], bytes]


def result_encoder(
    fmt: str, schema_text: str, schema_id: int, json_fallback: Callable[[Any], bytes]
) -> Encoder:
    """Results in ``fmt`` (``avro``, ``protobuf``, ``json_schema``) with schema
    ``schema_id`` (``schema_text``, as registered); ``json_fallback`` writes what plain
    orjson refuses, as the JSON sink does."""
    if fmt == "avro":
        return avro.framed_encoder(schema_text, schema_id)
    if fmt == "protobuf":
        return protobuf.framed_encoder(schema_text, schema_id)
    if fmt == "json_schema":
        return json_schema.framed_encoder(schema_id, json_fallback)
    raise ValueError(f"no result encoder for sink format {fmt!r}")
