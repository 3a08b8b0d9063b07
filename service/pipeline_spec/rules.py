"""The cross-field rules of the pipeline spec: each one declaration, its check beside its
JSON Schema fragment.

A rule is a check (a generator of :class:`Problem` over the raw JSON) declared with
:func:`rule`, which also takes the rule's JSON Schema fragment, or says why no JSON
Schema can state it. :mod:`service.pipeline_spec.schema` assembles the served schema
from the models and these fragments, so a rule cannot reach the service and miss the
schema (or the other way round): there is no second list to forget it in.
``tests/pipeline_spec/test_rules.py`` checks that every fragment is in the served schema
and that each rule's check and fragment agree.

Why raw JSON and not the validated models: pydantic runs a model's "after" validator only
when every field of that model is valid, so a spec with a bad ``allowed_lateness_ms``
would hide that its evictor cannot work with its aggregations. The checks read the input
defensively instead (a part that is missing or of the wrong type is skipped: the field
checks already report it) and each one reports its own problems, so the user gets every
problem in one answer. :class:`service.pipeline_spec.models.PipelineSpec` merges them
with the field errors; :func:`check` runs them all, in the order they are declared here
(the order of the spec's sections, which is the order of the 422's problems).

Adding a rule: write its check under ``@rule(...)`` with the problem types it reports and
its fragment (``Fragment("ModelName", {...})``, joined to that model's definition as one
more ``allOf`` entry), or ``beyond_schema={type: why}`` for what no JSON Schema can say;
and give ``tests/pipeline_spec/test_rules.py`` a spec it refuses and one it accepts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import fastavro

from service.core.time import MAX_DURATION_MS
from service.operators.join.projection import SelectError, compile_projection
from service.operators.process.builtins import BUILTIN_FUNCTIONS
from service.operators.process.builtins.daily_counter import MAX_OFFSET_MINUTES
from service.operators.steps import check_expression
from service.operators.udf import UdfError, check_allowed, parse_ref
from service.pipeline_spec.sink_schemas import AVRO_NAME, protobuf_json_name

__all__ = [
    "BUILTIN_PARAMS_SCHEMAS",
    "BUILTIN_PROCESS_FUNCTIONS",
    "FIELD_FREE_FNS",
    "JOIN_HOWS",
    "KAFKA_REFUSED_TOPICS",
    "MAX_TOPIC_LENGTH",
    "RULES",
    "Fragment",
    "Problem",
    "Rule",
    "check",
    "user_function_pattern",
]

Loc = tuple[str | int, ...]
JsonSchema = dict[str, Any]


class Problem(NamedTuple):
    """One thing wrong with a spec: where (JSON path), what kind, and what to do."""

    loc: Loc
    type: str
    msg: str
    input: Any = None


Check = Callable[[Mapping[str, Any], Sequence[str]], Iterator[Problem]]
"""A rule's check: the raw spec and the allowed user-function modules -> its problems."""


@dataclass(frozen=True, slots=True)
class Fragment:
    """What JSON Schema can say of a rule, and the model whose definition it joins."""

    model: str
    """The model's name as in the schema's ``$defs`` (``PipelineSpec``: the top level)."""
    schema: JsonSchema | Callable[[Sequence[str]], JsonSchema]
    """The fragment; a callable when it depends on the allowed user-function modules."""

    def resolve(self, allowed_modules: Sequence[str]) -> JsonSchema:
        """The fragment for a service that allows ``allowed_modules``."""
        return self.schema(allowed_modules) if callable(self.schema) else self.schema


@dataclass(frozen=True, slots=True, eq=False)
class Rule:
    """One cross-field rule: its check, the problem types it reports, and its schema."""

    name: str
    check: Check
    reports: frozenset[str]
    """Every problem type the check reports."""
    schema: Fragment | None
    """None: no JSON Schema can state any of it (``beyond_schema`` says why)."""
    beyond_schema: Mapping[str, str] = field(default_factory=dict)
    """Problem types the fragment cannot state, each with the reason."""

    @property
    def stated(self) -> frozenset[str]:
        """The problem types the fragment states: the schema refuses every spec the check
        reports one of these for."""
        return self.reports - self.beyond_schema.keys()


RULES: list[Rule] = []
"""Every rule, in the order :func:`check` runs them."""


def rule(
    *,
    reports: Iterable[str],
    schema: Fragment | None = None,
    beyond_schema: Mapping[str, str] | None = None,
) -> Callable[[Check], Check]:
    """Declare the check below as a rule with its fragment; see the module docstring."""
    reported = frozenset(reports)
    beyond = dict(beyond_schema or {})
    if not reported or not beyond.keys() <= reported:
        raise ValueError("a rule reports some problem types, beyond_schema names some of them")
    if schema is None and beyond.keys() != reported:
        raise ValueError("a rule without a schema fragment says why for each problem type")
    if schema is not None and beyond.keys() == reported:
        raise ValueError("a fragment that states none of the rule's problems is no fragment")

    def declare(check: Check) -> Check:
        RULES.append(Rule(check.__name__.lstrip("_"), check, reported, schema, beyond))
        return check

    return declare


def check(spec: Mapping[str, Any], allowed_modules: Sequence[str]) -> list[Problem]:
    """Every cross-field problem of ``spec``, in the order of the spec's sections."""
    return [problem for r in RULES for problem in r.check(spec, allowed_modules)]


# -- constants the rules share ----------------------------------------------------------

FIELD_FREE_FNS = frozenset({"count"})
"""Aggregate functions that take no ``field``; every other one needs it."""

MAX_TOPIC_LENGTH = 249
"""Kafka's limit on a topic name (the spec's pattern says it for the topics it names)."""

KAFKA_REFUSED_TOPICS = frozenset({".", ".."})
"""Names the spec's topic pattern allows but Kafka refuses."""

BUILTIN_PROCESS_FUNCTIONS = frozenset(BUILTIN_FUNCTIONS)
"""Keyed process functions that ship with the service (each validates its own params)."""

_DEFAULT_TRIGGER = {"event": "event_time", "processing": "processing_time"}
_DOMAIN_TRIGGERS = {"event_time": "event", "processing_time": "processing"}
_DLQ_SUFFIX = ".dlq"
_SINK_TOPICS = ("topic", "late_topic", "dead_letter_topic")

_COMPARES = "compares two values of one document, which no JSON Schema can"


# -- reading raw JSON defensively -----------------------------------------------------


def _obj(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _window(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    op = _obj(spec.get("operator"))
    return op if op is not None and op.get("type") == "window" else None


def _window_time(op: Mapping[str, Any]) -> str | None:
    time = op.get("time", "event")
    return time if isinstance(time, str) and time in _DEFAULT_TRIGGER else None


def _sections(spec: Mapping[str, Any]) -> Iterator[tuple[Loc, Mapping[str, Any]]]:
    """Where a stream's settings (source, steps, key, timestamp, watermark) are, with
    their path: the top level, and each of a join's inputs."""
    yield (), spec
    inputs = _obj(spec.get("inputs"))
    for name, section in (inputs or {}).items():
        if isinstance(name, str) and _obj(section) is not None:
            yield ("inputs", name), section


def _topics_of(section: Mapping[str, Any]) -> list[Any]:
    source = _obj(section.get("source"))
    topics = source.get("topics") if source is not None else None
    return topics if isinstance(topics, list) else []


def _source_topics(spec: Mapping[str, Any]) -> list[Any]:
    """Every topic the spec reads: its source's and its inputs'."""
    return [topic for _, section in _sections(spec) for topic in _topics_of(section)]


def _join(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    op = _obj(spec.get("operator"))
    return op if op is not None and op.get("type") == "join" else None


# -- schema fragments' building blocks ------------------------------------------------


def _present(name: str, kind: str) -> JsonSchema:
    """The property is there and not null (what the checks call given)."""
    return {"required": [name], "properties": {name: {"type": kind}}}


def _equals(name: str, value: Any) -> JsonSchema:
    return {"required": [name], "properties": {name: {"const": value}}}


def _of_type(kind: str) -> JsonSchema:
    return {"type": "object", **_equals("type", kind)}


_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def user_function_pattern(allowed_modules: Sequence[str]) -> str | None:
    """``package.module:Name`` inside an allowed module (None: no module is allowed).

    Identifiers are ASCII here; Python also takes other letters, which no module under an
    allowed package is likely to use.
    """
    if not allowed_modules:
        return None
    modules = "|".join(re.escape(m) for m in allowed_modules)
    return rf"^(?:{modules})(?:\.{_IDENT})*:{_IDENT}(?:\.{_IDENT})*$"


# -- the rules, in the order of the spec's sections -----------------------------------


# The top level's stream settings: with ``inputs`` they belong to each input.
_STREAM_SETTINGS = ("steps", "key", "timestamp", "watermark")


@rule(
    reports={"missing", "source_and_inputs"},
    schema=Fragment(
        "PipelineSpec", {"oneOf": [_present("source", "object"), _present("inputs", "object")]}
    ),
)
def _source_or_inputs(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """One stream (``source``) or a join's two (``inputs``), never both."""
    has_source = spec.get("source") is not None
    has_inputs = spec.get("inputs") is not None
    if not has_source and not has_inputs:
        yield Problem(
            ("source",),
            "missing",
            "a pipeline reads a source, or a join's two inputs (inputs)",
        )
    if has_source and has_inputs:
        yield Problem(
            ("source",),
            "source_and_inputs",
            "give source (one stream) or inputs (a join's two), not both: each input "
            "has its own source",
            spec.get("source"),
        )


@rule(
    reports={"not_with_inputs"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": _present("inputs", "object"),
            "then": {"properties": {name: False for name in _STREAM_SETTINGS}},
        },
    ),
)
def _stream_settings_in_inputs(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """With ``inputs``, steps, key, timestamp and watermark are each input's."""
    if spec.get("inputs") is None:
        return
    for name in _STREAM_SETTINGS:
        if name in spec:
            yield Problem(
                (name,),
                "not_with_inputs",
                f"with inputs, {name} belongs to each input: move it into inputs.<name>",
                spec[name],
            )


@rule(
    reports={"avro_schema_without_avro"},
    schema=Fragment(
        "SourceSpec",
        {"if": _present("avro_schema", "object"), "then": _equals("format", "avro")},
    ),
)
def _avro_schema_is_avro(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """An ``avro_schema`` says the values are raw Avro: the format is ``avro``."""
    for at, section in _sources(spec):
        if _obj(section.get("avro_schema")) is not None and section.get("format") != "avro":
            yield Problem(
                (*at, "format"),
                "avro_schema_without_avro",
                'an avro_schema is for raw Avro values: set "format": "avro" (or drop it)',
                section.get("format", "json"),
            )


@rule(
    reports={"invalid_avro_schema"},
    beyond_schema={"invalid_avro_schema": "parsing an Avro schema is no JSON Schema's"},
)
def _avro_schema_parses(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """The raw Avro schema is one fastavro can read with."""
    for at, section in _sources(spec):
        schema = _obj(section.get("avro_schema"))
        if schema is None:
            continue
        try:
            fastavro.parse_schema(dict(schema))
        except Exception as exc:  # fastavro's SchemaParseException, or its KeyErrors
            yield Problem(
                (*at, "avro_schema"),
                "invalid_avro_schema",
                f"not an Avro schema: {type(exc).__name__}: {exc}",
                schema,
            )


def _sources(spec: Mapping[str, Any]) -> Iterator[tuple[Loc, Mapping[str, Any]]]:
    """The source section of the pipeline, or of each input of a join."""
    source = _obj(spec.get("source"))
    if source is not None:
        yield ("source",), source
    inputs = _obj(spec.get("inputs"))
    for name, value in (inputs or {}).items():
        section = _obj(value)
        found = _obj(section.get("source")) if section is not None else None
        if found is not None:
            yield ("inputs", name, "source"), found


_JOIN_OPERATOR: JsonSchema = {
    "required": ["operator"],
    "properties": {"operator": _of_type("join")},
}


@rule(
    reports={"join_without_inputs", "inputs_without_join"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": _JOIN_OPERATOR,
            "then": _present("inputs", "object"),
            "else": {"properties": {"inputs": {"type": "null"}}},
        },
    ),
)
def _inputs_need_a_join(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """A join reads two inputs; two inputs are only read by a join."""
    op = _obj(spec.get("operator"))
    if op is None:
        return
    has_inputs = spec.get("inputs") is not None
    if op.get("type") == "join" and not has_inputs:
        yield Problem(
            ("inputs",),
            "join_without_inputs",
            "a join reads two named inputs: give inputs ({name: {source, key, ...}}, "
            "two of them) instead of source",
        )
    elif op.get("type") != "join" and has_inputs:
        yield Problem(
            ("operator", "type"),
            "inputs_without_join",
            "a pipeline with two inputs needs a join operator",
            op.get("type"),
        )


def _inputs(spec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return [(at[1], section) for at, section in _sections(spec) if at and isinstance(at[1], str)]


_RUN_TOGETHER: tuple[tuple[str, str, Any], ...] = (
    ("source", "bounded", False),
    ("source", "start_from", "earliest"),
    ("watermark", "idle_timeout_ms", None),
    ("watermark", "idle_advance", False),
    ("watermark", "max_drift_ms", None),
)
"""Settings of an input that the join's inputs share (with their defaults): one
pipeline finishes, starts and combines all its source partitions' watermarks (idleness,
alignment) as one."""


@rule(reports={"inputs_disagree"}, beyond_schema={"inputs_disagree": _COMPARES})
def _inputs_agree(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """Both inputs bounded or neither, from the same start, with one idleness timeout,
    idle advance and drift bound (reported at the second input)."""
    inputs = _inputs(spec)
    op = _join(spec)
    if len(inputs) != 2 or (op is not None and op.get("kind") == "lookup"):
        return  # a lookup table is read apart from the stream (_lookup_table_input)
    (first, a), (second, b) = inputs
    for section, name, default in _RUN_TOGETHER:
        part_a, part_b = _obj(a.get(section, {})), _obj(b.get(section, {}))
        if part_a is None or part_b is None:
            continue
        value_a, value_b = part_a.get(name, default), part_b.get(name, default)
        if value_a != value_b:
            yield Problem(
                ("inputs", second, section, name),
                "inputs_disagree",
                f"{section}.{name} is {value_b!r} here but {value_a!r} in {first!r}: a "
                "join's inputs share it (one pipeline reads, finishes and combines "
                "watermarks for both)",
                value_b,
            )


@rule(
    reports={"join_always_shuffles"},
    schema=Fragment(
        "InputSpec",
        {"properties": {"key": {"properties": {"partitioned": {"not": {"const": True}}}}}},
    ),
)
def _inputs_are_shuffled(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """A join brings both inputs to its key through the shuffle, whatever their
    partitioning: a promise of ``partitioned`` would not be used."""
    for name, section in _inputs(spec):
        key = _obj(section.get("key"))
        if key is not None and key.get("partitioned") is True:
            yield Problem(
                ("inputs", name, "key", "partitioned"),
                "join_always_shuffles",
                "a join always routes both inputs through the shuffle to its key: leave "
                "partitioned out",
                True,
            )


@rule(
    reports={"invalid_expression"},
    beyond_schema={
        "invalid_expression": "an expression's syntax, functions and arity need its parser"
    },
)
def _step_expressions(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """Every problem of every expression of the steps (syntax, unknown functions, arity,
    unsupported syntax), each at its JSON path with its column in the expression."""
    for at, section in _sections(spec):
        steps = section.get("steps")
        if not isinstance(steps, list):
            continue
        for index, step in enumerate(steps):
            if not isinstance(step, Mapping):
                continue
            expressions: list[tuple[Loc, Any]] = []
            if isinstance(step.get("filter"), str):
                expressions.append(((*at, "steps", index, "filter"), step["filter"]))
            assignments = _obj(step.get("set"))
            if assignments is not None:
                expressions.extend(
                    ((*at, "steps", index, "set", name), text)
                    for name, text in assignments.items()
                    if isinstance(text, str)
                )
            for loc, text in expressions:
                for problem in check_expression(text):
                    yield Problem(loc, "invalid_expression", str(problem), text)


@rule(
    reports={"shuffle_unused"},
    schema=Fragment(
        "KeySpec",
        {
            "if": _equals("partitioned", True),
            "then": {"properties": {"shuffle_partitions": {"type": "null"}}},
        },
    ),
)
def _partitioned_key_is_not_shuffled(
    spec: Mapping[str, Any], _: Sequence[str]
) -> Iterator[Problem]:
    for at, section in _sections(spec):
        key = _obj(section.get("key"))
        if key is None:
            continue
        if key.get("partitioned") is True and key.get("shuffle_partitions") is not None:
            yield Problem(
                (*at, "key", "shuffle_partitions"),
                "shuffle_unused",
                "a source declared partitioned by the key is not shuffled: drop "
                "shuffle_partitions, or partitioned",
                key.get("shuffle_partitions"),
            )


@rule(
    reports={"timestamp_field_with_kafka", "timestamp_format_with_kafka", "missing"},
    schema=Fragment(
        "TimestampSpec",
        {
            "if": _equals("source", "kafka"),
            "then": {"properties": {"field": False, "format": False}},
            "else": _present("field", "string"),
        },
    ),
)
def _timestamp_source(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """``source: kafka`` takes no field nor format; otherwise a field."""
    for at, section in _sections(spec):
        ts = _obj(section.get("timestamp"))
        if ts is not None:
            yield from _timestamp_problems((*at, "timestamp"), ts)


def _timestamp_problems(at: Loc, ts: Mapping[str, Any]) -> Iterator[Problem]:
    source = ts.get("source")
    if source == "kafka":
        if "field" in ts:
            yield Problem(
                (*at, "field"),
                "timestamp_field_with_kafka",
                "no field with source 'kafka': the record timestamp is used",
                ts["field"],
            )
        if "format" in ts:
            yield Problem(
                (*at, "format"),
                "timestamp_format_with_kafka",
                "no format with source 'kafka': the record timestamp is epoch milliseconds",
                ts["format"],
            )
    elif source in (None, "field") and ts.get("field") is None:  # null is no field either
        yield Problem(
            (*at, "field"),
            "missing",
            'a payload field is required, or use {"source": "kafka"}',
        )


def _strategy(wm: Mapping[str, Any]) -> Any:
    return wm.get("strategy", "bounded_out_of_orderness")


def _watermarks(spec: Mapping[str, Any]) -> Iterator[tuple[Loc, Mapping[str, Any]]]:
    """Each ``watermark`` object given (top level, each input), with its path."""
    for at, section in _sections(spec):
        wm = _obj(section.get("watermark"))
        if wm is not None:
            yield (*at, "watermark"), wm


@rule(
    reports={"missing", "watermark_field_unused"},
    schema=Fragment(
        "WatermarkSpec",
        {
            "if": _equals("strategy", "punctuated"),
            "then": _present("field", "string"),
            "else": {"properties": {"field": False}},
        },
    ),
)
def _punctuated_field(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """The punctuated strategy needs its field, and only it takes one."""
    for at, wm in _watermarks(spec):
        yield from _punctuated_problems(at, wm)


def _punctuated_problems(at: Loc, wm: Mapping[str, Any]) -> Iterator[Problem]:
    strategy = _strategy(wm)
    if strategy == "punctuated" and wm.get("field") is None:
        yield Problem(
            (*at, "field"),
            "missing",
            "the punctuated strategy needs the payload field that carries the watermark",
        )
    if strategy != "punctuated" and "field" in wm:
        yield Problem(
            (*at, "field"),
            "watermark_field_unused",
            f"field is only used by the punctuated strategy, not {strategy!r}",
            wm["field"],
        )


@rule(
    reports={"watermark_bound_with_ascending", "watermark_bound_with_punctuated"},
    schema=Fragment(
        "WatermarkSpec",
        {
            "if": {
                "required": ["strategy"],
                "properties": {
                    "strategy": {"enum": ["ascending", "strictly_ascending", "punctuated"]}
                },
            },
            "then": {"properties": {"max_out_of_orderness_ms": {"const": 0}}},
        },
    ),
)
def _bound_only_when_out_of_order(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """Ascending (strictly or not) and punctuated watermarks have no out-of-orderness
    bound."""
    for at, wm in _watermarks(spec):
        yield from _bound_problems(at, wm)


def _bound_problems(at: Loc, wm: Mapping[str, Any]) -> Iterator[Problem]:
    strategy = _strategy(wm)
    bound = _int(wm.get("max_out_of_orderness_ms"))
    if strategy in ("ascending", "strictly_ascending") and bound:
        yield Problem(
            (*at, "max_out_of_orderness_ms"),
            "watermark_bound_with_ascending",
            f"{strategy.replace('_', ' ')} timestamps have no out-of-orderness bound: use "
            "bounded_out_of_orderness or leave it out",
            bound,
        )
    if strategy == "punctuated" and bound:
        yield Problem(
            (*at, "max_out_of_orderness_ms"),
            "watermark_bound_with_punctuated",
            "a punctuated watermark is the field's value, with no out-of-orderness bound: "
            "leave it out",
            bound,
        )


@rule(
    reports={"idle_advance_without_timeout"},
    schema=Fragment(
        "WatermarkSpec",
        {"if": _equals("idle_advance", True), "then": _present("idle_timeout_ms", "integer")},
    ),
)
def _idle_advance_needs_timeout(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    for at, wm in _watermarks(spec):
        if wm.get("idle_advance") is True and wm.get("idle_timeout_ms") is None:
            yield Problem(
                (*at, "idle_advance"),
                "idle_advance_without_timeout",
                "idle_advance needs idle_timeout_ms: without it no partition is ever idle",
                True,
            )


def _assigner(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A window's assigner, or a window join's."""
    op = _window(spec) or _join(spec)
    return _obj(op.get("assigner")) if op is not None else None


@rule(reports={"slide_greater_than_size"}, beyond_schema={"slide_greater_than_size": _COMPARES})
def _slide_within_size(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    assigner = _assigner(spec)
    if assigner is None or assigner.get("type") != "sliding":
        return
    size = _int(assigner.get("size_ms"))
    slide = _int(assigner.get("slide_ms"))
    if size and slide and size > 0 and slide > size:
        yield Problem(
            ("operator", "assigner", "slide_ms"),
            "slide_greater_than_size",
            f"slide_ms ({slide}) must not exceed size_ms ({size}): records between "
            "windows would belong to none",
            slide,
        )


@rule(reports={"offset_out_of_range"}, beyond_schema={"offset_out_of_range": _COMPARES})
def _offset_within_period(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    assigner = _assigner(spec)
    if assigner is None:
        return
    kind = assigner.get("type")
    name = "size_ms" if kind == "tumbling" else "slide_ms" if kind == "sliding" else None
    period = _int(assigner.get(name)) if name is not None else None
    offset = _int(assigner.get("offset_ms"))
    if period and period > 0 and offset is not None and abs(offset) >= period:
        yield Problem(
            ("operator", "assigner", "offset_ms"),
            "offset_out_of_range",
            f"|offset_ms| must be less than {name} ({period})",
            offset,
        )


_HAS_FUNCTION = _present("function", "string")


@rule(
    reports={"window_function_missing", "window_function_ambiguous"},
    schema=Fragment(
        "WindowOperator", {"oneOf": [_present("aggregations", "object"), _HAS_FUNCTION]}
    ),
)
def _aggregations_or_function(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    op = _window(spec)
    if op is None:
        return
    has_aggs = op.get("aggregations") is not None
    has_fn = op.get("function") is not None
    if not has_aggs and not has_fn:
        yield Problem(
            ("operator",),
            "window_function_missing",
            "a window needs aggregations or a function",
        )
    if has_aggs and has_fn:
        yield Problem(
            ("operator", "function"),
            "window_function_ambiguous",
            "give either aggregations or a function, not both",
            op.get("function"),
        )


@rule(
    reports={"evictor_needs_elements"},
    schema=Fragment("WindowOperator", {"if": _present("evictor", "object"), "then": _HAS_FUNCTION}),
)
def _evictor_needs_function(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    op = _window(spec)
    if op is not None and op.get("evictor") is not None and op.get("function") is None:
        yield Problem(
            ("operator", "evictor"),
            "evictor_needs_elements",
            "an evictor needs the window's elements, but aggregations keep only an "
            "accumulator: use a window function, or drop the evictor",
            op.get("evictor"),
        )


def _user_ref(loc: Loc, ref: str, allowed: Sequence[str]) -> Iterator[Problem]:
    try:
        module, _ = parse_ref(ref)
        check_allowed(module, allowed)
    except UdfError as exc:
        kind = "function_not_allowed" if "not allowed" in str(exc) else "function_ref_invalid"
        yield Problem(loc, kind, str(exc), ref)


def _window_function_schema(allowed: Sequence[str]) -> JsonSchema:
    pattern = user_function_pattern(allowed)
    if pattern is None:
        return {
            "properties": {
                "function": {"type": "null", "description": "No module is allowed here."}
            }
        }
    return {
        "properties": {
            "function": {"anyOf": [{"type": "string", "pattern": pattern}, {"type": "null"}]}
        }
    }


@rule(
    reports={"function_not_allowed", "function_ref_invalid"},
    schema=Fragment("WindowOperator", _window_function_schema),
)
def _window_function_allowed(spec: Mapping[str, Any], allowed: Sequence[str]) -> Iterator[Problem]:
    """A window function is ``package.module:Name`` in an allowed module."""
    op = _window(spec)
    fn = _str(op.get("function")) if op is not None else None
    if fn is not None:
        yield from _user_ref(("operator", "function"), fn, allowed)


@rule(
    reports={"aggregation_field_unused", "missing"},
    schema=Fragment(
        "Aggregation",
        {
            "if": {"properties": {"fn": {"enum": sorted(FIELD_FREE_FNS)}}},
            "then": {"properties": {"field": False}},
            "else": _present("field", "string"),
        },
    ),
)
def _aggregation_field(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """``count`` takes no field, every other function needs one."""
    op = _window(spec)
    aggregations = _obj(op.get("aggregations")) if op is not None else None
    for name, agg in (aggregations or {}).items():
        agg_obj = _obj(agg)
        if agg_obj is None or not isinstance(agg_obj.get("fn"), str):
            continue
        fn_name = agg_obj["fn"]
        loc: Loc = ("operator", "aggregations", name, "field")
        if fn_name in FIELD_FREE_FNS and "field" in agg_obj:
            yield Problem(
                loc,
                "aggregation_field_unused",
                f"{fn_name!r} counts records and takes no field",
                agg_obj["field"],
            )
        elif fn_name not in FIELD_FREE_FNS and agg_obj.get("field") is None:
            yield Problem(loc, "missing", f"{fn_name!r} needs the field it aggregates")


_BY_FNS = ("max_by", "min_by")


@rule(
    reports={"aggregation_by_unused", "missing"},
    schema=Fragment(
        "Aggregation",
        {
            "if": {"properties": {"fn": {"enum": list(_BY_FNS)}}},
            "then": _present("by", "string"),
            "else": {"properties": {"by": False}},
        },
    ),
)
def _aggregation_by(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """``max_by`` and ``min_by`` need the field they order the rows by; no other
    function takes one."""
    op = _window(spec)
    aggregations = _obj(op.get("aggregations")) if op is not None else None
    for name, agg in (aggregations or {}).items():
        agg_obj = _obj(agg)
        if agg_obj is None or not isinstance(agg_obj.get("fn"), str):
            continue
        fn_name = agg_obj["fn"]
        loc: Loc = ("operator", "aggregations", name, "by")
        if fn_name in _BY_FNS and agg_obj.get("by") is None:
            yield Problem(loc, "missing", f"{fn_name!r} needs by: the field that picks the row")
        elif fn_name not in _BY_FNS and "by" in agg_obj:
            yield Problem(
                loc,
                "aggregation_by_unused",
                f"only max_by and min_by take by, not {fn_name!r}",
                agg_obj["by"],
            )


@rule(
    reports={"trigger_domain_mismatch"},
    schema=Fragment(
        "WindowOperator",
        {
            "if": _equals("time", "processing"),
            "then": {"properties": {"trigger": {"not": _of_type("event_time")}}},
            "else": {"properties": {"trigger": {"not": _of_type("processing_time")}}},
        },
    ),
)
def _trigger_fits_time(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    op = _window(spec)
    time = _window_time(op) if op is not None else None
    if op is None or time is None:
        return
    trigger = _obj(op.get("trigger"))
    trigger_type = trigger.get("type") if trigger is not None else None
    domain = _DOMAIN_TRIGGERS.get(trigger_type) if isinstance(trigger_type, str) else None
    if domain is not None and domain != time:
        yield Problem(
            ("operator", "trigger", "type"),
            "trigger_domain_mismatch",
            f"a {trigger_type} trigger does not fit {time}-time windows: use "
            f"{_DEFAULT_TRIGGER[time]}, count or continuous",
            trigger_type,
        )


@rule(
    reports={"global_window_never_fires"},
    schema=Fragment(
        "WindowOperator",
        {
            "if": {"required": ["assigner"], "properties": {"assigner": _equals("type", "global")}},
            "then": {
                "required": ["trigger"],
                "properties": {
                    "trigger": {
                        "type": "object",
                        "required": ["type"],
                        "properties": {"type": {"enum": ["continuous", "count"]}},
                    }
                },
            },
        },
    ),
)
def _global_window_trigger(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """A global window never ends: it needs a trigger that fires without an end."""
    op = _window(spec)
    if op is None or _window_time(op) is None:
        return
    trigger = _obj(op.get("trigger"))
    trigger_type = trigger.get("type") if trigger is not None else None
    assigner = _obj(op.get("assigner"))
    global_window = assigner is not None and assigner.get("type") == "global"
    if global_window and trigger_type not in ("count", "continuous"):
        yield Problem(
            ("operator", "trigger"),
            "global_window_never_fires",
            "a global window never ends, so its default trigger never fires: give a "
            "count or continuous trigger",
            trigger,
        )


@rule(
    reports={"lateness_in_processing_time"},
    schema=Fragment(
        "WindowOperator",
        {
            "if": _equals("time", "processing"),
            "then": {"properties": {"allowed_lateness_ms": {"const": 0}}},
        },
    ),
)
def _no_lateness_in_processing_time(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    op = _window(spec)
    if op is None or _window_time(op) != "processing":
        return
    lateness = _int(op.get("allowed_lateness_ms"))
    if lateness:
        yield Problem(
            ("operator", "allowed_lateness_ms"),
            "lateness_in_processing_time",
            "processing-time windows have no late records: leave allowed_lateness_ms out",
            lateness,
        )


def _keyed_process_function(spec: Mapping[str, Any]) -> str | None:
    op = _obj(spec.get("operator"))
    if op is None or op.get("type") != "keyed_process":
        return None
    return _str(op.get("function"))


def _process_function_schema(allowed: Sequence[str]) -> JsonSchema:
    builtins: JsonSchema = {"enum": sorted(BUILTIN_PROCESS_FUNCTIONS)}
    pattern = user_function_pattern(allowed)
    if pattern is None:
        return {"properties": {"function": builtins}}
    user_ref = {"type": "string", "pattern": pattern, "maxLength": 256}
    return {"properties": {"function": {"anyOf": [builtins, user_ref]}}}


@rule(
    reports={"unknown_function", "function_not_allowed", "function_ref_invalid"},
    schema=Fragment("KeyedProcessOperator", _process_function_schema),
)
def _process_function_known(spec: Mapping[str, Any], allowed: Sequence[str]) -> Iterator[Problem]:
    """A keyed process function is a built-in or an allowed module's function."""
    fn = _keyed_process_function(spec)
    if fn is None or fn in BUILTIN_PROCESS_FUNCTIONS:
        return
    if ":" in fn:
        yield from _user_ref(("operator", "function"), fn, allowed)
    else:
        yield Problem(
            ("operator", "function"),
            "unknown_function",
            f"{fn!r} is not a built-in ({', '.join(sorted(BUILTIN_PROCESS_FUNCTIONS))}) "
            "nor a 'package.module:Name' reference",
            fn,
        )


_TIME_DOMAINS = ["event", "processing"]
_PATH_PARAM = {"type": "string", "pattern": r"^[^.]+(\.[^.]+)*$"}
"""A dotted path as the built-ins split it (no empty part)."""


def _timed_params(duration: str, **more: JsonSchema) -> JsonSchema:
    """The params of a built-in that waits ``duration`` in its time domain (``time``)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": [duration],
        "properties": {
            duration: {"type": "integer", "minimum": 1, "maximum": MAX_DURATION_MS},
            "time": {"enum": _TIME_DOMAINS},
            **more,
        },
    }


BUILTIN_PARAMS_SCHEMAS: Mapping[str, JsonSchema] = {
    "inactivity_timeout": _timed_params("timeout_ms"),
    "dedupe": _timed_params(
        "ttl_ms", fields={"type": "array", "minItems": 1, "items": _PATH_PARAM}
    ),
    "daily_reset_counter": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "utc_offset_minutes": {
                "type": "integer",
                "minimum": -MAX_OFFSET_MINUTES,
                "maximum": MAX_OFFSET_MINUTES,
            }
        },
    },
}
"""The params each built-in keyed process function accepts: what its ``validate_params``
checks, as a schema (a test keeps the two in step)."""


def _builtin_params_schema() -> JsonSchema:
    cases: list[JsonSchema] = []
    for name in sorted(BUILTIN_PROCESS_FUNCTIONS):
        params = BUILTIN_PARAMS_SCHEMAS[name]
        then: JsonSchema = {"properties": {"params": params}}
        if params.get("required"):
            then["required"] = ["params"]
        cases.append({"if": _equals("function", name), "then": then})
    return {"allOf": cases}


_PARAM_PATH = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)$")


@rule(
    reports={"invalid_param"},
    schema=Fragment("KeyedProcessOperator", _builtin_params_schema()),
)
def _builtin_params(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """Params of a built-in, checked by the built-in itself (``"field: message"`` each)."""
    fn = _keyed_process_function(spec)
    if fn is None or fn not in BUILTIN_PROCESS_FUNCTIONS:
        return
    op = _obj(spec.get("operator")) or {}
    params = _obj(op.get("params", {}))  # left out: {} (required params are reported)
    if params is None:
        return
    for text in BUILTIN_FUNCTIONS[fn].validate_params(params):
        where, sep, msg = text.partition(": ")
        match = _PARAM_PATH.match(where) if sep else None
        loc: Loc = ("operator", "params")
        if match is None:
            msg = text
        elif where != "params":
            indexes = tuple(int(i) for i in re.findall(r"\d+", match.group(2)))
            loc = (*loc, match.group(1), *indexes)
        yield Problem(loc, "invalid_param", msg, params.get(match.group(1)) if match else None)


# -- joins (semantics.md section 10) ---------------------------------------------------

JOIN_HOWS: Mapping[str, tuple[str, ...]] = {
    "interval": ("inner", "left", "right", "full"),
    "window": ("inner", "left", "right", "full", "semi", "anti"),
    "temporal": ("inner", "left"),
    "lookup": ("inner", "left"),
    "regular": ("inner",),
}
"""The ``how`` each join kind takes (Flink's: a temporal join keeps every left row or
only the matched ones; semi and anti only where a window bounds "never matched"; a
regular join's output is append-only, so inner only)."""
_HOW_WHY = {
    "regular": ": an outer row would be emitted padded and then retracted when its "
    "partner arrives, and a regular join's output is append-only (bound the join in "
    "time, an interval or window join, for outer rows)",
}


@rule(
    reports={"unknown_input", "same_input"},
    beyond_schema={
        "unknown_input": "compares a value with the keys of inputs, which no JSON Schema can",
        "same_input": _COMPARES,
    },
)
def _join_inputs_named(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """``left`` and ``right`` name two different inputs."""
    op = _join(spec)
    inputs = _obj(spec.get("inputs"))
    if op is None or inputs is None:
        return
    names = [name for name in inputs if isinstance(name, str)]
    for side in ("left", "right"):
        name = _str(op.get(side))
        if name is not None and name not in inputs:
            yield Problem(
                ("operator", side),
                "unknown_input",
                f"{name!r} is not an input (the inputs are {', '.join(map(repr, names))})",
                name,
            )
    left, right = _str(op.get("left")), _str(op.get("right"))
    if left is not None and left == right:
        yield Problem(
            ("operator", "right"),
            "same_input",
            "a join's left and right are two different inputs",
            right,
        )


@rule(
    reports={"how_not_for_kind"},
    schema=Fragment(
        "JoinOperator",
        {
            "allOf": [
                {"if": _equals("kind", kind), "then": {"properties": {"how": {"enum": list(hows)}}}}
                for kind, hows in JOIN_HOWS.items()
            ]
        },
    ),
)
def _join_how_fits_kind(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    op = _join(spec)
    kind = _str(op.get("kind")) if op is not None else None
    if op is None or kind is None or kind not in JOIN_HOWS:
        return
    how = op.get("how", "inner")
    if isinstance(how, str) and how not in JOIN_HOWS[kind]:
        yield Problem(
            ("operator", "how"),
            "how_not_for_kind",
            f"{kind} joins take how {' | '.join(JOIN_HOWS[kind])}, not {how!r}"
            + _HOW_WHY.get(kind, ""),
            how,
        )


def _only_for(kind: str, name: str) -> JsonSchema:
    """``name`` is given (an object) for ``kind`` joins, and left out of the others."""
    return {
        "if": _equals("kind", kind),
        "then": _present(name, "object"),
        "else": {"properties": {name: False}},
    }


def _kind_field(
    spec: Mapping[str, Any], kind: str, name: str, unused: str, needs: str
) -> Iterator[Problem]:
    """``name`` given for ``kind`` joins (else ``missing``, saying what it ``needs``)
    and left out of the others (else ``unused``)."""
    op = _join(spec)
    if op is None or not isinstance(op.get("kind"), str):
        return
    if op["kind"] == kind and op.get(name) is None:
        yield Problem(("operator", name), "missing", needs)
    elif op["kind"] != kind and name in op:
        yield Problem(
            ("operator", name),
            unused,
            f"only {kind} joins take {name}, not {op['kind']} joins",
            op[name],
        )


@rule(
    reports={"missing", "between_unused"},
    schema=Fragment("JoinOperator", _only_for("interval", "between")),
)
def _interval_between(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """An interval join needs its bounds; no other kind takes them."""
    yield from _kind_field(
        spec,
        "interval",
        "between",
        "between_unused",
        'an interval join needs between: {"lower_ms": ..., "upper_ms": ...}',
    )


@rule(reports={"lower_above_upper"}, beyond_schema={"lower_above_upper": _COMPARES})
def _between_in_order(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    op = _join(spec)
    between = _obj(op.get("between")) if op is not None else None
    if between is None:
        return
    lower, upper = _int(between.get("lower_ms")), _int(between.get("upper_ms"))
    if lower is not None and upper is not None and lower > upper:
        yield Problem(
            ("operator", "between", "lower_ms"),
            "lower_above_upper",
            f"lower_ms ({lower}) is above upper_ms ({upper}): no right row could match",
            lower,
        )


@rule(
    reports={"missing", "assigner_unused"},
    schema=Fragment("JoinOperator", _only_for("window", "assigner")),
)
def _window_join_assigner(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """A window join needs its (tumbling or sliding) assigner; no other kind takes one."""
    yield from _kind_field(
        spec,
        "window",
        "assigner",
        "assigner_unused",
        "a window join needs its assigner (tumbling or sliding)",
    )


@rule(
    reports={"lateness_needs_inner"},
    schema=Fragment(
        "JoinOperator",
        {
            "if": {
                "required": ["kind", "how"],
                "properties": {"kind": {"const": "window"}, "how": {"not": {"const": "inner"}}},
            },
            "then": {"properties": {"allowed_lateness_ms": {"const": 0}}},
        },
    ),
)
def _window_join_lateness(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """Allowed lateness in a window join only with ``how: inner``: a padded, semi or
    anti row emitted when the window fires could be contradicted by a late partner."""
    op = _join(spec)
    if op is None or op.get("kind") != "window":
        return
    how = op.get("how", "inner")
    lateness = _int(op.get("allowed_lateness_ms"))
    if isinstance(how, str) and how != "inner" and lateness:
        yield Problem(
            ("operator", "allowed_lateness_ms"),
            "lateness_needs_inner",
            f"a window join with how {how!r} emits rows that a late partner could "
            "contradict: allowed_lateness_ms only with how 'inner'",
            lateness,
        )


@rule(
    reports={"missing", "max_rows_unused"},
    schema=Fragment(
        "JoinOperator",
        {
            "if": _equals("kind", "lookup"),
            "then": _present("max_rows", "integer"),
            "else": {"properties": {"max_rows": False}},
        },
    ),
)
def _lookup_max_rows(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """A lookup join says how many rows its table may hold; no other kind takes it."""
    yield from _kind_field(
        spec,
        "lookup",
        "max_rows",
        "max_rows_unused",
        "a lookup join needs max_rows: the most keys its table may hold in memory on "
        "every replica (one more fails the pipeline)",
    )


@rule(
    reports={"lateness_not_for_lookup"},
    schema=Fragment(
        "JoinOperator",
        {
            "if": _equals("kind", "lookup"),
            "then": {"properties": {"allowed_lateness_ms": {"const": 0}}},
        },
    ),
)
def _lookup_no_lateness(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """A lookup join joins each left row at once: nothing is late."""
    op = _join(spec)
    if op is None or op.get("kind") != "lookup":
        return
    lateness = _int(op.get("allowed_lateness_ms"))
    if lateness:
        yield Problem(
            ("operator", "allowed_lateness_ms"),
            "lateness_not_for_lookup",
            "a lookup join joins each left row when it arrives (processing time): "
            "nothing is late, leave allowed_lateness_ms out",
            lateness,
        )


@rule(
    reports={"lateness_not_for_regular"},
    schema=Fragment(
        "JoinOperator",
        {
            "if": _equals("kind", "regular"),
            "then": {"properties": {"allowed_lateness_ms": {"const": 0}}},
        },
    ),
)
def _regular_no_lateness(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """A regular join has no time condition: nothing is late."""
    op = _join(spec)
    if op is None or op.get("kind") != "regular":
        return
    lateness = _int(op.get("allowed_lateness_ms"))
    if lateness:
        yield Problem(
            ("operator", "allowed_lateness_ms"),
            "lateness_not_for_regular",
            "a regular join joins every row with every row of the other side: nothing "
            "is late, leave allowed_lateness_ms out (state_ttl_ms bounds its state)",
            lateness,
        )


@rule(
    reports={"state_ttl_unused"},
    schema=Fragment(
        "JoinOperator",
        {"if": _equals("kind", "regular"), "else": {"properties": {"state_ttl_ms": False}}},
    ),
)
def _state_ttl_for_regular(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """Only a regular join keeps rows the watermark does not expire: the other kinds'
    state is bounded by their time condition, so a TTL there says nothing."""
    op = _join(spec)
    kind = _str(op.get("kind")) if op is not None else None
    if op is None or kind is None or kind == "regular" or op.get("state_ttl_ms") is None:
        return
    yield Problem(
        ("operator", "state_ttl_ms"),
        "state_ttl_unused",
        f"only regular joins take state_ttl_ms, not {kind} joins (their time condition "
        "bounds their state)",
        op["state_ttl_ms"],
    )


@rule(
    reports={"lookup_table_bounded", "lookup_table_from_latest"},
    beyond_schema={
        "lookup_table_bounded": "the table is the input that right names, which no JSON "
        "Schema can follow",
        "lookup_table_from_latest": "the table is the input that right names, which no "
        "JSON Schema can follow",
    },
)
def _lookup_table_input(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """A lookup join's table (its right input) is read whole and followed live: never
    bounded, never from the latest offset."""
    op = _join(spec)
    inputs = _obj(spec.get("inputs"))
    if op is None or op.get("kind") != "lookup" or inputs is None:
        return
    right = _str(op.get("right"))
    if right is None:
        return
    section = _obj(inputs.get(right))
    source = _obj(section.get("source")) if section is not None else None
    if source is None:
        return
    if source.get("bounded") is True:
        yield Problem(
            ("inputs", right, "source", "bounded"),
            "lookup_table_bounded",
            "a lookup table is followed live, never bounded (bound the left input alone)",
            True,
        )
    if source.get("start_from") == "latest":
        yield Problem(
            ("inputs", right, "source", "start_from"),
            "lookup_table_from_latest",
            "a lookup table is read whole, from its beginning: leave start_from out",
            "latest",
        )


@rule(
    reports={"invalid_select"},
    beyond_schema={
        "invalid_select": "an expression's syntax and the inputs its paths name need its "
        "parser and the document's input names"
    },
)
def _join_select(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """Each output field of ``select`` compiles over ``<input>.<path>`` of the join's two
    inputs (every problem at its field); a window join's also reads ``window.start`` and
    ``window.end``, a semi or anti join's not its right input. The inputs are the names
    under ``inputs`` (an unknown ``left`` or ``right`` is reported once, at itself, not
    again per field)."""
    op = _join(spec)
    select = _obj(op.get("select")) if op is not None else None
    names = [name for name, _ in _inputs(spec)]
    if op is None or select is None or len(names) != 2:
        return
    expressions = {k: v for k, v in select.items() if isinstance(k, str) and isinstance(v, str)}
    if not expressions:
        return
    left, right = _str(op.get("left")), _str(op.get("right"))
    if left in names and right in names and left != right:
        names = [left, right]  # so the right input is known (a semi join reads none of it)
    kind, how = op.get("kind"), op.get("how", "inner")
    left_only = how in ("semi", "anti") and how in JOIN_HOWS.get(str(kind), ())
    try:  # (a how the kind does not take is reported once, at operator.how)
        compile_projection(
            expressions, (names[0], names[1]), window=kind == "window", right_row=not left_only
        )
    except SelectError as exc:
        for field_name, message in exc.problems:
            yield Problem(
                ("operator", "select", field_name),
                "invalid_select",
                message,
                select.get(field_name),
            )


@rule(reports={"input_topics_overlap"}, beyond_schema={"input_topics_overlap": _COMPARES})
def _input_topics_disjoint(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """Each topic is one input's: a record belongs to one side of the join."""
    owner: dict[str, str] = {}
    for name, section in _inputs(spec):
        for i, topic in enumerate(_topics_of(section)):
            if not isinstance(topic, str):
                continue
            first = owner.setdefault(topic, name)
            if first != name:
                yield Problem(
                    ("inputs", name, "source", "topics", i),
                    "input_topics_overlap",
                    f"{topic!r} is also an input of {first!r}: each topic is one input's",
                    topic,
                )


_NOT_REFUSED: JsonSchema = {"not": {"enum": sorted(KAFKA_REFUSED_TOPICS)}}


def _refused_topic(loc: Loc, topic: str) -> Problem:
    return Problem(loc, "invalid_topic_name", "Kafka refuses the topic names '.' and '..'", topic)


@rule(
    reports={"invalid_topic_name", "duplicate_topic"},
    schema=Fragment(
        "SourceSpec",
        {"properties": {"topics": {"uniqueItems": True, "items": _NOT_REFUSED}}},
    ),
)
def _source_topics_distinct(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """Source topics Kafka accepts, each listed once (in each source)."""
    for at, section in _sections(spec):
        seen: set[str] = set()
        for i, topic in enumerate(_topics_of(section)):
            loc: Loc = (*at, "source", "topics", i)
            if isinstance(topic, str):
                if topic in KAFKA_REFUSED_TOPICS:
                    yield _refused_topic(loc, topic)
                elif topic in seen:
                    yield Problem(loc, "duplicate_topic", "listed twice", topic)
                seen.add(topic)


@rule(
    reports={"invalid_topic_name", "sink_is_source", "sink_topics_not_distinct", "reserved_topic"},
    schema=Fragment(
        "SinkSpec",
        {
            "properties": {
                name: {
                    "allOf": [_NOT_REFUSED, {"not": {"type": "string", "pattern": r"^clockwork\."}}]
                }
                for name in _SINK_TOPICS
            }
        },
    ),
    beyond_schema={"sink_is_source": _COMPARES, "sink_topics_not_distinct": _COMPARES},
)
def _sink_topics_own(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """Each output its own topic, which Kafka accepts, outside the source topics and the
    service's namespace (one problem per topic, the first that applies)."""
    sink = _obj(spec.get("sink"))
    if sink is None:
        return
    sources = {topic for topic in _source_topics(spec) if isinstance(topic, str)}
    taken: dict[str, str] = {}
    for name in _SINK_TOPICS:
        topic = _str(sink.get(name))
        if topic is None:
            continue
        if topic in KAFKA_REFUSED_TOPICS:
            yield _refused_topic(("sink", name), topic)
        elif topic in sources:
            yield Problem(
                ("sink", name),
                "sink_is_source",
                f"{topic!r} is also a source topic: the pipeline would consume its own output",
                topic,
            )
        elif topic in taken:
            yield Problem(
                ("sink", name),
                "sink_topics_not_distinct",
                f"{topic!r} is already the sink's {taken[topic]}: each output needs its own topic",
                topic,
            )
        elif topic.startswith("clockwork."):
            yield Problem(
                ("sink", name),
                "reserved_topic",
                "topics starting with 'clockwork.' are the service's own (pipeline store, "
                "changelogs)",
                topic,
            )
        taken.setdefault(topic, name)


@rule(
    reports={"missing", "default_dead_letter_topic_too_long"},
    schema=Fragment(
        "SinkSpec",
        {
            "if": _present("dead_letter_topic", "string"),
            "else": {"properties": {"topic": {"maxLength": MAX_TOPIC_LENGTH - len(_DLQ_SUFFIX)}}},
        },
    ),
    beyond_schema={"missing": f"the default dead-letter topic is taken: {_COMPARES}"},
)
def _default_dead_letter_topic(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """Without a dead-letter topic, ``<topic>.dlq`` is one: free, and a topic Kafka takes."""
    sink = _obj(spec.get("sink"))
    main = _str(sink.get("topic")) if sink is not None else None
    if sink is None or main is None or sink.get("dead_letter_topic") is not None:
        return
    default = f"{main}{_DLQ_SUFFIX}"
    if default in _source_topics(spec) or sink.get("late_topic") == default:
        yield Problem(
            ("sink", "dead_letter_topic"),
            "missing",
            f"the default dead-letter topic {default!r} is taken: name one",
        )
    elif len(default) > MAX_TOPIC_LENGTH:
        yield Problem(
            ("sink", "dead_letter_topic"),
            "default_dead_letter_topic_too_long",
            f"the default dead-letter topic ('<topic>.dlq') would be longer than Kafka's "
            f"{MAX_TOPIC_LENGTH} characters: name one",
        )


_LATE_RECORDS: JsonSchema = {
    "required": ["operator"],
    "properties": {
        "operator": {
            "anyOf": [
                {
                    "type": "object",
                    "required": ["type"],
                    "properties": {"type": {"const": "window"}, "time": {"const": "event"}},
                },
                _of_type("join"),
            ]
        }
    },
}
"""An operator with late records: an event-time window, or a join."""


@rule(
    reports={"late_topic_unused"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": _LATE_RECORDS,
            "else": {"properties": {"sink": {"properties": {"late_topic": {"type": "null"}}}}},
        },
    ),
)
def _late_topic_of_event_time_operators(
    spec: Mapping[str, Any], _: Sequence[str]
) -> Iterator[Problem]:
    """Only event-time windows and joins have late records."""
    sink = _obj(spec.get("sink"))
    op = _obj(spec.get("operator"))
    if sink is None or op is None or sink.get("late_topic") is None:
        return
    event_window = op.get("type") == "window" and op.get("time", "event") == "event"
    if not event_window and op.get("type") != "join":
        yield Problem(
            ("sink", "late_topic"),
            "late_topic_unused",
            "only event-time windows and joins have late records",
            sink.get("late_topic"),
        )


@rule(
    reports={"sink_format_needs_aggregations", "invalid_avro_name"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": {
                "required": ["sink"],
                "properties": {
                    "sink": {
                        "required": ["format"],
                        "properties": {"format": {"not": {"const": "json"}}},
                    }
                },
            },
            "then": {
                "required": ["operator"],
                "properties": {
                    "operator": {
                        "required": ["type", "aggregations"],
                        "properties": {
                            "type": {"const": "window"},
                            "aggregations": {
                                "type": "object",
                                "propertyNames": {"pattern": AVRO_NAME},
                            },
                        },
                    }
                },
            },
        },
    ),
)
def _sink_format_has_a_schema(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """A result schema is derived from a window's aggregations, each output an Avro name."""
    sink = _obj(spec.get("sink"))
    if sink is None or "format" not in sink or sink["format"] == "json":
        return
    op = _obj(spec.get("operator"))
    aggregations = _obj(op.get("aggregations")) if op is not None else None
    if op is None or op.get("type") != "window" or aggregations is None:
        yield Problem(
            ("sink", "format"),
            "sink_format_needs_aggregations",
            "results in a format with a schema need a window with aggregations (the schema "
            "is derived from them): use sink format json for other operators",
            sink["format"],
        )
        return
    for name in aggregations:
        if not re.match(AVRO_NAME, str(name)):
            yield Problem(
                ("operator", "aggregations", name),
                "invalid_avro_name",
                f"{name!r} is no Avro field name (letters, digits and _, not starting with "
                "a digit), which results in Avro need",
                name,
            )


@rule(
    reports={"protobuf_json_name_clash"},
    beyond_schema={"protobuf_json_name_clash": _COMPARES},
)
def _protobuf_result_names_apart(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """protoc refuses a message two of whose fields have one JSON name (``a_b`` and
    ``aB`` are both ``aB``), so a protobuf sink's derived schema would fail to compile at
    run time: the second aggregation of each such pair is reported, at itself."""
    sink = _obj(spec.get("sink"))
    op = _obj(spec.get("operator"))
    aggregations = _obj(op.get("aggregations")) if op is not None else None
    if sink is None or sink.get("format") != "protobuf" or aggregations is None:
        return
    seen: dict[str, str] = {}
    for name in aggregations:
        json_name = protobuf_json_name(str(name))
        first = seen.setdefault(json_name, str(name))
        if first != name:
            yield Problem(
                ("operator", "aggregations", name),
                "protobuf_json_name_clash",
                f"{name!r} and {first!r} have one Protobuf JSON name ({json_name!r}), which "
                "protoc refuses in one message: rename one of them",
                name,
            )
