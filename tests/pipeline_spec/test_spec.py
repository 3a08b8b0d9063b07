"""The pipeline spec's validation: one test per rule, each asserting the exact JSON path,
and every problem of a spec reported together."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from examples.udf.quiet import CountUntilQuiet
from service.core.time import ManualClock
from service.operators.process import KeyedProcessOperator
from service.pipeline_spec.build import build_definition
from service.pipeline_spec.models import PipelineSpec, validate_spec

ALLOWED = ("examples",)


def base() -> dict[str, Any]:
    """The contract's example spec: valid."""
    return {
        "name": "revenue-per-user",
        "source": {
            "topics": ["purchases"],
            "format": "json",
            "start_from": "earliest",
            "bounded": False,
        },
        "key": {"field": "user"},
        "timestamp": {"field": "ts", "format": "epoch_millis"},
        "watermark": {
            "strategy": "bounded_out_of_orderness",
            "max_out_of_orderness_ms": 2000,
            "interval_ms": 200,
            "idle_timeout_ms": 30000,
        },
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 60000},
            "time": "event",
            "allowed_lateness_ms": 0,
            "trigger": {"type": "event_time"},
            "aggregations": {
                "orders": {"fn": "count"},
                "revenue": {"fn": "sum", "field": "amount"},
            },
        },
        "sink": {
            "topic": "revenue-per-user",
            "late_topic": "revenue-per-user.late",
            "dead_letter_topic": "revenue-per-user.dlq",
        },
    }


def process(function: str = "dedupe", params: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = base()
    spec["operator"] = {
        "type": "keyed_process",
        "function": function,
        "params": {"ttl_ms": 1000} if params is None else params,
    }
    del spec["sink"]["late_topic"]
    return spec


def problems(spec: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(ValidationError) as info:
        validate_spec(spec, ALLOWED)
    return [(tuple(e["loc"]), e["type"]) for e in info.value.errors()]


def locs(spec: dict[str, Any]) -> list[tuple[str | int, ...]]:
    return [loc for loc, _ in problems(spec)]


def test_the_contract_example_is_valid_and_round_trips() -> None:
    spec = validate_spec(base(), ALLOWED)
    assert spec.to_json() == base()


def test_defaults_fill_what_is_left_out() -> None:
    spec = validate_spec(
        {
            "name": "p",
            "source": {"topics": ["in"]},
            "operator": {"type": "keyed_process", "function": "dedupe", "params": {"ttl_ms": 5}},
            "sink": {"topic": "out"},
        },
        (),
    )
    assert spec.timestamp.source == "kafka"
    assert spec.watermark.interval_ms == 200
    assert spec.watermark.idle_advance is False
    assert spec.key is None


def test_unknown_fields_are_refused_at_every_level() -> None:
    spec = base()
    spec["colour"] = "red"
    spec["operator"]["assigner"]["slide_ms"] = 10
    spec["sink"]["extra"] = 1
    assert sorted(problems(spec)) == sorted(
        [
            (("colour",), "extra_forbidden"),
            (("operator", "assigner", "slide_ms"), "extra_forbidden"),
            (("sink", "extra"), "extra_forbidden"),
        ]
    )


@pytest.mark.parametrize("name", ["", "Upper", "with space", "x" * 65, "a/b"])
def test_bad_names(name: str) -> None:
    spec = base()
    spec["name"] = name
    assert problems(spec) == [(("name",), "string_pattern_mismatch")]


@pytest.mark.parametrize("name", ["a", "a.b_c-d", "0" * 64])
def test_good_names(name: str) -> None:
    spec = base()
    spec["name"] = name
    validate_spec(spec, ALLOWED)


@pytest.mark.parametrize(
    ("assigner", "loc"),
    [
        ({"type": "tumbling", "size_ms": 0}, ("operator", "assigner", "size_ms")),
        ({"type": "sliding", "size_ms": 10, "slide_ms": -1}, ("operator", "assigner", "slide_ms")),
        ({"type": "session", "gap_ms": 0}, ("operator", "assigner", "gap_ms")),
    ],
)
def test_sizes_slides_and_gaps_must_be_positive(assigner: dict[str, Any], loc: tuple[str]) -> None:
    spec = base()
    spec["operator"]["assigner"] = assigner
    assert problems(spec) == [(loc, "greater_than")]


def test_slide_greater_than_size() -> None:
    spec = base()
    spec["operator"]["assigner"] = {"type": "sliding", "size_ms": 10, "slide_ms": 20}
    assert problems(spec) == [(("operator", "assigner", "slide_ms"), "slide_greater_than_size")]


def test_offset_must_be_smaller_than_the_period() -> None:
    spec = base()
    spec["operator"]["assigner"] = {"type": "tumbling", "size_ms": 10, "offset_ms": -10}
    assert problems(spec) == [(("operator", "assigner", "offset_ms"), "offset_out_of_range")]


def test_unknown_assigner_type_is_reported_at_the_assigner() -> None:
    spec = base()
    spec["operator"]["assigner"] = {"type": "hopping", "size_ms": 10}
    assert problems(spec) == [(("operator", "assigner"), "union_tag_invalid")]


def test_evictor_with_incremental_aggregations() -> None:
    spec = base()
    spec["operator"]["evictor"] = {"type": "count", "max_count": 5}
    assert problems(spec) == [(("operator", "evictor"), "evictor_needs_elements")]


def test_evictor_with_a_window_function_is_fine() -> None:
    spec = base()
    del spec["operator"]["aggregations"]
    spec["operator"]["function"] = "examples.windows:top_three"
    spec["operator"]["evictor"] = {"type": "time", "keep_ms": 1000, "after": True}
    validate_spec(spec, ALLOWED)


def test_aggregations_or_function_one_of_them() -> None:
    neither = base()
    del neither["operator"]["aggregations"]
    assert problems(neither) == [(("operator",), "window_function_missing")]
    both = base()
    both["operator"]["function"] = "examples.windows:top_three"
    assert problems(both) == [(("operator", "function"), "window_function_ambiguous")]


def test_event_time_trigger_on_processing_time_windows() -> None:
    spec = base()
    spec["operator"]["time"] = "processing"
    del spec["sink"]["late_topic"]
    assert problems(spec) == [(("operator", "trigger", "type"), "trigger_domain_mismatch")]


def test_processing_time_trigger_on_event_time_windows() -> None:
    spec = base()
    spec["operator"]["trigger"] = {"type": "processing_time"}
    assert problems(spec) == [(("operator", "trigger", "type"), "trigger_domain_mismatch")]


@pytest.mark.parametrize("time", ["event", "processing"])
def test_continuous_and_count_triggers_fit_both_domains(time: str) -> None:
    for trigger in ({"type": "continuous", "interval_ms": 100}, {"type": "count", "count": 3}):
        spec = base()
        spec["operator"]["time"] = time
        spec["operator"]["trigger"] = trigger
        if time == "processing":
            del spec["sink"]["late_topic"]
        validate_spec(spec, ALLOWED)


def test_count_trigger_needs_its_count() -> None:
    spec = base()
    spec["operator"]["trigger"] = {"type": "count"}
    assert problems(spec) == [(("operator", "trigger", "count"), "missing")]


def test_global_window_needs_a_trigger_that_fires() -> None:
    spec = base()
    spec["operator"]["assigner"] = {"type": "global"}
    assert problems(spec) == [(("operator", "trigger"), "global_window_never_fires")]
    del spec["operator"]["trigger"]
    assert problems(spec) == [(("operator", "trigger"), "global_window_never_fires")]
    spec["operator"]["trigger"] = {"type": "count", "count": 10, "purge": True}
    validate_spec(spec, ALLOWED)


def test_lateness_on_processing_time_windows() -> None:
    spec = base()
    spec["operator"]["time"] = "processing"
    spec["operator"]["trigger"] = {"type": "processing_time"}
    spec["operator"]["allowed_lateness_ms"] = 500
    del spec["sink"]["late_topic"]
    assert problems(spec) == [(("operator", "allowed_lateness_ms"), "lateness_in_processing_time")]


def test_count_takes_no_field() -> None:
    spec = base()
    spec["operator"]["aggregations"]["orders"]["field"] = "amount"
    assert problems(spec) == [
        (("operator", "aggregations", "orders", "field"), "aggregation_field_unused")
    ]


@pytest.mark.parametrize(
    "fn", ["sum", "min", "max", "avg", "first", "last", "count_distinct", "collect"]
)
def test_aggregations_other_than_count_need_a_field(fn: str) -> None:
    spec = base()
    spec["operator"]["aggregations"]["x"] = {"fn": fn}
    assert problems(spec) == [(("operator", "aggregations", "x", "field"), "missing")]


def test_unknown_aggregate_function() -> None:
    spec = base()
    spec["operator"]["aggregations"]["x"] = {"fn": "median", "field": "a"}
    assert problems(spec) == [(("operator", "aggregations", "x", "fn"), "literal_error")]


def test_window_function_outside_the_allowed_modules() -> None:
    spec = base()
    del spec["operator"]["aggregations"]
    spec["operator"]["function"] = "os:system"
    assert problems(spec) == [(("operator", "function"), "function_not_allowed")]


def test_malformed_function_reference() -> None:
    spec = base()
    del spec["operator"]["aggregations"]
    spec["operator"]["function"] = "examples.windows"
    assert problems(spec) == [(("operator", "function"), "function_ref_invalid")]


def test_process_function_outside_the_allowed_modules() -> None:
    assert problems(process("evil.module:Fn", {})) == [
        (("operator", "function"), "function_not_allowed")
    ]


def test_unknown_builtin_process_function() -> None:
    assert problems(process("dedup", {})) == [(("operator", "function"), "unknown_function")]


def test_builtin_params_are_checked_by_the_builtin() -> None:
    spec = process("dedupe", {"ttl_ms": 0, "fields": [1], "colour": "red"})
    assert sorted(problems(spec)) == sorted(
        [
            (("operator", "params", "colour"), "invalid_param"),
            (("operator", "params", "ttl_ms"), "invalid_param"),
            (("operator", "params", "fields", 0), "invalid_param"),
        ]
    )


def test_builtin_missing_required_param() -> None:
    assert problems(process("inactivity_timeout", {})) == [
        (("operator", "params", "timeout_ms"), "invalid_param")
    ]


def test_sink_topic_equal_to_a_source_topic() -> None:
    spec = base()
    spec["sink"]["late_topic"] = "purchases"
    assert problems(spec) == [(("sink", "late_topic"), "sink_is_source")]


def test_sink_topics_equal_to_each_other() -> None:
    spec = base()
    spec["sink"]["dead_letter_topic"] = "revenue-per-user"
    assert problems(spec) == [(("sink", "dead_letter_topic"), "sink_topics_not_distinct")]


def test_sink_topics_in_the_service_namespace() -> None:
    spec = base()
    spec["sink"]["topic"] = "clockwork.pipelines"
    assert problems(spec) == [(("sink", "topic"), "reserved_topic")]


def test_duplicate_source_topics() -> None:
    spec = base()
    spec["source"]["topics"] = ["purchases", "purchases"]
    assert problems(spec) == [(("source", "topics", 1), "duplicate_topic")]


def test_late_topic_without_event_time_windows() -> None:
    spec = process()
    spec["sink"]["late_topic"] = "late"
    assert problems(spec) == [(("sink", "late_topic"), "late_topic_unused")]


def test_negative_interval() -> None:
    spec = base()
    spec["watermark"]["interval_ms"] = -1
    assert problems(spec) == [(("watermark", "interval_ms"), "greater_than_equal")]


def test_punctuated_watermark_needs_its_field() -> None:
    spec = base()
    spec["watermark"] = {"strategy": "punctuated"}
    assert problems(spec) == [(("watermark", "field"), "missing")]
    spec["watermark"]["field"] = "wm"
    validate_spec(spec, ALLOWED)


def test_watermark_field_only_for_punctuated() -> None:
    spec = base()
    spec["watermark"]["field"] = "wm"
    assert problems(spec) == [(("watermark", "field"), "watermark_field_unused")]


def test_ascending_has_no_bound() -> None:
    spec = base()
    spec["watermark"]["strategy"] = "ascending"
    assert problems(spec) == [
        (("watermark", "max_out_of_orderness_ms"), "watermark_bound_with_ascending")
    ]


def test_idle_advance_needs_an_idle_timeout() -> None:
    spec = base()
    del spec["watermark"]["idle_timeout_ms"]
    spec["watermark"]["idle_advance"] = True
    assert problems(spec) == [(("watermark", "idle_advance"), "idle_advance_without_timeout")]


def test_timestamp_field_or_kafka() -> None:
    spec = base()
    spec["timestamp"] = {"format": "iso8601"}
    assert problems(spec) == [(("timestamp", "field"), "missing")]
    spec["timestamp"] = {"source": "kafka", "field": "ts"}
    assert problems(spec) == [(("timestamp", "field"), "timestamp_field_with_kafka")]


def test_types_are_strict() -> None:
    spec = base()
    spec["operator"]["assigner"]["size_ms"] = "60000"
    spec["source"]["bounded"] = "yes"
    assert sorted(problems(spec)) == sorted(
        [
            (("operator", "assigner", "size_ms"), "int_type"),
            (("source", "bounded"), "bool_type"),
        ]
    )


def test_four_problems_in_different_places_are_all_reported() -> None:
    spec = base()
    spec["name"] = "Not Valid"
    spec["operator"]["assigner"] = {"type": "sliding", "size_ms": 1000, "slide_ms": 5000}
    spec["operator"]["allowed_lateness_ms"] = -1
    spec["sink"]["topic"] = "purchases"
    assert sorted(problems(spec)) == sorted(
        [
            (("name",), "string_pattern_mismatch"),
            (("operator", "allowed_lateness_ms"), "greater_than_equal"),
            (("operator", "assigner", "slide_ms"), "slide_greater_than_size"),
            (("sink", "topic"), "sink_is_source"),
        ]
    )


def test_model_validate_without_context_allows_no_user_functions() -> None:
    spec = base()
    del spec["operator"]["aggregations"]
    spec["operator"]["function"] = "examples.windows:top_three"
    with pytest.raises(ValidationError):
        PipelineSpec.model_validate(copy.deepcopy(spec))
    PipelineSpec.model_validate(spec, context={"allowed_modules": ALLOWED})


def test_json_schema_describes_the_operators() -> None:
    schema = PipelineSpec.model_json_schema()
    assert schema["additionalProperties"] is False
    assert {"WindowOperator", "KeyedProcessOperator", "SlidingAssigner"} <= schema["$defs"].keys()


def test_every_example_in_the_docs_is_valid() -> None:
    import json
    import re
    from pathlib import Path

    text = Path("docs/pipeline-spec.md").read_text(encoding="utf-8")
    examples = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.S)]
    assert len(examples) >= 7
    for example in examples:
        validate_spec(example, ALLOWED)


def test_the_user_function_guide_pipeline_is_valid_and_builds() -> None:
    import json
    import re
    from pathlib import Path

    text = Path("docs/user-functions.md").read_text(encoding="utf-8")
    (example,) = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.S)]
    spec = validate_spec(example, ["examples"])
    operator = build_definition(spec, ["examples"]).operator_factory(ManualClock(0))
    assert isinstance(operator, KeyedProcessOperator)
    assert isinstance(operator.function, CountUntilQuiet)
    assert operator.function.quiet_ms == 600_000


def test_delivery_defaults_to_at_least_once() -> None:
    assert validate_spec(base(), ALLOWED).delivery == "at_least_once"


def test_exactly_once_on_one_source_topic_is_valid() -> None:
    spec = base()
    spec["delivery"] = "exactly_once"
    assert validate_spec(spec, ALLOWED).delivery == "exactly_once"


def test_exactly_once_over_two_source_topics_is_valid() -> None:
    """Each input partition has a transactional producer of its own, whatever its topic."""
    spec = base()
    spec["delivery"] = "exactly_once"
    spec["source"]["topics"] = ["purchases", "refunds"]
    assert validate_spec(spec, ALLOWED).delivery == "exactly_once"


def test_unknown_delivery_guarantee() -> None:
    spec = base()
    spec["delivery"] = "at_most_once"
    assert problems(spec) == [(("delivery",), "literal_error")]
