"""The running aggregate in the spec (``"type": "aggregate"``): its 422s, each problem at
its place, and what it builds into."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from service.core.time import MAX_TIMESTAMP, ManualClock
from service.operators.table import RunningAggregateOperator, TableAggregateOperator
from service.pipeline_spec.build import build_definition, state_fingerprint
from service.pipeline_spec.models import validate_spec
from service.pipeline_spec.schema import pipeline_schema

ALLOWED = ("examples",)


def spec(**operator: Any) -> dict[str, Any]:
    return {
        "name": "totals",
        "source": {"topics": ["purchases"], "bounded": True},
        "key": {"field": "user"},
        "timestamp": {"field": "ts"},
        "operator": {
            "type": "aggregate",
            "aggregations": {
                "orders": {"fn": "count"},
                "revenue": {"fn": "sum", "field": "amount"},
            },
            **operator,
        },
        "sink": {"topic": "totals"},
    }


def problems(data: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(ValidationError) as info:
        validate_spec(data, ALLOWED)
    return [(tuple(e["loc"]), e["type"]) for e in info.value.errors()]


def test_a_running_aggregate_is_valid_with_its_defaults() -> None:
    validated = validate_spec(spec(), ALLOWED)
    assert validated.operator.type == "aggregate"
    assert validated.operator.emit_interval_ms == 1000  # type: ignore[union-attr]
    assert validated.operator.state_ttl_ms is None  # type: ignore[union-attr]
    assert validated.to_json() == spec()


def test_every_problem_is_reported_at_its_place() -> None:
    data = spec(emit_interval_ms=0, state_ttl_ms=-5, window={"x": 1})
    data["operator"]["aggregations"]["bad"] = {"fn": "sum"}
    data["operator"]["aggregations"]["n"] = {"fn": "count", "field": "x"}
    data["sink"]["late_topic"] = "late"
    found = problems(data)
    assert (("operator", "emit_interval_ms"), "greater_than") in found
    assert (("operator", "state_ttl_ms"), "greater_than") in found
    assert (("operator", "window"), "extra_forbidden") in found
    assert (("operator", "aggregations", "bad", "field"), "missing") in found
    assert (("operator", "aggregations", "n", "field"), "aggregation_field_unused") in found
    assert (("sink", "late_topic"), "late_topic_unused") in found


def test_aggregations_are_required_and_never_empty() -> None:
    data = spec()
    del data["operator"]["aggregations"]
    assert problems(data) == [(("operator", "aggregations"), "missing")]
    data["operator"]["aggregations"] = {}
    assert problems(data) == [(("operator", "aggregations"), "too_short")]


def test_a_state_ttl_below_the_emit_interval_is_refused() -> None:
    assert problems(spec(emit_interval_ms=5000, state_ttl_ms=1000)) == [
        (("operator", "state_ttl_ms"), "state_ttl_below_emit_interval")
    ]
    validate_spec(spec(emit_interval_ms=1000, state_ttl_ms=60_000), ALLOWED)


def test_a_sink_format_with_a_schema_is_refused() -> None:
    data = spec()
    data["sink"]["format"] = "avro"
    assert problems(data) == [(("sink", "format"), "sink_format_needs_aggregations")]


def test_the_served_schema_has_the_operator() -> None:
    schema = pipeline_schema(ALLOWED)
    assert "AggregateOperator" in schema["$defs"]
    properties = schema["$defs"]["AggregateOperator"]["properties"]
    assert {"aggregations", "emit_interval_ms", "state_ttl_ms"} <= properties.keys()


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_it_builds_a_running_aggregate_that_emits_at_checkpoints_under_exactly_once(
    delivery: str,
) -> None:
    data = spec(emit_interval_ms=250, state_ttl_ms=60_000)
    data["delivery"] = delivery
    definition = build_definition(validate_spec(data, ALLOWED), ALLOWED)
    operator = definition.operator_factory(ManualClock(0))
    assert isinstance(operator, RunningAggregateOperator)
    operator.process_batch([("u1", 1, {"amount": 2}, 0, None)])
    assert operator.next_processing_time() == 250
    operator.before_checkpoint()
    emitted = operator.collector.results
    assert len(emitted) == (1 if delivery == "exactly_once" else 0)
    assert definition.shuffle is not None  # keyed by a payload field: shuffled


def test_the_emit_interval_and_ttl_keep_the_state() -> None:
    before = validate_spec(spec(), ALLOWED)
    changed = copy.deepcopy(spec(emit_interval_ms=5000, state_ttl_ms=60_000))
    assert state_fingerprint(validate_spec(changed, ALLOWED)) == state_fingerprint(before)
    other = spec()
    other["operator"]["aggregations"]["top"] = {"fn": "max", "field": "amount"}
    assert state_fingerprint(validate_spec(other, ALLOWED)) != state_fingerprint(before)


# -- over a table source (changelog "upsert") -------------------------------------------


def table_spec(**operator: Any) -> dict[str, Any]:
    data = spec(**operator)
    data["source"]["changelog"] = "upsert"
    return data


def test_over_a_table_it_builds_the_table_aggregate_behind_the_retraction_shuffle() -> None:
    definition = build_definition(validate_spec(table_spec(), ALLOWED), ALLOWED)
    assert definition.table and definition.shuffle is not None
    operator = definition.operator_factory(ManualClock(0))
    assert isinstance(operator, TableAggregateOperator)
    # keyed by primary key, grouped by the key field: o1 moves from u1 to u2
    operator.process_batch([("o1", 1, {"user": "u1", "amount": 2}, 0, None)])
    operator.process_batch([("o1", 2, {"user": "u2", "amount": 3}, 1, None)])
    operator.advance_watermark(MAX_TIMESTAMP)
    results = {u.key: u.result for u in operator.collector.results}  # type: ignore[union-attr]
    assert results == {"u2": {"orders": 1, "revenue": 3}}  # u1 never emitted: no tombstone


def test_over_a_table_keyed_by_the_kafka_key_nothing_is_shuffled() -> None:
    data = table_spec()
    del data["key"]
    definition = build_definition(validate_spec(data, ALLOWED), ALLOWED)
    assert definition.table and definition.shuffle is None


def test_aggregations_that_cannot_retract_are_refused_at_their_place() -> None:
    data = table_spec()
    data["operator"]["aggregations"]["latest"] = {"fn": "last", "field": "amount"}
    data["steps"] = [{"unnest": "items", "as": "item"}]
    data["key"]["partitioned"] = True
    assert problems(data) == [
        (("key", "partitioned"), "table_partitioned_by_group"),
        (("steps", 0), "table_step_drops_rows"),
        (("operator", "aggregations", "latest", "fn"), "aggregation_cannot_retract"),
    ]


def test_only_a_running_aggregate_reads_a_table() -> None:
    data = table_spec()
    data["operator"] = {"type": "keyed_process", "function": "dedupe", "params": {"ttl_ms": 5}}
    assert (("source", "changelog"), "table_needs_running_aggregate") in problems(data)


def test_the_changelog_changes_the_state() -> None:
    before = validate_spec(spec(), ALLOWED)
    assert state_fingerprint(validate_spec(table_spec(), ALLOWED)) != state_fingerprint(before)
