"""Every refusal of a spec is one 422 (issue 49): a format that needs the schema registry
on a service without one is a rule's (told by the registry whether the service has one),
so it comes with every other problem of the spec, at its place, for a JSON spec and for
its SQL twin alike; a spec in the store is not held to it again."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from service.api.registry import PipelineRegistry, SpecInvalid
from service.runtime.settings import SchemaRegistrySettings
from service.settings import Settings

NO_REGISTRY = "this format needs a schema registry, and the service has none"

SPEC: dict[str, Any] = {
    "name": "revenue",
    "source": {"topics": ["orders"], "format": "protobuf"},
    "timestamp": {"field": "ts"},
    "operator": {
        "type": "window",
        "assigner": {"type": "sliding", "size_ms": 60_000, "slide_ms": 120_000},
        "aggregations": {"revenue": {"fn": "sum", "field": "amount"}},
    },
    "sink": {"topic": "revenue", "format": "avro"},
}
"""Three problems on a service without a registry: its source's format and its sink's
(found after the build, apart, before issue 49) and the slide above the size."""

SCRIPT = """CREATE SOURCE orders (
  "user" VARCHAR, amount DOUBLE, ts BIGINT, WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (topic = 'orders', format = 'protobuf');
CREATE SINK revenue WITH (topic = 'revenue', format = 'avro');
INSERT INTO revenue
SELECT "user", window_start, window_end, SUM(amount) AS revenue
FROM HOP(orders, ts, INTERVAL '2' MINUTE, INTERVAL '1' MINUTE)
GROUP BY "user", window_start, window_end;
"""
"""The same pipeline in SQL, with the same three problems."""


def registry(with_schema_registry: bool = False) -> PipelineRegistry:
    registry = PipelineRegistry.__new__(PipelineRegistry)
    registry._settings = Settings(
        udf_modules=(),
        schema_registry=SchemaRegistrySettings("http://registry:8081")
        if with_schema_registry
        else None,
    )
    return registry


def refusal(body: Any, with_schema_registry: bool = False) -> list[dict[str, Any]]:
    with pytest.raises(SpecInvalid) as caught:
        registry(with_schema_registry).parse_body(body)
    return caught.value.errors


def test_a_format_needing_a_registry_comes_with_the_specs_other_problems() -> None:
    assert [(e["loc"], e["type"]) for e in refusal(SPEC)] == [
        (["source", "format"], "schema_registry_unconfigured"),
        (["operator", "assigner", "slide_ms"], "slide_greater_than_size"),
        (["sink", "format"], "schema_registry_unconfigured"),
    ]
    assert all(NO_REGISTRY in e["msg"] for e in refusal(SPEC)[::2])


def test_a_join_inputs_format_needing_a_registry_is_refused_at_the_input() -> None:
    spec = {
        "name": "paid",
        "inputs": {
            "orders": {"source": {"topics": ["orders"]}},
            "payments": {"source": {"topics": ["payments"], "format": "json_schema"}},
        },
        "operator": {"type": "join", "kind": "regular", "left": "orders", "right": "payments"},
        "sink": {"topic": "paid"},
    }
    assert [(e["loc"], e["type"], e["input"]) for e in refusal(spec)] == [
        (["inputs", "payments", "source", "format"], "schema_registry_unconfigured", "json_schema")
    ]


def test_the_sql_twin_names_the_same_problems_at_its_statements() -> None:
    found = refusal({"name": "revenue", "sql": SCRIPT})
    assert [(e["spec_loc"], e["type"], e["statement"]) for e in found] == [
        (["source", "format"], "schema_registry_unconfigured", 1),
        (["sink", "format"], "schema_registry_unconfigured", 2),
        (["operator", "assigner", "slide_ms"], "slide_greater_than_size", 3),
    ]
    source_format = SCRIPT.index("'protobuf'")  # at the WITH option, as the rule's field
    assert (found[0]["line"], found[0]["column"]) == (
        SCRIPT.count("\n", 0, source_format) + 1,
        source_format - SCRIPT.rfind("\n", 0, source_format),
    )
    json_messages = {tuple(e["loc"]): e["msg"] for e in refusal(SPEC)}
    for entry in found:
        assert entry["msg"].startswith(json_messages[tuple(entry["spec_loc"])])


def test_a_service_with_a_registry_refuses_only_the_rest() -> None:
    assert [e["type"] for e in refusal(SPEC, with_schema_registry=True)] == [
        "slide_greater_than_size"
    ]
    spec = copy.deepcopy(SPEC)
    spec["operator"]["assigner"]["slide_ms"] = 30_000
    registry(with_schema_registry=True).parse_body(spec)


def test_raw_avro_and_json_need_no_registry() -> None:
    spec = copy.deepcopy(SPEC)
    spec["operator"]["assigner"]["slide_ms"] = 30_000
    spec["sink"]["format"] = "json"
    spec["source"] = {
        "topics": ["orders"],
        "format": "avro",
        "avro_schema": {"type": "record", "name": "o", "fields": [{"name": "ts", "type": "long"}]},
    }
    registry().parse_body(spec)


def test_a_stored_spec_is_not_held_to_the_registry_again() -> None:
    """A replica builds what the store holds (``parse``): the spec was held to the
    service's settings when it was written."""
    spec = copy.deepcopy(SPEC)
    spec["operator"]["assigner"]["slide_ms"] = 30_000
    _, definition = registry().parse(spec)
    assert definition.sink.format == "avro"


async def test_a_replacement_under_another_name_names_that_with_the_specs_problems() -> None:
    """The path's name against the body's is the request's, not a rule's (no rule knows
    the path); it comes in the same 422 all the same, first (the name is the spec's
    first field)."""
    with pytest.raises(SpecInvalid) as caught:
        await registry().replace("sales", SPEC, reset_state=False)
    assert [(e["loc"], e["type"]) for e in caught.value.errors] == [
        (["name"], "name_mismatch"),
        (["source", "format"], "schema_registry_unconfigured"),
        (["operator", "assigner", "slide_ms"], "slide_greater_than_size"),
        (["sink", "format"], "schema_registry_unconfigured"),
    ]
    with pytest.raises(SpecInvalid) as caught:
        await registry().replace("sales", {"name": "revenue", "sql": SCRIPT}, reset_state=False)
    assert [e["type"] for e in caught.value.errors] == [
        "name_mismatch",
        "schema_registry_unconfigured",
        "schema_registry_unconfigured",
        "slide_greater_than_size",
    ]
