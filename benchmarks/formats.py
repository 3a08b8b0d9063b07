"""The standard workload in Avro, Protobuf or JSON Schema (Confluent's wire format), for
``python -m benchmarks.e2e --format ...`` (issue 35): the same events, re-encoded, their
schema registered in a real registry (Apicurio, tests/registry/)."""

from __future__ import annotations

from io import BytesIO
from typing import Any

import orjson
from confluent_kafka.schema_registry import AsyncSchemaRegistryClient, Schema
from fastavro import parse_schema, schemaless_writer

from benchmarks.workload import KafkaRecord
from service.runtime.formats import protobuf
from service.runtime.formats.wire import encode_message_indexes, frame

AVRO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "clockwork.bench",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "amount", "type": "double"},
    ],
}
PROTO_SCHEMA = """
syntax = "proto3";
package bench;
message Order { string user = 1; int64 ts = 2; double amount = 3; }
"""
JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "user": {"type": "string"},
        "ts": {"type": "integer"},
        "amount": {"type": "number"},
    },
}
REGISTRY_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}


def schema_text(fmt: str) -> str:
    if fmt == "protobuf":
        return PROTO_SCHEMA
    return orjson.dumps(AVRO_SCHEMA if fmt == "avro" else JSON_SCHEMA).decode()


async def register(registry_url: str, subject: str, fmt: str) -> int:
    client = AsyncSchemaRegistryClient({"url": registry_url})
    try:
        schema = Schema(schema_text(fmt), REGISTRY_TYPES[fmt])
        return int(await client.register_schema(subject, schema))
    finally:
        await client.aclose()


def encode_records(records: list[KafkaRecord], fmt: str, schema_id: int) -> list[KafkaRecord]:
    """``records`` (JSON values) with each value in ``fmt``, framed with ``schema_id``."""
    out: list[KafkaRecord] = []
    if fmt == "avro":
        parsed = parse_schema(AVRO_SCHEMA)
        buffer = BytesIO()
        for partition, key, value, ts in records:
            buffer.seek(0)
            buffer.truncate()
            schemaless_writer(buffer, parsed, orjson.loads(value))
            out.append((partition, key, frame(schema_id, buffer.getvalue()), ts))
    elif fmt == "protobuf":
        order = protobuf.ProtobufSchema(protobuf.compile_proto(PROTO_SCHEMA))
        reader = order.reader((0,))
        assert reader is not None
        cls = type(reader.parse(b""))
        path = encode_message_indexes([0])
        for partition, key, value, ts in records:
            message = cls(**orjson.loads(value))
            out.append((partition, key, frame(schema_id, path + message.SerializeToString()), ts))
    else:
        out = [(p, key, frame(schema_id, value), ts) for p, key, value, ts in records]
    return out
