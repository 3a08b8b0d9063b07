"""``/schema/pipeline`` says what the service accepts: a spec the schema refuses, the
service refuses; a spec the schema accepts, the service accepts, unless one of the rules no
JSON Schema can state refuses it (docs/pipeline-spec.md, "What the schema says, and what
it cannot").

The schema is checked with jsonschema-rs, the validator schemathesis uses; the service's
verdict is the registry's own parse (validation plus building the operator)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.api.registry import PipelineRegistry, SpecInvalid
from service.operators.process.builtins import BUILTIN_FUNCTIONS
from service.pipeline_spec.rules import BUILTIN_PARAMS_SCHEMAS
from service.pipeline_spec.schema import pipeline_schema, replacement_schema
from service.settings import Settings

ALLOWED = ("examples",)

NO_SCHEMA_RULES = frozenset(
    {
        "unknown_input",
        "same_input",
        "lower_above_upper",
        "invalid_select",
        "invalid_where",
        "input_topics_overlap",
        "inputs_disagree",
        "lookup_table_bounded",
        "lookup_table_from_latest",
        "invalid_expression",
        "slide_greater_than_size",
        "offset_out_of_range",
        "sink_is_source",
        "sink_topics_not_distinct",
        "build_failed",
    }
)
"""Problem types of the rules JSON Schema cannot state (plus "missing" at
sink.dead_letter_topic: the default dead-letter topic is taken)."""


def _registry(allowed: tuple[str, ...]) -> PipelineRegistry:
    registry = PipelineRegistry.__new__(PipelineRegistry)
    registry._settings = Settings(udf_modules=allowed)
    return registry


def verdicts(
    spec: Any, allowed: tuple[str, ...] = ALLOWED
) -> tuple[bool, list[tuple[str, str]] | None]:
    """(the schema accepts it, the service's problems or None when it accepts it)."""
    schema_ok = jsonschema_rs.validator_for(pipeline_schema(allowed)).is_valid(spec)
    try:
        _registry(allowed).parse(copy.deepcopy(spec))
    except SpecInvalid as exc:
        return schema_ok, [(".".join(map(str, e["loc"])), e["type"]) for e in exc.errors]
    return schema_ok, None


def beyond_the_schema(problems: list[tuple[str, str]]) -> bool:
    return all(
        kind in NO_SCHEMA_RULES or (loc, kind) == ("sink.dead_letter_topic", "missing")
        for loc, kind in problems
    )


def agree(spec: Any, allowed: tuple[str, ...] = ALLOWED) -> None:
    schema_ok, problems = verdicts(spec, allowed)
    if not schema_ok:
        assert problems, f"the schema refuses a spec the service accepts: {json.dumps(spec)}"
    elif problems is not None:
        assert beyond_the_schema(problems), (
            f"the schema accepts a spec the service refuses for {problems}: {json.dumps(spec)}"
        )


def window(**operator: Any) -> dict[str, Any]:
    return {
        "name": "w",
        "source": {"topics": ["in"]},
        "timestamp": {"field": "ts"},
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 1000},
            "aggregations": {"n": {"fn": "count"}},
            **operator,
        },
        "sink": {"topic": "out", "late_topic": "out.late"},
    }


def process(function: str = "dedupe", **params: Any) -> dict[str, Any]:
    return {
        "name": "p",
        "source": {"topics": ["in"]},
        "operator": {"type": "keyed_process", "function": function, "params": params},
        "sink": {"topic": "out"},
    }


def edit(spec: dict[str, Any], change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    change(spec)
    return spec


# One case per rule the schema states: refused by both.
REFUSED_BY_BOTH: dict[str, dict[str, Any]] = {
    "window without a function": edit(window(), lambda s: s["operator"].pop("aggregations")),
    "window with both": window(function="examples.udf.quiet:CountUntilQuiet"),
    "evictor with aggregations": window(evictor={"type": "count", "max_count": 2}),
    "count with a field": window(aggregations={"n": {"fn": "count", "field": "x"}}),
    "sum without a field": window(aggregations={"s": {"fn": "sum"}}),
    "sum with a null field": window(aggregations={"s": {"fn": "sum", "field": None}}),
    "bad output name": window(aggregations={"a b": {"fn": "count"}}),
    "event trigger in processing time": edit(
        window(time="processing", trigger={"type": "event_time"}),
        lambda s: s["sink"].pop("late_topic"),
    ),
    "processing trigger in event time": window(trigger={"type": "processing_time"}),
    "lateness in processing time": edit(
        window(time="processing", allowed_lateness_ms=5), lambda s: s["sink"].pop("late_topic")
    ),
    "global window, default trigger": window(assigner={"type": "global"}),
    "global window, null trigger": window(assigner={"type": "global"}, trigger=None),
    "timestamp field with kafka": edit(
        window(), lambda s: s.update(timestamp={"source": "kafka", "field": "ts"})
    ),
    "timestamp format with kafka": edit(
        window(), lambda s: s.update(timestamp={"source": "kafka", "format": "iso8601"})
    ),
    "timestamp without field": edit(window(), lambda s: s.update(timestamp={})),
    "timestamp with a null field": edit(window(), lambda s: s.update(timestamp={"field": None})),
    "punctuated without field": edit(
        window(), lambda s: s.update(watermark={"strategy": "punctuated"})
    ),
    "field without punctuated": edit(window(), lambda s: s.update(watermark={"field": "wm"})),
    "ascending with a bound": edit(
        window(),
        lambda s: s.update(watermark={"strategy": "ascending", "max_out_of_orderness_ms": 5}),
    ),
    "strictly ascending with a bound": edit(
        window(),
        lambda s: s.update(
            watermark={"strategy": "strictly_ascending", "max_out_of_orderness_ms": 1}
        ),
    ),
    "punctuated with a bound": edit(
        window(),
        lambda s: s.update(
            watermark={"strategy": "punctuated", "field": "wm", "max_out_of_orderness_ms": 5}
        ),
    ),
    "idle_advance without timeout": edit(
        window(), lambda s: s.update(watermark={"idle_advance": True})
    ),
    "duplicate source topic": edit(window(), lambda s: s["source"].update(topics=["a", "a"])),
    "topic '.'": edit(window(), lambda s: s["source"].update(topics=["."])),
    "sink topic '..'": edit(window(), lambda s: s["sink"].update(topic="..")),
    "reserved sink topic": edit(window(), lambda s: s["sink"].update(topic="clockwork.x")),
    "default dead-letter topic too long": edit(
        window(), lambda s: s["sink"].update(topic="t" * 246)
    ),
    "late topic on keyed process": edit(
        process(ttl_ms=5), lambda s: s["sink"].update(late_topic="l")
    ),
    "late topic on processing time": edit(
        window(time="processing"), lambda s: s["sink"].update(late_topic="l")
    ),
    "shuffle partitions of a partitioned source": edit(
        window(),
        lambda s: s.update(key={"field": "u", "partitioned": True, "shuffle_partitions": 4}),
    ),
    "set of a field path with an empty part": edit(
        window(), lambda s: s.update(steps=[{"set": {"a..b": "1"}}])
    ),
    "unknown built-in": process("nope"),
    "module not allowed": process("os:system"),
    "dedupe without params": edit(process(), lambda s: s["operator"].pop("params")),
    "dedupe without ttl": process(time="event"),
    "dedupe unknown param": process(ttl_ms=5, color="red"),
    "dedupe time not a string": process(ttl_ms=5, time=[]),
    "dedupe empty fields": process(ttl_ms=5, fields=[]),
    "dedupe field with an empty part": process(ttl_ms=5, fields=["a..b"]),
    "offset beyond the largest duration": window(
        assigner={"type": "tumbling", "size_ms": 2**53, "offset_ms": 0}
    ),
    "daily counter offset": process("daily_reset_counter", utc_offset_minutes=841),
}

ACCEPTED_BY_BOTH: dict[str, dict[str, Any]] = {
    "tumbling with aggregations": window(),
    "keyed process user function": process("examples.udf.quiet:CountUntilQuiet", quiet_ms=5),
    "dedupe with fields": process(ttl_ms=5, fields=["a.b", "c"], time="processing"),
    "daily counter without params": edit(
        process("daily_reset_counter"), lambda s: s["operator"].pop("params")
    ),
    "global window with count trigger": window(
        assigner={"type": "global"}, trigger={"type": "count", "count": 3, "purge": True}
    ),
    "processing time, count trigger": edit(
        window(time="processing", trigger={"type": "count", "count": 3}),
        lambda s: s["sink"].pop("late_topic"),
    ),
    "punctuated": edit(
        window(), lambda s: s.update(watermark={"strategy": "punctuated", "field": "wm"})
    ),
    "kafka timestamp": edit(window(), lambda s: s.update(timestamp={"source": "kafka"})),
    "strictly ascending": edit(
        window(), lambda s: s.update(watermark={"strategy": "strictly_ascending"})
    ),
    "ascending with bound 0": edit(
        window(),
        lambda s: s.update(watermark={"strategy": "ascending", "max_out_of_orderness_ms": 0}),
    ),
    "idle_advance with timeout": edit(
        window(), lambda s: s.update(watermark={"idle_advance": True, "idle_timeout_ms": 10})
    ),
    "long topic with its own dead-letter topic": edit(
        window(), lambda s: s["sink"].update(topic="t" * 249, dead_letter_topic="d")
    ),
    "shuffled key with its partitions": edit(
        window(), lambda s: s.update(key={"field": "u", "shuffle_partitions": 4})
    ),
    "partitioned key": edit(window(), lambda s: s.update(key={"field": "u", "partitioned": True})),
    "nulls where optional": window(trigger=None, evictor=None, function=None),
}


@pytest.mark.parametrize("spec", REFUSED_BY_BOTH.values(), ids=REFUSED_BY_BOTH.keys())
def test_the_schema_states_the_rule(spec: dict[str, Any]) -> None:
    schema_ok, problems = verdicts(spec)
    assert problems, "the service accepts it"
    assert not schema_ok, f"the schema accepts what the service refuses for {problems}"


@pytest.mark.parametrize("spec", ACCEPTED_BY_BOTH.values(), ids=ACCEPTED_BY_BOTH.keys())
def test_the_schema_accepts_what_the_service_accepts(spec: dict[str, Any]) -> None:
    assert verdicts(spec) == (True, None)


def test_rules_no_schema_can_state_are_the_documented_ones() -> None:
    cases = {
        "slide_greater_than_size": window(
            assigner={"type": "sliding", "size_ms": 10, "slide_ms": 20}
        ),
        "offset_out_of_range": window(
            assigner={"type": "tumbling", "size_ms": 10, "offset_ms": 10}
        ),
        "sink_is_source": edit(window(), lambda s: s["sink"].update(topic="in")),
        "sink_topics_not_distinct": edit(window(), lambda s: s["sink"].update(late_topic="out")),
        "missing": edit(window(), lambda s: s["sink"].update(late_topic="out.dlq")),
        "build_failed": edit(
            window(function="examples.udf.nothing:here"),
            lambda s: s["operator"].pop("aggregations"),
        ),
    }
    for kind, spec in cases.items():
        schema_ok, problems = verdicts(spec)
        assert schema_ok, kind
        assert problems is not None
        assert [k for _, k in problems] == [kind]
        assert beyond_the_schema(problems)


def test_without_allowed_modules_no_function_reference_is_valid() -> None:
    for spec in (
        process("examples.udf.quiet:CountUntilQuiet", quiet_ms=5),
        edit(window(function="examples.udf.quiet:x"), lambda s: s["operator"].pop("aggregations")),
    ):
        schema_ok, problems = verdicts(spec, allowed=())
        assert not schema_ok
        assert problems


def test_a_replacement_may_leave_the_name_out() -> None:
    spec = pipeline_schema(ALLOWED)
    body = replacement_schema(spec)
    assert "name" not in body["required"]
    assert {"operator", "sink"} <= set(body["required"])  # and source or inputs (oneOf)
    unnamed = window()
    del unnamed["name"]
    validator = jsonschema_rs.validator_for({**body, "$defs": spec["$defs"]})
    assert validator.is_valid(unnamed)
    assert not validator.is_valid({**unnamed, "name": "Bad Name"})


def test_every_builtin_has_a_params_schema() -> None:
    assert set(BUILTIN_PARAMS_SCHEMAS) == set(BUILTIN_FUNCTIONS)


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1000, 1000),
    st.sampled_from([0, 1, -840, 840, 841, 2**53]),
    st.sampled_from(["", "a", "a.b", "a..b", ".a", "event", "processing", "x y"]),
    st.lists(st.sampled_from(["a", "b.c", "", "d..e", 3]), max_size=3),
    # Not 1.0: JSON Schema cannot tell it from 1, the service wants integers written as
    # such (documented with the rules no schema can state).
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(BUILTIN_FUNCTIONS)),
    params=st.dictionaries(
        st.sampled_from(["ttl_ms", "timeout_ms", "time", "fields", "utc_offset_minutes", "x"]),
        _VALUES,
        max_size=4,
    ),
)
def test_builtin_params_schemas_agree_with_validate_params(
    name: str, params: dict[str, Any]
) -> None:
    schema_ok = jsonschema_rs.validator_for(BUILTIN_PARAMS_SCHEMAS[name]).is_valid(params)
    assert schema_ok == (BUILTIN_FUNCTIONS[name].validate_params(params) == []), params


# -- random edits of valid specs: wherever they land, schema and service agree --------

BASES = [
    window(),
    window(
        assigner={"type": "sliding", "size_ms": 20, "slide_ms": 10, "offset_ms": 5},
        time="processing",
        trigger={"type": "continuous", "interval_ms": 5},
    ),
    edit(
        window(assigner={"type": "session", "gap_ms": 5}, function="examples.udf.quiet:X"),
        lambda s: s["operator"].pop("aggregations"),
    ),
    window(assigner={"type": "global"}, trigger={"type": "count", "count": 3}),
    edit(
        process(ttl_ms=5, fields=["a"]),
        lambda s: s.update(
            key={"field": "user"},
            timestamp={"source": "kafka"},
            watermark={"strategy": "punctuated", "field": "wm", "idle_timeout_ms": 5},
        ),
    ),
    process("inactivity_timeout", timeout_ms=5, time="processing"),
    {
        "name": "j",
        "inputs": {
            "a": {
                "source": {"topics": ["in"], "bounded": True},
                "key": {"field": "k", "shuffle_partitions": 2},
                "steps": [{"filter": "v > 1"}],
            },
            "b": {
                "source": {"topics": ["in.b"], "bounded": True},
                "timestamp": {"field": "ts"},
                "watermark": {"max_out_of_orderness_ms": 5},
            },
        },
        "operator": {
            "type": "join",
            "kind": "interval",
            "how": "left",
            "left": "a",
            "right": "b",
            "between": {"lower_ms": -5, "upper_ms": 5},
            "select": {"x": "a.v", "y": "b.w"},
        },
        "sink": {"topic": "out", "late_topic": "out.late"},
    },
    {
        "name": "w",
        "inputs": {"a": {"source": {"topics": ["in"]}}, "b": {"source": {"topics": ["in.b"]}}},
        "operator": {
            "type": "join",
            "kind": "window",
            "how": "semi",
            "left": "b",
            "right": "a",
            "assigner": {"type": "sliding", "size_ms": 20, "slide_ms": 10},
        },
        "sink": {"topic": "out"},
    },
]

_FIELD_NAMES = [
    "name", "source", "topics", "key", "field", "timestamp", "format", "watermark",
    "strategy", "max_out_of_orderness_ms", "interval_ms", "idle_timeout_ms", "idle_advance",
    "max_drift_ms", "operator", "type", "assigner", "size_ms", "slide_ms", "offset_ms",
    "gap_ms", "time", "allowed_lateness_ms", "trigger", "count", "purge", "evictor",
    "max_count", "keep_ms", "after", "aggregations", "fn", "function", "params", "sink",
    "topic", "late_topic", "dead_letter_topic", "ttl_ms", "timeout_ms", "bounded",
    "inputs", "kind", "how", "left", "right", "between", "lower_ms", "upper_ms", "select",
    "steps", "partitioned", "shuffle_partitions", "start_from",
]  # fmt: skip

_EDIT_VALUES = st.one_of(
    _VALUES,
    st.sampled_from(
        [
            "kafka",
            "field",
            "punctuated",
            "ascending",
            "bounded_out_of_orderness",
            "window",
            "keyed_process",
            "tumbling",
            "sliding",
            "session",
            "global",
            "event_time",
            "processing_time",
            "count",
            "continuous",
            "time",
            "sum",
            "avg",
            "dedupe",
            "inactivity_timeout",
            "daily_reset_counter",
            "examples.udf.quiet:X",
            "os:system",
            "in",
            "out",
            "out.dlq",
            "out.late",
            "clockwork.x",
            ".",
            "t" * 246,
            "iso8601",
            "json",
            "earliest",
            "join",
            "interval",
            "temporal",
            "inner",
            "left",
            "right",
            "full",
            "semi",
            "anti",
            "a",
            "b",
            "c",
            "a.v + 1",
            "c.v",
            "in.b",
        ]
    ),
    st.sampled_from(
        [
            {},
            [],
            ["in"],
            ["in", "in"],
            {"type": "count", "count": 2},
            {"type": "event_time"},
            {"type": "processing_time"},
            {"fn": "count"},
            {"fn": "sum"},
            {"n": {"fn": "count"}},
            {"type": "count", "max_count": 2},
            {"type": "global"},
            {"type": "tumbling", "size_ms": 5},
            {"source": "kafka"},
            {"field": "ts"},
            {"ttl_ms": 5},
            {"topic": "x"},
            {"lower_ms": 5, "upper_ms": 1},
            {"lower_ms": -1, "upper_ms": 1},
            {"x": "a.v"},
            {"source": {"topics": ["in.c"]}},
            {"a": {"source": {"topics": ["in"]}}, "b": {"source": {"topics": ["x"]}}},
        ]
    ),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*prefix, i))
    return found


@st.composite
def edited_specs(draw: st.DrawFn) -> Any:
    spec = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(spec)))
        parent: Any = spec
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["set", "delete", "add"]))
        if not path:
            continue
        target = parent[path[-1]]
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(target, dict):
            target[draw(st.sampled_from(_FIELD_NAMES))] = copy.deepcopy(draw(_EDIT_VALUES))
        else:  # a copy: the sampled values are shared between examples
            parent[path[-1]] = copy.deepcopy(draw(_EDIT_VALUES))
    return spec


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(spec=edited_specs())
def test_schema_and_service_agree_on_edited_specs(spec: Any) -> None:
    agree(spec)


def test_schema_and_service_agree_on_every_character_of_a_field_path() -> None:
    """The path pattern's character class means the same to both regex engines."""
    schema = pipeline_schema(ALLOWED)
    validator = jsonschema_rs.validator_for(schema)
    registry = _registry(ALLOWED)
    disagree = []
    for code in [*range(0x3001), 0xFEFF, 0x1F600]:
        spec = window(aggregations={"s": {"fn": "sum", "field": f"a{chr(code)}b"}})
        try:
            registry.parse(spec)
            service_ok = True
        except SpecInvalid:
            service_ok = False
        if validator.is_valid(spec) != service_ok:
            disagree.append(hex(code))
    assert disagree == []
