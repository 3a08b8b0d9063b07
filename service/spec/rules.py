"""The cross-field rules of the pipeline spec, checked on the raw JSON.

Why raw JSON and not the validated models: pydantic runs a model's "after" validator only
when every field of that model is valid, so a spec with a bad ``allowed_lateness_ms``
would hide that its evictor cannot work with its aggregations. These rules read the
input defensively instead (a part that is missing or of the wrong type is skipped: the
field checks already report it) and each one reports its own problems, so the user gets
every problem in one answer. :class:`service.spec.models.PipelineSpec` merges them with the
field errors.

Each rule is a small generator of :class:`Problem`; :func:`check` runs them all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from service.operators.process.builtins import BUILTIN_FUNCTIONS
from service.operators.steps import check_expression
from service.operators.udf import UdfError, check_allowed, parse_ref

__all__ = [
    "BUILTIN_PROCESS_FUNCTIONS",
    "FIELD_FREE_FNS",
    "KAFKA_REFUSED_TOPICS",
    "MAX_TOPIC_LENGTH",
    "Problem",
    "check",
]

Loc = tuple[str | int, ...]


class Problem(NamedTuple):
    """One thing wrong with a spec: where (JSON path), what kind, and what to do."""

    loc: Loc
    type: str
    msg: str
    input: Any = None


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

Rule = Callable[[Mapping[str, Any], Sequence[str]], Iterator[Problem]]


def check(spec: Mapping[str, Any], allowed_modules: Sequence[str]) -> list[Problem]:
    """Every cross-field problem of ``spec``, in the order of the spec's sections."""
    return [problem for rule in _RULES for problem in rule(spec, allowed_modules)]


def _obj(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _timestamp(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    ts = _obj(spec.get("timestamp"))
    if ts is None:
        return
    source = ts.get("source")
    if source == "kafka":
        if "field" in ts:
            yield Problem(
                ("timestamp", "field"),
                "timestamp_field_with_kafka",
                "no field with source 'kafka': the record timestamp is used",
                ts["field"],
            )
        if "format" in ts:
            yield Problem(
                ("timestamp", "format"),
                "timestamp_format_with_kafka",
                "no format with source 'kafka': the record timestamp is epoch milliseconds",
                ts["format"],
            )
    elif source in (None, "field") and ts.get("field") is None:  # null is no field either
        yield Problem(
            ("timestamp", "field"),
            "missing",
            'a payload field is required, or use {"source": "kafka"}',
        )


def _watermark(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    wm = _obj(spec.get("watermark"))
    if wm is None:
        return
    strategy = wm.get("strategy", "bounded_out_of_orderness")
    if strategy == "punctuated" and wm.get("field") is None:
        yield Problem(
            ("watermark", "field"),
            "missing",
            "the punctuated strategy needs the payload field that carries the watermark",
        )
    if strategy != "punctuated" and "field" in wm:
        yield Problem(
            ("watermark", "field"),
            "watermark_field_unused",
            f"field is only used by the punctuated strategy, not {strategy!r}",
            wm["field"],
        )
    bound = _int(wm.get("max_out_of_orderness_ms"))
    if strategy == "ascending" and bound:
        yield Problem(
            ("watermark", "max_out_of_orderness_ms"),
            "watermark_bound_with_ascending",
            "ascending timestamps have no out-of-orderness bound: use "
            "bounded_out_of_orderness or leave it out",
            bound,
        )
    if strategy == "punctuated" and bound:
        yield Problem(
            ("watermark", "max_out_of_orderness_ms"),
            "watermark_bound_with_punctuated",
            "a punctuated watermark is the field's value, with no out-of-orderness bound: "
            "leave it out",
            bound,
        )
    if wm.get("idle_advance") is True and wm.get("idle_timeout_ms") is None:
        yield Problem(
            ("watermark", "idle_advance"),
            "idle_advance_without_timeout",
            "idle_advance needs idle_timeout_ms: without it no partition is ever idle",
            True,
        )


def _window(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    op = _obj(spec.get("operator"))
    return op if op is not None and op.get("type") == "window" else None


def _assigner(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    op = _window(spec)
    assigner = _obj(op.get("assigner")) if op is not None else None
    if assigner is None:
        return
    loc: Loc = ("operator", "assigner")
    size = _int(assigner.get("size_ms"))
    slide = _int(assigner.get("slide_ms"))
    offset = _int(assigner.get("offset_ms"))
    kind = assigner.get("type")
    if kind == "sliding" and size and slide and size > 0 and slide > size:
        yield Problem(
            (*loc, "slide_ms"),
            "slide_greater_than_size",
            f"slide_ms ({slide}) must not exceed size_ms ({size}): records between "
            "windows would belong to none",
            slide,
        )
    period = size if kind == "tumbling" else slide if kind == "sliding" else None
    if period and period > 0 and offset is not None and abs(offset) >= period:
        name = "size_ms" if kind == "tumbling" else "slide_ms"
        yield Problem(
            (*loc, "offset_ms"),
            "offset_out_of_range",
            f"|offset_ms| must be less than {name} ({period})",
            offset,
        )


def _window_function(spec: Mapping[str, Any], allowed: Sequence[str]) -> Iterator[Problem]:
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
    if op.get("evictor") is not None and not has_fn:
        yield Problem(
            ("operator", "evictor"),
            "evictor_needs_elements",
            "an evictor needs the window's elements, but aggregations keep only an "
            "accumulator: use a window function, or drop the evictor",
            op.get("evictor"),
        )
    fn = _str(op.get("function"))
    if fn is not None:
        yield from _user_ref(("operator", "function"), fn, allowed)
    aggregations = _obj(op.get("aggregations"))
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


def _trigger(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    op = _window(spec)
    if op is None:
        return
    time = op.get("time", "event")
    if not isinstance(time, str) or time not in _DEFAULT_TRIGGER:  # a list is unhashable
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
    lateness = _int(op.get("allowed_lateness_ms"))
    if time == "processing" and lateness:
        yield Problem(
            ("operator", "allowed_lateness_ms"),
            "lateness_in_processing_time",
            "processing-time windows have no late records: leave allowed_lateness_ms out",
            lateness,
        )


def _keyed_process(spec: Mapping[str, Any], allowed: Sequence[str]) -> Iterator[Problem]:
    op = _obj(spec.get("operator"))
    if op is None or op.get("type") != "keyed_process":
        return
    fn = _str(op.get("function"))
    if fn is None:
        return
    if fn in BUILTIN_PROCESS_FUNCTIONS:
        params = _obj(op.get("params", {}))  # left out: {} (required params are reported)
        if params is not None:
            yield from _builtin_params(fn, params)
    elif ":" in fn:
        yield from _user_ref(("operator", "function"), fn, allowed)
    else:
        yield Problem(
            ("operator", "function"),
            "unknown_function",
            f"{fn!r} is not a built-in ({', '.join(sorted(BUILTIN_PROCESS_FUNCTIONS))}) "
            "nor a 'package.module:Name' reference",
            fn,
        )


_PARAM_PATH = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)$")


def _builtin_params(fn: str, params: Mapping[str, Any]) -> Iterator[Problem]:
    """Params of a built-in, checked by the built-in itself (``"field: message"`` each)."""
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


def _user_ref(loc: Loc, ref: str, allowed: Sequence[str]) -> Iterator[Problem]:
    try:
        module, _ = parse_ref(ref)
        check_allowed(module, allowed)
    except UdfError as exc:
        kind = "function_not_allowed" if "not allowed" in str(exc) else "function_ref_invalid"
        yield Problem(loc, kind, str(exc), ref)


def _topics(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    source = _obj(spec.get("source"))
    raw_topics = source.get("topics") if source is not None else None
    topics = raw_topics if isinstance(raw_topics, list) else []
    seen: set[str] = set()
    for i, topic in enumerate(topics):
        if isinstance(topic, str):
            if topic in KAFKA_REFUSED_TOPICS:
                yield _refused_topic(("source", "topics", i), topic)
            elif topic in seen:
                yield Problem(("source", "topics", i), "duplicate_topic", "listed twice", topic)
            seen.add(topic)
    sink = _obj(spec.get("sink"))
    if sink is None:
        return
    sink_topics: dict[str, str] = {}
    for field in ("topic", "late_topic", "dead_letter_topic"):
        topic = _str(sink.get(field))
        if topic is None:
            continue
        if topic in KAFKA_REFUSED_TOPICS:
            yield _refused_topic(("sink", field), topic)
        elif topic in seen:
            yield Problem(
                ("sink", field),
                "sink_is_source",
                f"{topic!r} is also a source topic: the pipeline would consume its own output",
                topic,
            )
        elif topic in sink_topics:
            yield Problem(
                ("sink", field),
                "sink_topics_not_distinct",
                f"{topic!r} is already the sink's {sink_topics[topic]}: each output needs "
                "its own topic",
                topic,
            )
        elif topic.startswith("clockwork."):
            yield Problem(
                ("sink", field),
                "reserved_topic",
                "topics starting with 'clockwork.' are the service's own (pipeline store, "
                "changelogs)",
                topic,
            )
        sink_topics.setdefault(topic, field)
    main = _str(sink.get("topic"))
    if main is not None and sink.get("dead_letter_topic") is None:
        default = f"{main}.dlq"
        if default in seen or sink_topics.get(default) in ("topic", "late_topic"):
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
    op = _obj(spec.get("operator"))
    event_window = (
        op is not None and op.get("type") == "window" and op.get("time", "event") == ("event")
    )
    if sink.get("late_topic") is not None and op is not None and not event_window:
        yield Problem(
            ("sink", "late_topic"),
            "late_topic_unused",
            "only event-time windows have late records",
            sink.get("late_topic"),
        )


def _key(spec: Mapping[str, Any], allowed: Sequence[str]) -> Iterator[Problem]:
    key = _obj(spec.get("key"))
    if key is None:
        return
    if key.get("partitioned") is True and key.get("shuffle_partitions") is not None:
        yield Problem(
            ("key", "shuffle_partitions"),
            "shuffle_unused",
            "a source declared partitioned by the key is not shuffled: drop "
            "shuffle_partitions, or partitioned",
            key.get("shuffle_partitions"),
        )


def _refused_topic(loc: Loc, topic: str) -> Problem:
    return Problem(loc, "invalid_topic_name", "Kafka refuses the topic names '.' and '..'", topic)


def _steps(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    """Every problem of every expression of the steps (syntax, unknown functions, arity,
    unsupported syntax), each at its JSON path with its column in the expression."""
    steps = spec.get("steps")
    if not isinstance(steps, list):
        return
    for index, step in enumerate(steps):
        if not isinstance(step, Mapping):
            continue
        expressions: list[tuple[Loc, Any]] = []
        if isinstance(step.get("filter"), str):
            expressions.append((("steps", index, "filter"), step["filter"]))
        assignments = _obj(step.get("set"))
        if assignments is not None:
            expressions.extend(
                (("steps", index, "set", name), text)
                for name, text in assignments.items()
                if isinstance(text, str)
            )
        for loc, text in expressions:
            for problem in check_expression(text):
                yield Problem(loc, "invalid_expression", str(problem), text)


def _delivery(spec: Mapping[str, Any], _: Sequence[str]) -> Iterator[Problem]:
    if spec.get("delivery") != "exactly_once":
        return
    source = _obj(spec.get("source"))
    topics = source.get("topics") if source is not None else None
    if isinstance(topics, list) and len(topics) > 1:
        yield Problem(
            ("delivery",),
            "exactly_once_one_topic",
            "exactly_once reads one source topic: each source partition has a "
            "transactional producer, and the outputs of two topics' same-numbered "
            "partitions would share one (run a pipeline per topic)",
            "exactly_once",
        )


_RULES: tuple[Rule, ...] = (
    _steps,
    _key,
    _timestamp,
    _watermark,
    _assigner,
    _window_function,
    _trigger,
    _keyed_process,
    _topics,
    _delivery,
)
