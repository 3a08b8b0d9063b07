"""A validated spec -> the runtime's :class:`PipelineDefinition` (plain data, no pydantic).

The one place a definition is built from a spec. The operator comes from
:mod:`service.runtime.factories` (the factories tests and benchmarks also use), and
settings the runtime mirrors name for name (the watermark's) are copied field for
field, so a new field of the spec is read by its model and its reader, not here.

Also decides what a replacement may keep: :func:`state_fingerprint` hashes exactly the
parts of a spec that shape the checkpointed state (source topics: the partitions state
is keyed by; key; timestamp and watermark strategy: what event time means; operator:
what the state *is*; for a payload key, whether it shuffles and into how many partitions:
what the state's shards are). Interval, idleness, drift, sink topics and ``bounded``
only change how the pipeline runs, so a replacement that changes only those keeps its
state.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from service.core.errors import ConfigError
from service.core.watermarks import make_generator
from service.operators.join.kinds import JOIN_KINDS
from service.operators.join.projection import SelectError
from service.operators.join.rows import JoinConfigError
from service.operators.process import ProcessFunctionError
from service.operators.steps import StepProgram, StepsConfigError, compile_expression
from service.operators.udf import UdfError, load_user_object
from service.operators.window import WindowFunction
from service.pipeline_spec.models import (
    AggregateOperator,
    InputSpec,
    JoinOperator,
    KeyedProcessOperator,
    MapOperator,
    PipelineSpec,
    SourceSpec,
    Step,
    TimestampSpec,
    TopNOperator,
    WatermarkSpec,
    WindowOperator,
)
from service.pipeline_spec.sink_schemas import window_result_schema
from service.runtime.definition import (
    FormatSettings,
    InputSettings,
    OperatorFactory,
    PipelineDefinition,
    ShuffleSettings,
    SinkSettings,
    StateSettings,
    TimestampSettings,
    WatermarkSettings,
)
from service.runtime.factories import (
    MapOperatorFactory,
    join_operator_factory,
    process_operator_factory,
    running_aggregate_factory,
    top_n_factory,
    window_operator_factory,
)

__all__ = ["BuildError", "build_definition", "state_fingerprint"]


class BuildError(ValueError):
    """A valid spec whose operator cannot be built here: a user function that does not
    import, is not the right kind of class, or refuses its params. Only what needs the
    user's code imported is found here (a rule is pure: it imports nothing of the
    user's); every other refusal is a rule's (:mod:`service.pipeline_spec.rules`), and
    the BuildErrors marked "belt and braces" below guard invariants the rules already
    guarantee."""

    def __init__(self, loc: tuple[str | int, ...], msg: str) -> None:
        self.loc = loc
        self.msg = msg
        super().__init__(f"{'.'.join(map(str, loc))}: {msg}")


def state_fingerprint(spec: PipelineSpec) -> str:
    """Equal for two specs whose checkpointed state is interchangeable."""
    if spec.inputs is not None:
        return _digest(_join_shaping(spec, spec.inputs))
    if isinstance(spec.operator, MapOperator):
        # No state but the input positions: any other change goes on from them.
        return _digest({"topics": sorted(spec.topics()), "operator": {"type": "map"}})
    shaping: dict[str, Any] = {
        "topics": sorted(spec.topics()),
        "key": spec.key.field if spec.key is not None else None,
        "timestamp": spec.timestamp.model_dump(mode="json"),
        "watermark": {"strategy": spec.watermark.strategy, "field": spec.watermark.field},
        # How often a running aggregate or a Top-N emits, and when a running aggregate's
        # keys expire, leave what its state is as it is.
        "operator": spec.operator.model_dump(
            mode="json", exclude={"on_bad_value", "emit_interval_ms", "state_ttl_ms"}
        ),
    }
    if spec.source is not None and spec.source.changelog == "upsert":
        shaping["changelog"] = "upsert"  # a table's state keeps each row besides its groups
    shaping_steps = state_steps(spec)
    if shaping_steps:  # without steps the fingerprint is as it always was
        shaping["steps"] = shaping_steps
    if spec.key is not None:
        # What the state's shards are: the source partitions, or the shuffle's (and how
        # many). A pipeline keyed by the Kafka key never shuffles: its fingerprint is as
        # it always was.
        shaping["shards"] = (
            "source" if spec.key.partitioned else f"shuffle:{spec.key.shuffle_partitions}"
        )
    return _digest(shaping)


def _digest(shaping: dict[str, Any]) -> str:
    canonical = json.dumps(shaping, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def _join_shaping(spec: PipelineSpec, inputs: dict[str, InputSpec]) -> dict[str, Any]:
    """What a join's state is: per input, its topics (the source numbers rows carry),
    key, event time and every step (the join keeps whole rows, so each step changes
    what it holds; a table input, whose rows a join of tables keeps otherwise); the
    operator (``left``/``right`` included: which side a row is); and the shuffle's width
    (the state's shards)."""
    return {
        "inputs": {
            name: {
                # only a table says so: a stream input's fingerprint is as it always was
                **({"changelog": "upsert"} if spec_in.source.changelog == "upsert" else {}),
                "topics": sorted(spec_in.source.topics),
                "key": spec_in.key.field if spec_in.key is not None else None,
                "timestamp": spec_in.timestamp.model_dump(mode="json"),
                "watermark": {
                    "strategy": spec_in.watermark.strategy,
                    "field": spec_in.watermark.field,
                },
                "steps": [step.model_dump(mode="json", by_alias=True) for step in spec_in.steps],
            }
            for name, spec_in in inputs.items()
        },
        "operator": spec.operator.model_dump(mode="json"),
        "shards": (
            "source"  # a lookup join's state is per left partition (the table is read again)
            if isinstance(spec.operator, JoinOperator) and spec.operator.kind == "lookup"
            else f"shuffle:{_shuffle_partitions(inputs)}"
        ),
    }


Path = tuple[str, ...]


def _overlap(a: Path, b: Path) -> bool:
    """Whether one path is the other or inside it (a write to one changes the other)."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _step_reads(step: dict[str, Any]) -> list[Path]:
    texts: list[str] = []
    if "filter" in step:
        texts.append(step["filter"])
    if "set" in step:
        texts.extend(step["set"].values())
    reads = [tuple(field.split(".")) for field in ([step["unnest"]] if "unnest" in step else [])]
    for text in texts:
        reads.extend(compile_expression(text).fields)
    return reads


def state_steps(spec: PipelineSpec) -> list[dict[str, Any]]:
    """The steps that change what the state holds, as JSON, with their index.

    ``filter`` and ``unnest`` always do (they decide which records reach the state).
    ``set``, ``select`` and ``drop`` change values: they count when the operator keeps
    whole records (a window ``function``, a keyed process function), or when they write
    or remove a field that something after them reads -- the key, the timestamp or
    punctuated watermark field, an aggregated field, or an expression of a later step.
    A step that only shapes fields nothing downstream reads (say, a computed field the
    windows never aggregate) leaves the state as it is, so changing it keeps the state.
    """
    steps = [step.model_dump(mode="json", by_alias=True) for step in spec.steps]
    op = spec.operator
    aggregating = isinstance(op, AggregateOperator) or (
        isinstance(op, WindowOperator) and op.function is None
    )
    whole_records = not aggregating
    downstream: list[Path] = []
    for field in (
        spec.key.field if spec.key is not None else None,
        spec.timestamp.field,
        spec.watermark.field,
    ):
        if field is not None:
            downstream.append(tuple(field.split(".")))
    if isinstance(op, WindowOperator | AggregateOperator) and op.aggregations:
        downstream.extend(
            tuple(a.field.split(".")) for a in op.aggregations.values() if a.field is not None
        )
    kept: list[dict[str, Any]] = []
    for index in range(len(steps) - 1, -1, -1):  # backwards: what is read after a step
        step = steps[index]
        if "filter" in step or "unnest" in step or whole_records:
            relevant = True
        elif "set" in step:
            writes = [tuple(p.split(".")) for p in step["set"]]
            relevant = any(_overlap(w, r) for w in writes for r in downstream)
        elif "drop" in step:
            writes = [tuple(p.split(".")) for p in step["drop"]]
            relevant = any(_overlap(w, r) for w in writes for r in downstream)
        else:  # select: changes every read that is not inside a selected field
            selected = [tuple(p.split(".")) for p in step["select"]]
            relevant = any(not any(r[: len(s)] == s for s in selected) for r in downstream)
        if relevant:
            kept.append({"index": index, **step})
        downstream.extend(_step_reads(step))
        if "unnest" in step:
            downstream.append(tuple(step["as"].split(".")))
    kept.reverse()
    return kept


def build_definition(spec: PipelineSpec, allowed_modules: Sequence[str]) -> PipelineDefinition:
    """The runtime's definition of ``spec``.

    The operator factories (runtime/factories.py) build one operator instance up front,
    so a function that cannot be loaded is a :class:`BuildError` now (a 422) rather than
    a failed pipeline later.
    """
    if spec.inputs is not None:
        return _join_definition(spec, spec.inputs)
    if spec.source is None:  # the rules refuse it; belt and braces
        raise BuildError(("source",), "a pipeline reads a source, or a join's two inputs")
    factory = _operator_factory(spec, tuple(allowed_modules))
    stateless = isinstance(spec.operator, MapOperator)
    steps = _steps(spec.steps, ())
    _check_watermark(spec.watermark, ("watermark",))
    return PipelineDefinition(
        name=spec.name,
        topics=tuple(spec.source.topics),
        sink=_sink(spec),
        operator_factory=factory,
        key_field=spec.key.field if spec.key is not None else None,
        # A map keeps no state: its key only names the outputs, nothing is brought together.
        shuffle=(
            ShuffleSettings(partitions=spec.key.shuffle_partitions)
            if spec.key is not None and not spec.key.partitioned and not stateless
            else None
        ),
        key_partitioned=spec.key is not None and spec.key.partitioned and not stateless,
        steps=steps,
        timestamp=_timestamp(spec.timestamp),
        # Field for field: the runtime's settings mirror the model, name for name
        # (tests/pipeline_spec/test_build.py), so a new watermark setting needs no line here.
        watermark=WatermarkSettings(**spec.watermark.model_dump()),
        start_from=spec.source.start_from,
        format=_format(spec.source),
        bounded=spec.source.bounded,
        delivery=spec.delivery,
        spec=spec.to_json(),
        state_fingerprint=state_fingerprint(spec),
        table=spec.source.changelog == "upsert",
        state=StateSettings(
            backend=spec.state.backend,
            cache_bytes=spec.state.cache_bytes,
            standby_replicas=spec.state.standby_replicas,
        ),
    )


def _format(source: SourceSpec) -> FormatSettings:
    """How ``source``'s values are encoded (a pipeline's source, or a join input's)."""
    raw = source.avro_schema
    return FormatSettings(
        kind=source.format, avro_schema=json.dumps(raw) if raw is not None else None
    )


def _join_definition(spec: PipelineSpec, inputs: dict[str, InputSpec]) -> PipelineDefinition:
    """A join: both inputs routed through one shuffle to the join's key (always: the
    two inputs are partitioned apart), each decoded, stepped, timestamped and
    watermarked as its own spec says (:class:`InputSettings`)."""
    op = spec.operator
    if not isinstance(op, JoinOperator):  # the rules refuse it; belt and braces
        raise BuildError(("operator", "type"), "a pipeline with two inputs needs a join")
    sides = (op.left, op.right)
    if sides[0] == sides[1] or not set(sides) <= inputs.keys():
        raise BuildError(("operator",), "left and right name the two inputs")
    left, right = (_input_settings(name, inputs[name]) for name in sides)
    # A regular join's input with changelog 'upsert' is a table (the rules allow none
    # elsewhere): its tombstones delete rows, and the join's output is the joined table.
    tables = (
        inputs[op.left].source.changelog == "upsert",
        inputs[op.right].source.changelog == "upsert",
    )
    left, right = replace(left, table=tables[0]), replace(right, table=tables[1])
    if JOIN_KINDS[op.kind].right_is_table:  # a null value deletes its Kafka key
        right = replace(right, table=True)
    try:
        factory = join_operator_factory(
            spec.name,
            op.model_dump(mode="json", exclude_none=True),
            sides,
            late_output=spec.sink.late_topic is not None,
            tables=tables,
        )
    except SelectError as exc:  # the rules report these first; belt and braces
        field, msg = exc.problems[0]
        at: tuple[str, ...] = (
            ("operator", "where")
            if field is None
            else ("operator", "select", field)
            if field
            else ("operator",)
        )
        raise BuildError(at, msg) from exc
    except (JoinConfigError, ConfigError, TypeError, ValueError) as exc:  # belt and braces:
        # the model and the rules of rules/joins.py refuse every such spec first
        raise BuildError(("operator",), str(exc)) from exc
    first = inputs[op.left].source  # the rules make the inputs agree on what they share
    definition = PipelineDefinition(
        name=spec.name,
        topics=(*left.topics, *right.topics),
        sink=_sink(spec),
        operator_factory=factory,
        shuffle=ShuffleSettings(partitions=_shuffle_partitions(inputs)),
        watermark=_join_watermark(inputs[op.left].watermark, inputs[op.right].watermark),
        start_from=first.start_from,
        bounded=first.bounded,
        delivery=spec.delivery,
        spec=spec.to_json(),
        state_fingerprint=state_fingerprint(spec),
        inputs=(left, right),
    )
    if op.kind != "lookup":
        return definition
    # One keyed stage over the left input, no shuffle: every replica holds the table.
    return replace(definition.as_input(0), shuffle=None, lookup=True)


def _input_settings(name: str, spec: InputSpec) -> InputSettings:
    """One input as the route stage reads it (its key: ``key.field``, or the Kafka key)."""
    at = ("inputs", name)
    _check_watermark(spec.watermark, (*at, "watermark"))
    return InputSettings(
        name=name,
        topics=tuple(spec.source.topics),
        key_field=spec.key.field if spec.key is not None else None,
        steps=_steps(spec.steps, at),
        timestamp=_timestamp(spec.timestamp),
        watermark=WatermarkSettings(**spec.watermark.model_dump()),
        format=_format(spec.source),
    )


def _join_watermark(left: WatermarkSpec, right: WatermarkSpec) -> WatermarkSettings:
    """The settings the runtime applies to *all* of a join's source partitions at once
    (each input's generator is its own: strategy, bound and field, in
    :class:`InputSettings`).

    ``interval_ms``: the smaller of the two, so neither input's watermark is combined
    less often than its spec asks (recomputing more often changes no result, only the
    cost). Idleness, ``idle_advance`` and drift: one combiner and one alignment cover
    every source partition of both inputs, so the rules make the inputs agree on them
    (``inputs_disagree``) and they are taken from the left."""
    return WatermarkSettings(
        interval_ms=min(left.interval_ms, right.interval_ms),
        idle_timeout_ms=left.idle_timeout_ms,
        idle_advance=left.idle_advance,
        max_drift_ms=left.max_drift_ms,
    )


def _shuffle_partitions(inputs: dict[str, InputSpec]) -> int | None:
    """The shuffle's partitions: the largest ``key.shuffle_partitions`` an input gives
    (the join runs as wide as the widest asks), else None (the widest source topic's)."""
    given = [
        spec.key.shuffle_partitions
        for spec in inputs.values()
        if spec.key is not None and spec.key.shuffle_partitions is not None
    ]
    return max(given) if given else None


def _steps(steps: Sequence[Step], at: tuple[str | int, ...]) -> StepProgram | None:
    if not steps:
        return None
    try:
        return StepProgram([step.model_dump(mode="json", by_alias=True) for step in steps])
    except StepsConfigError as exc:  # the rules report these first; belt and braces
        raise BuildError((*at, *exc.problems[0][0]), exc.problems[0][1]) from exc


def _timestamp(ts: TimestampSpec) -> TimestampSettings:
    if ts.source == "kafka":
        return TimestampSettings(source="kafka")
    return TimestampSettings(source="field", field=ts.field, format=ts.format)


def _check_watermark(wm: WatermarkSpec, at: tuple[str | int, ...]) -> None:
    try:  # the rules say all this; building one is the proof the runtime agrees
        make_generator(wm.strategy, wm.max_out_of_orderness_ms, wm.field)
    except ConfigError as exc:
        raise BuildError(at, str(exc)) from exc


def _sink(spec: PipelineSpec) -> SinkSettings:
    value_schema = None
    op = spec.operator
    if spec.sink.format != "json":  # the rules allow it only with aggregations
        if not isinstance(op, WindowOperator) or op.aggregations is None:
            raise BuildError(("sink", "format"), "a result schema needs aggregations")
        aggregations = {name: agg.model_dump() for name, agg in op.aggregations.items()}
        value_schema = window_result_schema(spec.sink.format, spec.name, aggregations)
    return SinkSettings(
        topic=spec.sink.topic,
        dead_letter_topic=spec.sink.dead_letter_topic or f"{spec.sink.topic}.dlq",
        late_topic=spec.sink.late_topic,
        format=spec.sink.format,
        value_schema=value_schema,
    )


def _operator_factory(spec: PipelineSpec, allowed: tuple[str, ...]) -> OperatorFactory:
    """The spec's operator as a factory of the runtime's (one built now, as a check)."""
    op = spec.operator
    if isinstance(op, JoinOperator):  # the rules refuse it; belt and braces
        raise BuildError(("inputs",), "a join reads two inputs")
    function = None
    if isinstance(op, WindowOperator) and op.function is not None:
        function = _window_function(op.function, allowed)  # a BuildError of its own
    if isinstance(op, MapOperator):
        return MapOperatorFactory(spec.name, op.fields)
    try:
        if isinstance(op, AggregateOperator):
            table = spec.source is not None and spec.source.changelog == "upsert"
            return running_aggregate_factory(
                spec.name,
                op.model_dump(mode="json", exclude_none=True),
                emit_at_checkpoint=spec.delivery == "exactly_once",
                table=table,
                # over a table, the rows come keyed by primary key and name their group
                group_field=spec.key.field if table and spec.key is not None else None,
            )
        if isinstance(op, TopNOperator):
            table = spec.source is not None and spec.source.changelog == "upsert"
            return top_n_factory(
                spec.name,
                op.model_dump(mode="json", exclude_none=True),
                emit_at_checkpoint=spec.delivery == "exactly_once",
                table=table,
                # over a table, the rows come keyed by primary key and name their partition
                partition_by=spec.key.field if table and spec.key is not None else None,
            )
        if isinstance(op, KeyedProcessOperator):
            return process_operator_factory(spec.name, op.function, op.params, allowed)
        return window_operator_factory(
            spec.name,
            op.model_dump(mode="json", exclude_none=True),
            late_output=spec.sink.late_topic is not None,
            function=function,
        )
    except (ConfigError, ProcessFunctionError, UdfError, TypeError, ValueError) as exc:
        # A user process function that does not import or refuses its params (its own
        # from_params: user code); a window's config the rules refused first otherwise.
        loc: tuple[str | int, ...] = ("operator",)
        if isinstance(exc, UdfError):
            loc = ("operator", "function")
        raise BuildError(loc, str(exc)) from exc


def _window_function(ref: str, allowed: tuple[str, ...]) -> WindowFunction:
    """Load ``package.module:Name``: a callable ``(key, window, values)``, or a class
    whose no-argument instance is one."""
    try:
        obj = load_user_object(ref, allowed)
        if isinstance(obj, type):
            obj = obj()
    except UdfError as exc:
        raise BuildError(("operator", "function"), str(exc)) from exc
    except Exception as exc:  # a user class's constructor may raise anything
        raise BuildError(
            ("operator", "function"), f"creating {ref!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(obj):
        raise BuildError(
            ("operator", "function"),
            f"{ref!r} is {type(obj).__name__}, not a callable (key, window, values)",
        )
    function: WindowFunction = obj
    return function
