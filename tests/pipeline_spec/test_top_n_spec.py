"""Top-N in the spec (``"type": "top_n"``): its 422s, each problem at its place, the
schema, and what it builds into."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from service.core.time import MAX_TIMESTAMP, ManualClock
from service.operators.table import TopNOperator
from service.pipeline_spec.build import build_definition, state_fingerprint
from service.pipeline_spec.models import validate_spec
from service.pipeline_spec.schema import pipeline_schema

ALLOWED = ("examples",)


def spec(**operator: Any) -> dict[str, Any]:
    return {
        "name": "top-products",
        "source": {"topics": ["sales"], "bounded": True},
        "key": {"field": "category"},
        "timestamp": {"field": "ts"},
        "operator": {
            "type": "top_n",
            "order_by": {"field": "revenue", "desc": True},
            "n": 3,
            **operator,
        },
        "sink": {"topic": "top-products"},
    }


def problems(data: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(ValidationError) as info:
        validate_spec(data, ALLOWED)
    return [(tuple(e["loc"]), e["type"]) for e in info.value.errors()]


def test_a_top_n_is_valid_with_its_defaults() -> None:
    validated = validate_spec(spec(), ALLOWED)
    op = validated.operator
    assert op.type == "top_n"
    assert op.emit_interval_ms == 1000  # type: ignore[union-attr]
    assert op.row_key is None  # type: ignore[union-attr]
    assert validated.to_json() == spec()
    validate_spec(spec(row_key="product", order_by={"field": "a.b"}), ALLOWED)


def test_every_problem_is_reported_at_its_place() -> None:
    data = spec(n=0, emit_interval_ms=0, order_by={"field": "", "desc": "yes"}, extra=1)
    data["sink"]["late_topic"] = "late"
    found = problems(data)
    assert (("operator", "n"), "greater_than_equal") in found
    assert (("operator", "emit_interval_ms"), "greater_than") in found
    assert (("operator", "order_by", "field"), "string_too_short") in found
    assert (("operator", "order_by", "desc"), "bool_type") in found
    assert (("operator", "extra"), "extra_forbidden") in found
    assert (("sink", "late_topic"), "late_topic_unused") in found
    assert problems(spec(n=10_001)) == [(("operator", "n"), "less_than_equal")]
    data = spec()
    del data["operator"]["order_by"]
    assert problems(data) == [(("operator", "order_by"), "missing")]


def test_a_row_key_that_is_the_pipeline_key_is_refused() -> None:
    assert problems(spec(row_key="category")) == [(("operator", "row_key"), "row_key_is_the_key")]


def test_a_sink_format_with_a_schema_is_refused() -> None:
    data = spec()
    data["sink"]["format"] = "avro"
    assert problems(data) == [(("sink", "format"), "sink_format_needs_aggregations")]


def test_the_served_schema_has_the_operator() -> None:
    schema = pipeline_schema(ALLOWED)
    properties = schema["$defs"]["TopNOperator"]["properties"]
    assert {"order_by", "n", "row_key", "emit_interval_ms"} <= properties.keys()
    assert "TopNOrder" in schema["$defs"]


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_it_builds_a_top_n_that_emits_at_checkpoints_under_exactly_once(delivery: str) -> None:
    data = spec(emit_interval_ms=250, row_key="product")
    data["delivery"] = delivery
    definition = build_definition(validate_spec(data, ALLOWED), ALLOWED)
    operator = definition.operator_factory(ManualClock(0))
    assert isinstance(operator, TopNOperator)
    operator.process_batch([("books", 1, {"revenue": 2, "product": "p1"}, 0, None)])
    assert operator.next_processing_time() == (None if delivery == "exactly_once" else 250)
    operator.before_checkpoint()
    assert len(operator.collector.results) == (1 if delivery == "exactly_once" else 0)
    assert definition.shuffle is not None  # keyed by a payload field: shuffled


def test_the_emit_interval_keeps_the_state_and_the_ranking_does_not() -> None:
    before = state_fingerprint(validate_spec(spec(), ALLOWED))
    assert state_fingerprint(validate_spec(spec(emit_interval_ms=5000), ALLOWED)) == before
    for change in (
        {"n": 4},
        {"row_key": "product"},
        {"order_by": {"field": "revenue", "desc": False}},
    ):
        assert state_fingerprint(validate_spec(spec(**change), ALLOWED)) != before


def test_over_a_table_it_builds_the_table_top_n_behind_the_retraction_shuffle() -> None:
    data = spec()
    data["source"]["changelog"] = "upsert"
    definition = build_definition(validate_spec(data, ALLOWED), ALLOWED)
    assert definition.table and definition.shuffle is not None
    operator = definition.operator_factory(ManualClock(0))
    assert isinstance(operator, TopNOperator)
    # keyed by primary key, partitioned by category: p1 moves from books to games
    operator.process_batch([("p1", 1, {"category": "books", "revenue": 2}, 0, None)])
    operator.process_batch([("p1", 2, {"category": "games", "revenue": 3}, 1, None)])
    operator.advance_watermark(MAX_TIMESTAMP)
    results = {u.key: u.result for u in operator.collector.results}  # type: ignore[union-attr]
    assert results == {
        "games|1": {"partition": "games", "rank": 1, "row": {"category": "games", "revenue": 3}}
    }  # books never emitted: no tombstone


def test_over_a_table_a_row_key_and_a_missing_key_are_refused_at_their_place() -> None:
    data = spec(row_key="product")
    data["source"]["changelog"] = "upsert"
    del data["key"]
    assert problems(data) == [
        (("operator", "row_key"), "table_top_n_row_key"),
        (("key",), "table_top_n_needs_key"),
    ]
