"""Avro, Protobuf and JSON Schema sources and sinks end to end: a real broker (both)
and a real schema registry (Apicurio, tests/registry/), issue 35. Small data: a few
hundred records per test."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from io import BytesIO
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka.schema_registry import AsyncSchemaRegistryClient, Schema, SchemaReference
from confluent_kafka.schema_registry._async.json_schema import AsyncJSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import parse_schema, schemaless_writer
from google.protobuf import descriptor_pool, json_format, message_factory

from service.pipeline_spec.build import build_definition
from service.pipeline_spec.models import validate_spec
from service.pipeline_spec.sink_schemas import window_result_avro_schema, window_result_schema
from service.runtime.definition import FormatSettings, PipelineDefinition
from service.runtime.formats import avro as avro_format
from service.runtime.formats import protobuf
from service.runtime.formats.schemas import Reference
from service.runtime.formats.wire import encode_message_indexes, frame
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.status import PipelineState
from service.runtime.schema_registry.client import SchemaRegistry
from service.runtime.settings import SchemaRegistrySettings
from tests.api.server import app_settings, running_app
from tests.conftest import selected_brokers
from tests.integration.kafka_utils import (
    Record,
    create_topic,
    produce,
    read_json,
    read_topic,
    runtime_settings,
    unique,
    wait_until,
    window_definition,
)
from tests.integration.test_lookup_join import lookup_spec
from tests.registry.apicurio_registry import ApicurioRegistry

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BASE_MS = 1_700_000_040_000  # a minute boundary

V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "clockwork.test",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "amount", "type": "double"},
    ],
}
V2: dict[str, Any] = {  # a field added with a default: backward compatible
    **V1,
    "fields": [*V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}],
}


def avro(schema: dict[str, Any], value: dict[str, Any]) -> bytes:
    out = BytesIO()
    schemaless_writer(out, parse_schema(schema), value)
    return out.getvalue()


async def register(
    url: str, subject: str, *schemas: dict[str, Any] | str, kind: str = "AVRO"
) -> list[int]:
    """Register ``schemas`` (of type ``kind``; text, or JSON to encode) under ``subject``
    in order; their ids."""
    client = AsyncSchemaRegistryClient({"url": url})
    try:
        return [
            await client.register_schema(
                subject, Schema(s if isinstance(s, str) else orjson.dumps(s).decode(), kind)
            )
            for s in schemas
        ]
    finally:
        await client.aclose()


def orders(count: int, step_ms: int = 500) -> list[dict[str, Any]]:
    return [
        {"user": f"u{i % 3}", "ts": BASE_MS + i * step_ms, "amount": float(i % 7)}
        for i in range(count)
    ]


def expected(data: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    out: dict[tuple[str, int], dict[str, Any]] = defaultdict(lambda: {"n": 0, "revenue": 0.0})
    for order in data:
        acc = out[(order["user"], order["ts"] - order["ts"] % 60_000)]
        acc["n"] += 1
        acc["revenue"] += order["amount"]
    return dict(out)


def avro_definition(
    name: str,
    topic: str,
    shuffle: bool = False,
    more: dict[str, Any] | None = None,
    **fmt: Any,
) -> PipelineDefinition:
    """A per-minute count and sum of ``amount`` of an Avro topic (``more``: other
    aggregations beside them)."""
    definition = window_definition(
        name,
        [topic],
        {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 60_000},
            "aggregations": {
                "n": {"fn": "count"},
                "revenue": {"fn": "sum", "field": "amount"},
                **(more or {}),
            },
        },
        shuffle=shuffle,
    )
    return dataclasses.replace(definition, format=FormatSettings(kind="avro", **fmt))


async def run_to_end(
    bootstrap_servers: str, definition: PipelineDefinition, registry_url: str | None
) -> None:
    registry = SchemaRegistrySettings(url=registry_url) if registry_url else None
    runtime = Runtime(runtime_settings(bootstrap_servers, schema_registry=registry))
    await runtime.start()
    try:
        runtime.start_pipeline(definition)
        await runtime.runner(definition.name).wait_for_state(PipelineState.FINISHED, timeout_s=60)
    finally:
        await runtime.shutdown()


async def results_and_reasons(
    bootstrap_servers: str, name: str
) -> tuple[dict[tuple[str, int], dict[str, Any]], list[bytes]]:
    results = await read_json(bootstrap_servers, f"{name}.out")
    got = {(r["key"], r["window"]["start"]): r["result"] for r in results}
    assert len(results) == len(got)
    letters = await read_topic(bootstrap_servers, f"{name}.dlq")
    return got, sorted(dict(r.headers)["clockwork.reason"] for r in letters)


@pytest.mark.parametrize("shuffle", [False, True], ids=["keyed-source", "shuffled"])
async def test_avro_evolving_mid_topic_with_bad_records_between(
    bootstrap_servers: str, schema_registry: ApicurioRegistry, shuffle: bool
) -> None:
    """Records of two schema versions read each with its own writer schema; a record with
    a wrong magic byte, an unknown id, or bytes its schema cannot read is a dead letter
    with that reason; the rest are exact."""
    name = unique("avro")
    topic = f"{name}.in"
    partitions = 2 if shuffle else 1  # without the shuffle, a window per key and partition
    await create_topic(bootstrap_servers, topic, partitions)
    v1, v2 = await register(schema_registry.url, f"{topic}-value", V1, V2)
    assert v1 != v2
    data = orders(120)
    records: list[Record] = []
    for i, order in enumerate(data):
        if i < 60:
            value = frame(v1, avro(V1, order))
        else:
            value = frame(v2, avro(V2, {**order, "coupon": "c" if i % 2 else None}))
        records.append((i % partitions, None, value, None))
    records += [
        (0, None, orjson.dumps(data[0]), None),  # JSON on an Avro topic
        (partitions - 1, None, frame(2_000_000_000, avro(V1, data[0])), None),  # no such schema
        (0, None, frame(v2, b"\xff\xff"), None),  # not an Order
    ]
    await produce(bootstrap_servers, topic, records)
    await run_to_end(bootstrap_servers, avro_definition(name, topic, shuffle), schema_registry.url)
    got, reasons = await results_and_reasons(bootstrap_servers, name)
    assert got == expected(data)
    assert reasons == [b"bad_magic", b"undecodable", b"unknown_schema"]


ORDER_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "user": {"type": "string"},
        "ts": {"type": "integer"},
        "amount": {"type": "number"},
    },
    "required": ["user", "ts"],
}


async def test_json_schema_through_the_registry(
    bootstrap_servers: str, schema_registry: ApicurioRegistry
) -> None:
    name = unique("json-schema")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 1)
    (schema_id,) = await register(
        schema_registry.url, f"{topic}-value", ORDER_JSON_SCHEMA, kind="JSON"
    )
    data = orders(50)
    await produce(
        bootstrap_servers,
        topic,
        [
            *((0, None, frame(schema_id, orjson.dumps(o)), None) for o in data),
            (0, None, orjson.dumps(data[0]), None),
            (0, None, frame(schema_id, b"{"), None),
        ],
    )
    definition = dataclasses.replace(
        avro_definition(name, topic), format=FormatSettings(kind="json_schema")
    )
    await run_to_end(bootstrap_servers, definition, schema_registry.url)
    got, reasons = await results_and_reasons(bootstrap_servers, name)
    assert got == expected(data)
    assert reasons == [b"bad_magic", b"undecodable"]


PROTO_V1 = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order { string user = 1; google.protobuf.Timestamp ts = 2; double amount = 3; }
"""
PROTO_V2 = PROTO_V1.replace("double amount = 3;", "double amount = 3; string coupon = 4;")


def proto_classes(text: str) -> Any:
    pool = descriptor_pool.DescriptorPool()
    for file in protobuf.compile_proto(text).file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


async def test_protobuf_evolving_mid_topic(
    bootstrap_servers: str, schema_registry: ApicurioRegistry
) -> None:
    name = unique("protobuf")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 1)
    v1, v2 = await register(
        schema_registry.url, f"{topic}-value", PROTO_V1, PROTO_V2, kind="PROTOBUF"
    )
    old, new = proto_classes(PROTO_V1), proto_classes(PROTO_V2)
    data = orders(60)
    records: list[Record] = []
    for i, order in enumerate(data):
        message = old(user=order["user"], amount=order["amount"])
        if i >= 30:
            message = new(user=order["user"], amount=order["amount"], coupon="c")
        message.ts.FromMilliseconds(order["ts"])
        schema_id = v1 if i < 30 else v2
        payload = encode_message_indexes([0]) + message.SerializeToString()
        records.append((0, None, frame(schema_id, payload), None))
    records.append((0, None, frame(v1, b"\x00\xff\xff"), None))
    await produce(bootstrap_servers, topic, records)
    definition = dataclasses.replace(
        avro_definition(name, topic), format=FormatSettings(kind="protobuf")
    )
    await run_to_end(bootstrap_servers, definition, schema_registry.url)
    got, reasons = await results_and_reasons(bootstrap_servers, name)
    assert got == expected(data)
    assert reasons == [b"undecodable"]


MONEY_AVRO: dict[str, Any] = {
    "type": "record",
    "name": "Money",
    "namespace": "shop",
    "fields": [{"name": "amount", "type": "double"}, {"name": "currency", "type": "string"}],
}
PRICED_AVRO: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "money", "type": "shop.Money"},
    ],
}
MONEY_PROTO = (
    'syntax = "proto3";\npackage shop;\nmessage Money { double amount = 1; string currency = 2; }\n'
)
PRICED_PROTO = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "shop/money.proto";
message Order { string user = 1; google.protobuf.Timestamp ts = 2; Money money = 3; }
"""
MONEY_JSON: dict[str, Any] = {
    "type": "object",
    "properties": {"amount": {"type": "number"}, "currency": {"type": "string"}},
}
PRICED_JSON: dict[str, Any] = {
    "type": "object",
    "properties": {
        "user": {"type": "string"},
        "ts": {"type": "integer"},
        "money": {"$ref": "money.json"},
    },
}
REFERENCING: dict[str, tuple[str, str, str, str]] = {
    # format: (registry type, the referenced schema, its name, the referencing schema)
    "avro": (
        "AVRO",
        orjson.dumps(MONEY_AVRO).decode(),
        "shop.Money",
        orjson.dumps(PRICED_AVRO).decode(),
    ),
    "protobuf": ("PROTOBUF", MONEY_PROTO, "shop/money.proto", PRICED_PROTO),
    "json_schema": (
        "JSON",
        orjson.dumps(MONEY_JSON).decode(),
        "money.json",
        orjson.dumps(PRICED_JSON).decode(),
    ),
}


def priced_value(fmt: str, order: dict[str, Any]) -> bytes:
    """``order`` with its amount in a ``money`` of the referenced type, as ``fmt``'s
    producer writes it (the writer's side resolves the reference its own way)."""
    money = {"amount": order["amount"], "currency": "EUR"}
    if fmt == "avro":
        named: dict[str, Any] = {}
        parse_schema(MONEY_AVRO, named)
        out = BytesIO()
        schemaless_writer(out, parse_schema(PRICED_AVRO, named), {**order, "money": money})
        return out.getvalue()
    if fmt == "protobuf":
        pool = descriptor_pool.DescriptorPool()
        _, _, name, text = REFERENCING["protobuf"]
        reference = Reference(name, "money", 1, "PROTOBUF", MONEY_PROTO)
        for file in protobuf.compile_proto(text, [reference]).file:
            pool.Add(file)
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
        message = cls(user=order["user"], money=money)
        message.ts.FromMilliseconds(order["ts"])
        return encode_message_indexes([0]) + message.SerializeToString()
    return orjson.dumps({"user": order["user"], "ts": order["ts"], "money": money})


async def register_dangling(
    registry: ApicurioRegistry, subject: str, kind: str, text: str, name: str
) -> int:
    """``text`` under ``subject``, referencing ``name`` in a subject nobody registered:
    what Confluent's API refuses (42201), Apicurio's own API takes; the id Confluent's
    API gives it."""
    native = registry.url.replace("/apis/ccompat/v7", "/apis/registry/v2")
    reference = {"groupId": "default", "artifactId": f"{subject}-gone", "version": "1"}
    async with httpx.AsyncClient() as http:
        created = await http.post(
            f"{native}/groups/default/artifacts",
            json={"content": text, "references": [{**reference, "name": name}]},
            headers={
                "X-Registry-ArtifactId": subject,
                "X-Registry-ArtifactType": kind,
                "Content-Type": "application/create.extended+json",
            },
        )
        created.raise_for_status()
        found = await http.get(f"{registry.url}/subjects/{subject}/versions/1")
        found.raise_for_status()
        return int(found.json()["id"])


@pytest.mark.parametrize("fmt", list(REFERENCING))
async def test_schemas_with_references_read_and_a_missing_reference_is_a_dead_letter(
    request: pytest.FixtureRequest,
    bootstrap_servers: str,
    broker_name: str,
    schema_registry: ApicurioRegistry,
    fmt: str,
) -> None:
    """The writer schema names a type in another subject (an Avro named type, a
    Protobuf import, a JSON Schema ``$ref``): its records read whole; a record whose
    schema names a subject the registry lacks is ``unknown_schema``, naming it."""
    first = selected_brokers(request.config)[0]
    if broker_name != first:
        pytest.skip(f"the registry's side, checked on {first}")
    kind, referenced, ref_name, referencing = REFERENCING[fmt]
    name = unique(f"refs-{fmt.replace('_', '-')}")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 1)
    await register(schema_registry.url, f"{name}-money", referenced, kind=kind)
    client = AsyncSchemaRegistryClient({"url": schema_registry.url})
    try:
        reference = SchemaReference(ref_name, f"{name}-money", 1)
        schema_id = await client.register_schema(
            f"{topic}-value", Schema(referencing, kind, [reference])
        )
    finally:
        await client.aclose()
    dangling = await register_dangling(
        schema_registry, f"{name}-dangling", kind, referencing, ref_name
    )
    data = orders(40)
    await produce(
        bootstrap_servers,
        topic,
        [
            *((0, None, frame(schema_id, priced_value(fmt, o)), None) for o in data),
            (0, None, frame(dangling, priced_value(fmt, data[0])), None),
        ],
    )
    definition = avro_definition(
        name, topic, more={"revenue": {"fn": "sum", "field": "money.amount"}}
    )
    await run_to_end(
        bootstrap_servers,
        dataclasses.replace(definition, format=FormatSettings(kind=fmt)),
        schema_registry.url,
    )
    got, reasons = await results_and_reasons(bootstrap_servers, name)
    assert got == expected(data)
    assert reasons == [b"unknown_schema"]
    (letter,) = await read_topic(bootstrap_servers, f"{name}.dlq")
    assert (
        f"references '{ref_name}' (subject '{name}-dangling-gone', version 1)".encode()
        in dict(letter.headers)["clockwork.error"]
    )


async def test_raw_avro_with_the_schema_in_the_spec(bootstrap_servers: str) -> None:
    name = unique("raw-avro")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 1)
    data = orders(50)
    await produce(
        bootstrap_servers,
        topic,
        [*((0, None, avro(V1, o), None) for o in data), (0, None, b"\x01", None)],
    )
    definition = avro_definition(name, topic, avro_schema=orjson.dumps(V1).decode())
    await run_to_end(bootstrap_servers, definition, None)
    got, reasons = await results_and_reasons(bootstrap_servers, name)
    assert got == expected(data)
    assert reasons == [b"undecodable"]


async def test_an_unreachable_registry_pauses_the_pipeline_and_loses_nothing(
    bootstrap_servers: str,
) -> None:
    """The registry stops answering mid-stream (the records of the second schema come
    after it did): the pipeline shows paused with the reason and asks again with
    backoff; once the registry answers, every record counts and none is a dead letter.

    A registry of its own (the shared one serves other tests meanwhile), frozen rather
    than stopped: Apicurio's storage is in memory, so a restart would forget the
    schemas the records name, which a real registry's restart does not."""
    name = unique("avro-outage")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 1)
    data = orders(60, step_ms=2000)  # two minutes: the first window closes in the second
    with ApicurioRegistry() as registry:
        v1, v2 = await register(registry.url, f"{topic}-value", V1, V2)
        first = [(0, None, frame(v1, avro(V1, o)), None) for o in data[:30]]
        await produce(bootstrap_servers, topic, first)
        settings = runtime_settings(
            bootstrap_servers,
            schema_registry=SchemaRegistrySettings(url=registry.url, timeout_s=0.5),
        )
        definition = dataclasses.replace(avro_definition(name, topic), bounded=False)
        runtime = Runtime(settings)
        await runtime.start()
        try:
            runtime.start_pipeline(definition)
            runner = runtime.runner(name)

            async def read_first() -> bool:
                current = runner.stages[0].session
                return current is not None and current.records_in >= len(first)

            await wait_until(read_first, timeout_s=30)
            session = runner.stages[0].session
            registry.freeze()
            try:
                second = [(0, None, frame(v2, avro(V2, o)), None) for o in data[30:]]
                await produce(bootstrap_servers, topic, second)
                await runner.wait_for_state(PipelineState.PAUSED, timeout_s=30)
                assert runner.reason is not None and "schema registry" in runner.reason
            finally:
                registry.thaw()
            await runner.wait_for_state(PipelineState.RUNNING, timeout_s=30)
            assert session is runner.stages[0].session  # waited, not restarted

            async def read_all() -> bool:
                current = runner.stages[0].session
                return current is not None and current.records_in >= len(data)

            await wait_until(read_all, timeout_s=30)
        finally:
            await runtime.shutdown()
    letters = await read_topic(bootstrap_servers, f"{name}.dlq")
    assert letters == []
    # the first minute's windows, closed by the records after the outage, are exact (the
    # second minute's stay open: the input is unbounded)
    results = await read_json(bootstrap_servers, f"{name}.out")
    got = {(r["key"], r["window"]["start"]): r["result"] for r in results}
    first_minute = {k: v for k, v in expected(data).items() if k[1] == BASE_MS}
    assert got == first_minute


async def read_avro_results(
    bootstrap_servers: str, topic: str, registry_url: str
) -> list[dict[str, Any]]:
    """The results on ``topic``, each read with the writer schema its id names."""
    records = await read_topic(bootstrap_servers, topic)
    cache = avro_format.registry_schemas()
    client = SchemaRegistry(SchemaRegistrySettings(url=registry_url))
    try:
        await client.resolve(cache, cache.missing(records))
    finally:
        await client.close()
    values: list[Any] = []
    failures: list[Any] = []
    avro_format.FramedAvroReader(cache).read(records, values, failures)
    assert failures == []
    return values


async def test_avro_results_with_the_schema_derived_from_the_aggregations(
    bootstrap_servers: str, schema_registry: ApicurioRegistry
) -> None:
    """An Avro source to an Avro sink: the results' schema is registered under
    ``<topic>-value``, every result is in the wire format with its id, and reads back as
    the JSON result would be."""
    name = unique("avro-sink")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 1)
    (v1,) = await register(schema_registry.url, f"{topic}-value", V1)
    data = orders(40)
    await produce(bootstrap_servers, topic, [(0, None, frame(v1, avro(V1, o)), None) for o in data])
    definition = avro_definition(name, topic)
    aggregations = definition.spec["operator"]["aggregations"]
    schema = orjson.dumps(window_result_avro_schema(name, aggregations)).decode()
    definition = dataclasses.replace(
        definition,
        sink=dataclasses.replace(definition.sink, format="avro", value_schema=schema),
    )
    await run_to_end(bootstrap_servers, definition, schema_registry.url)
    results = await read_avro_results(bootstrap_servers, f"{name}.out", schema_registry.url)
    got = {(r["key"], r["window"]["start"]): r["result"] for r in results}
    assert got == expected(data)
    assert {r["fire"] for r in results} == {"on_time"}
    client = AsyncSchemaRegistryClient({"url": schema_registry.url})
    try:
        latest = await client.get_latest_version(f"{name}.out-value")
    finally:
        await client.aclose()
    assert orjson.loads(latest.schema.schema_str)["name"] == "WindowResult"


async def test_a_spec_whose_result_schema_the_registry_refuses_is_a_422(
    bootstrap_servers: str, schema_registry: ApicurioRegistry
) -> None:
    """Under BACKWARD compatibility, adding an aggregation is fine (every result field
    has a default) and changing one's type so old results no longer read is refused
    when the spec is replaced, before anything runs."""
    name = unique("avro-compat")
    topic = f"{name}.in"
    out = f"{name}.out"
    await create_topic(bootstrap_servers, topic, 1)
    client = AsyncSchemaRegistryClient({"url": schema_registry.url})
    try:
        await client.set_compatibility(f"{out}-value", "BACKWARD")
    finally:
        await client.aclose()

    def spec(**aggregations: Any) -> dict[str, Any]:
        return {
            "name": name,
            "source": {"topics": [topic], "format": "avro"},
            "key": {"field": "user", "partitioned": True},
            "timestamp": {"field": "ts"},
            "operator": {
                "type": "window",
                "assigner": {"type": "tumbling", "size_ms": 60_000},
                "aggregations": aggregations,
            },
            "sink": {"topic": out, "format": "avro"},
        }

    settings = app_settings(
        bootstrap_servers, schema_registry=SchemaRegistrySettings(url=schema_registry.url)
    )
    async with running_app(settings) as url, httpx.AsyncClient(base_url=url) as http:
        created = await http.post("/pipelines", json=spec(seen={"fn": "first", "field": "user"}))
        assert created.status_code == 201, created.text
        subject = f"{out}-value"

        async def registered() -> bool:
            versions = await http_get_versions(schema_registry.url, subject)
            return len(versions) >= 1

        await wait_until(registered, timeout_s=30)
        grown = spec(seen={"fn": "first", "field": "user"}, n={"fn": "count"})
        replaced = await http.put(f"/pipelines/{name}?reset_state=true", json=grown)
        assert replaced.status_code == 200, replaced.text
        changed = spec(seen={"fn": "count"}, n={"fn": "count"})
        refused = await http.put(f"/pipelines/{name}?reset_state=true", json=changed)
        assert refused.status_code == 422, refused.text
        (problem,) = refused.json()["detail"]
        assert problem["type"] == "sink_schema_incompatible"
        assert problem["loc"][-2:] == ["sink", "format"]
        await http.delete(f"/pipelines/{name}")


@pytest.mark.parametrize(("fmt", "kind"), [("protobuf", "PROTOBUF"), ("json_schema", "JSON")])
async def test_a_protobuf_or_json_schema_sink_the_registry_refuses_is_a_422_at_create(
    bootstrap_servers: str, schema_registry: ApicurioRegistry, fmt: str, kind: str
) -> None:
    """The registry's compatibility rules hold for every sink format: with the results'
    schema of ``seen: first`` under ``<topic>-value`` (BACKWARD), a spec making it a
    ``count`` (old results no longer read) is refused when it is created."""
    name = unique(f"{fmt.replace('_', '-')}-compat")
    out = f"{name}.out"
    first = {"seen": {"fn": "first", "field": "user"}}
    client = AsyncSchemaRegistryClient({"url": schema_registry.url})
    try:
        await client.set_compatibility(f"{out}-value", "BACKWARD")
        await client.register_schema(
            f"{out}-value", Schema(window_result_schema(fmt, name, first), kind)
        )
    finally:
        await client.aclose()
    spec = {
        "name": name,
        "source": {"topics": [f"{name}.in"]},
        "key": {"field": "user", "partitioned": True},
        "timestamp": {"field": "ts"},
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 60_000},
            "aggregations": {"seen": {"fn": "count"}},
        },
        "sink": {"topic": out, "format": fmt},
    }
    settings = app_settings(
        bootstrap_servers, schema_registry=SchemaRegistrySettings(url=schema_registry.url)
    )
    async with running_app(settings) as url, httpx.AsyncClient(base_url=url) as http:
        refused = await http.post("/pipelines", json=spec)
    assert refused.status_code == 422, refused.text
    (problem,) = refused.json()["detail"]
    assert (problem["type"], problem["loc"][-2:]) == (
        "sink_schema_incompatible",
        ["sink", "format"],
    )


async def http_get_versions(url: str, subject: str) -> list[int]:
    client = AsyncSchemaRegistryClient({"url": url})
    try:
        return list(await client.get_versions(subject))
    except Exception:  # no such subject yet
        return []
    finally:
        await client.aclose()


async def test_a_format_needing_a_registry_on_a_service_without_one_is_a_422(
    bootstrap_servers: str,
) -> None:
    name = unique("no-registry")
    spec = {
        "name": name,
        "source": {"topics": [f"{name}.in"], "format": "protobuf"},
        "timestamp": {"field": "ts"},
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 60_000},
            "aggregations": {"n": {"fn": "count"}},
        },
        "sink": {"topic": f"{name}.out", "format": "avro"},
    }
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        refused = await http.post("/pipelines", json=spec)
        assert refused.status_code == 422, refused.text
        problems = [(p["type"], p["loc"][-2:]) for p in refused.json()["detail"]]
        assert problems == [
            ("schema_registry_unconfigured", ["source", "format"]),
            ("schema_registry_unconfigured", ["sink", "format"]),
        ]


async def json_results_run(
    bootstrap_servers: str, registry_url: str, name: str, fmt: str
) -> list[dict[str, Any]]:
    """A JSON source of 40 orders (each with ``big``: 2**53 + 1) to a sink in ``fmt``,
    whose aggregations also sum ``big``; the results' records."""
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 1)
    data = [{**o, "big": BIG} for o in orders(40)]
    await produce(bootstrap_servers, topic, [(0, None, orjson.dumps(o), None) for o in data])
    definition = avro_definition(name, topic, more={"big": {"fn": "sum", "field": "big"}})
    definition = dataclasses.replace(definition, format=FormatSettings())
    aggregations = definition.spec["operator"]["aggregations"]
    schema = window_result_schema(fmt, name, aggregations)
    definition = dataclasses.replace(
        definition,
        sink=dataclasses.replace(definition.sink, format=fmt, value_schema=schema),
    )
    await run_to_end(bootstrap_servers, definition, registry_url)
    return [{"value": r.value} for r in await read_topic(bootstrap_servers, f"{name}.out")]


BIG = 2**53 + 1
"""A value whose sums a double would round: they must stay exact in every format."""


def window_results(values: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    got = {(v["key"], int(v["window"]["start"])): v["result"] for v in values}
    assert len(got) == len(values)
    return got


def expected_with_big() -> dict[tuple[str, int], dict[str, Any]]:
    """:func:`expected` of :func:`json_results_run`'s orders, with the sums of ``big``."""
    return {k: {**v, "big": v["n"] * BIG} for k, v in expected(orders(40)).items()}


async def test_json_schema_results_read_back_by_confluents_deserializer(
    bootstrap_servers: str, schema_registry: ApicurioRegistry
) -> None:
    """Results in JSON Schema's wire format, their schema registered under
    ``<topic>-value``, read back by confluent-kafka's deserializer (which fetches the
    writer schema by id and validates each result against it)."""
    name = unique("json-schema-sink")
    records = await json_results_run(bootstrap_servers, schema_registry.url, name, "json_schema")
    client = AsyncSchemaRegistryClient({"url": schema_registry.url})
    try:
        deserialize = await AsyncJSONDeserializer(None, schema_registry_client=client)
        context = SerializationContext(f"{name}.out", MessageField.VALUE)
        values = [await deserialize(r["value"], context) for r in records]
        latest = await client.get_latest_version(f"{name}.out-value")
    finally:
        await client.aclose()
    assert window_results(values) == expected_with_big()
    assert latest.schema.schema_type == "JSON"
    assert {frame_id(r["value"]) for r in records} == {latest.schema_id}


async def test_protobuf_results_read_back_with_the_registrys_schema(
    bootstrap_servers: str, schema_registry: ApicurioRegistry
) -> None:
    """Results in Protobuf's wire format: each names the schema registered under
    ``<topic>-value`` and message index 0; read with that .proto text compiled by protoc
    and protobuf's own JSON mapping (not the service's decoder)."""
    name = unique("protobuf-sink")
    records = await json_results_run(bootstrap_servers, schema_registry.url, name, "protobuf")
    client = AsyncSchemaRegistryClient({"url": schema_registry.url})
    try:
        latest = await client.get_latest_version(f"{name}.out-value")
    finally:
        await client.aclose()
    assert latest.schema.schema_type == "PROTOBUF"
    pool = descriptor_pool.DescriptorPool()
    for file in protobuf.compile_proto(latest.schema.schema_str or "").file:
        pool.Add(file)
    package = next(iter(pool.FindFileByName("schema.proto").message_types_by_name.values()))
    message = message_factory.GetMessageClass(package)
    values = []
    for record in records:
        raw = record["value"]
        assert frame_id(raw) == latest.schema_id and raw[5] == 0  # message index [0]
        decoded = message.FromString(raw[6:])
        values.append(json_format.MessageToDict(decoded, preserving_proto_field_name=True))
    for value in values:  # protobuf's JSON mapping writes an int64 as a string
        result = value["result"]
        result["n"] = int(result["n"])
        result["revenue"] = result["revenue"]["double_value"]  # the sums' Number oneof
        result["big"] = int(result["big"]["long_value"])
    assert window_results(values) == expected_with_big()


def frame_id(value: bytes) -> int:
    assert value[0] == 0
    return int.from_bytes(value[1:5], "big")


async def test_a_join_of_an_avro_input_and_a_json_input(
    bootstrap_servers: str, schema_registry: ApicurioRegistry
) -> None:
    """Each input of a join decodes its own format: orders in Avro through the registry
    (a bad record among them dead-lettered as such), payments in JSON."""
    name = unique("avro-join")
    await create_topic(bootstrap_servers, f"{name}.orders", 1)
    await create_topic(bootstrap_servers, f"{name}.payments", 1)
    (v1,) = await register(schema_registry.url, f"{name}.orders-value", V1)
    data = orders(20)
    await produce(
        bootstrap_servers,
        f"{name}.orders",
        [
            *(
                (0, None, frame(v1, avro(V1, {**o, "user": f"o{i}"})), None)
                for i, o in enumerate(data)
            ),
            (0, None, orjson.dumps(data[0]), None),
        ],
    )
    payments = [{"order": f"o{i}", "paid": i, "ts": o["ts"] + 1} for i, o in enumerate(data)]
    await produce(
        bootstrap_servers, f"{name}.payments", [(0, None, orjson.dumps(p), None) for p in payments]
    )
    spec = validate_spec(
        {
            "name": name,
            "inputs": {
                "orders": {
                    "source": {"topics": [f"{name}.orders"], "format": "avro", "bounded": True},
                    "key": {"field": "user"},
                    "timestamp": {"field": "ts"},
                },
                "payments": {
                    "source": {"topics": [f"{name}.payments"], "bounded": True},
                    "key": {"field": "order"},
                    "timestamp": {"field": "ts"},
                },
            },
            "operator": {
                "type": "join",
                "kind": "interval",
                "how": "inner",
                "left": "orders",
                "right": "payments",
                "between": {"lower_ms": 0, "upper_ms": 10},
                "select": {"amount": "orders.amount", "paid": "payments.paid"},
            },
            "sink": {"topic": f"{name}.out", "dead_letter_topic": f"{name}.dlq"},
        },
        (),
    )
    await run_to_end(bootstrap_servers, build_definition(spec, ()), schema_registry.url)
    rows = await read_json(bootstrap_servers, f"{name}.out")
    got = sorted((r["key"], r["value"]["amount"], r["value"]["paid"]) for r in rows)
    assert got == sorted((f"o{i}", o["amount"], i) for i, o in enumerate(data))
    letters = await read_topic(bootstrap_servers, f"{name}.dlq")
    assert [dict(r.headers)["clockwork.reason"] for r in letters] == [b"bad_magic"]


CUSTOMER: dict[str, Any] = {
    "type": "record",
    "name": "Customer",
    "namespace": "clockwork.test",
    "fields": [{"name": "name", "type": "string"}],
}


async def test_a_lookup_table_in_avro_joined_by_a_json_stream(
    bootstrap_servers: str, schema_registry: ApicurioRegistry
) -> None:
    """A lookup join's table decodes its registry format as a source does: customers in
    Avro through the registry (a tombstone deleting one, a record not in the wire format
    dead-lettered as such, named as the table's), orders in JSON."""
    name = unique("avro-lookup")
    await create_topic(bootstrap_servers, f"{name}.orders", 1)
    await create_topic(bootstrap_servers, f"{name}.customers", 1)
    (v1,) = await register(schema_registry.url, f"{name}.customers-value", CUSTOMER)
    table: list[Record] = [
        (0, f"c{i}".encode(), frame(v1, avro(CUSTOMER, {"name": f"name{i}"})), None)
        for i in range(4)
    ]
    table.append((0, b"c3", None, None))  # a tombstone: c3 is deleted
    table.append((0, b"c2", orjson.dumps({"name": "json"}), None))  # bad_magic
    await produce(bootstrap_servers, f"{name}.customers", table)
    orders = [{"customer": f"c{n % 5}", "ts": BASE_MS + n, "n": n} for n in range(10)]
    await produce(
        bootstrap_servers,
        f"{name}.orders",
        [(0, o["customer"].encode(), orjson.dumps(o), None) for o in orders],
    )
    spec = lookup_spec(name, bounded=True)
    spec["inputs"]["customers"]["source"]["format"] = "avro"
    definition = build_definition(validate_spec(spec, ()), ())
    await run_to_end(bootstrap_servers, definition, schema_registry.url)
    rows = await read_json(bootstrap_servers, f"{name}.out")
    names = {f"c{i}": f"name{i}" for i in range(3)}
    assert {r["value"]["n"]: r["value"]["who"] for r in rows} == {
        n: names.get(f"c{n % 5}") for n in range(10)
    }
    letters = [dict(r.headers) for r in await read_topic(bootstrap_servers, f"{name}.dlq")]
    assert [(h["clockwork.reason"], h["clockwork.input"]) for h in letters] == [
        (b"bad_magic", b"customers")
    ]


CUSTOMER_V2 = {
    **CUSTOMER,
    "fields": [*CUSTOMER["fields"], {"name": "tier", "type": "string", "default": "basic"}],
}


async def test_a_lookup_table_waits_out_an_unreachable_registry_and_loses_no_row(
    bootstrap_servers: str,
) -> None:
    """The table's records name a schema not fetched yet while the registry does not
    answer: the pipeline shows paused with the table and the reason, and asks again
    with backoff; once the registry answers, the row is in the table (no dead letter)
    and the orders after it meet it.

    A registry of its own, frozen rather than stopped (as in the source's outage test
    above: its storage is in memory)."""
    name = unique("avro-lookup-outage")
    await create_topic(bootstrap_servers, f"{name}.orders", 1)
    await create_topic(bootstrap_servers, f"{name}.customers", 1)
    with ApicurioRegistry() as registry:
        v1, v2 = await register(registry.url, f"{name}.customers-value", CUSTOMER, CUSTOMER_V2)
        first = frame(v1, avro(CUSTOMER, {"name": "Ann"}))
        await produce(bootstrap_servers, f"{name}.customers", [(0, b"c1", first, None)])
        spec = lookup_spec(name, bounded=False)
        spec["inputs"]["customers"]["source"]["format"] = "avro"
        definition = build_definition(validate_spec(spec, ()), ())
        settings = runtime_settings(
            bootstrap_servers,
            schema_registry=SchemaRegistrySettings(url=registry.url, timeout_s=0.5),
        )
        runtime = Runtime(settings)
        await runtime.start()
        try:
            runtime.start_pipeline(definition)
            runner = runtime.runner(name)

            async def table_at(updates: int) -> bool:
                table = runtime.status(name).lookup_table
                return table is not None and table.loaded and table.updates >= updates

            await wait_until(lambda: table_at(1), timeout_s=60)
            await runner.wait_for_state(PipelineState.RUNNING, timeout_s=30)
            registry.freeze()
            try:
                second = frame(v2, avro(CUSTOMER_V2, {"name": "Bea", "tier": "gold"}))
                await produce(bootstrap_servers, f"{name}.customers", [(0, b"c2", second, None)])
                await runner.wait_for_state(PipelineState.PAUSED, timeout_s=30)
                reason = runner.reason or ""
                assert "schema registry" in reason and "lookup table 'customers'" in reason
            finally:
                registry.thaw()
            await wait_until(lambda: table_at(2), timeout_s=60)
            await runner.wait_for_state(PipelineState.RUNNING, timeout_s=30)
            orders = [
                {"customer": c, "ts": BASE_MS + n, "n": n} for n, c in enumerate(["c1", "c2"])
            ]
            await produce(
                bootstrap_servers,
                f"{name}.orders",
                [(0, o["customer"].encode(), orjson.dumps(o), None) for o in orders],
            )

            async def joined() -> bool:
                return len(await read_json(bootstrap_servers, f"{name}.out")) >= 2

            await wait_until(joined, timeout_s=60)
        finally:
            await runtime.shutdown()
    rows = await read_json(bootstrap_servers, f"{name}.out")
    assert {r["value"]["n"]: r["value"]["who"] for r in rows} == {0: "Ann", 1: "Bea"}
    assert await read_topic(bootstrap_servers, f"{name}.dlq") == []
