"""The reader of a pipeline's source format (None: JSON, which the decoder reads inline)."""

from __future__ import annotations

from service.runtime.definition import FormatSettings
from service.runtime.formats import avro, json_schema, protobuf
from service.runtime.formats.base import PayloadReader
from service.runtime.formats.schemas import WriterSchemas


class UnsupportedFormat(ValueError):
    """A source format this build cannot decode yet."""


def payload_reader(settings: FormatSettings) -> PayloadReader | None:
    """A new reader for ``settings`` (each with its own schema cache), or None for JSON."""
    if settings.kind == "json":
        return None
    if settings.kind == "avro":
        if settings.avro_schema is not None:
            return avro.RawAvroReader(avro.parse(settings.avro_schema))
        return avro.FramedAvroReader(avro.registry_schemas())
    if settings.kind == "protobuf":
        return protobuf.FramedProtobufReader(protobuf.registry_schemas())
    if settings.kind == "json_schema":
        return json_schema.FramedJsonReader(json_schema.registry_schemas())
    raise UnsupportedFormat(f"source format {settings.kind!r} is not supported yet")


def registry_schemas(reader: PayloadReader | None) -> WriterSchemas[object] | None:
    """The schema cache the registry fills for ``reader``; None when it reads none."""
    schemas = getattr(reader, "schemas", None)
    return schemas if isinstance(schemas, WriterSchemas) else None
