"""Payload formats: the bytes of a record's value -> the value steps, key, timestamp and
aggregations read, as JSON would have given it (docs/formats.md says how each type
appears).

Pure: no I/O, no asyncio. A format that names its writer schema by a registry id (the
Confluent wire format, :mod:`.wire`) reads it from :class:`.schemas.WriterSchemas`, which
the runtime's registry client (:mod:`service.runtime.schema_registry`) fills before a
batch is decoded. ``avro.py``, ``protobuf.py`` and ``json_schema.py`` are one format
each; ``payloads.py`` picks the reader a pipeline's source format needs.
"""
