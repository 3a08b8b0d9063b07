"""The pipeline spec (contract.md, "Pipeline spec"): pydantic models, validated all at once.

Two layers, so a user sees *every* problem of a spec in one answer:

- the models check each field on its own (types, ranges, names, unknown fields); pydantic
  already reports all of those together;
- :mod:`service.pipeline_spec.rules` checks how fields fit together (slide vs size,
  trigger vs time domain, sink vs source topics, ...). Pydantic skips a model's "after"
  validators as soon as one of its fields failed, which would hide those problems behind
  the first one, so the rules run on the raw input from
  :meth:`PipelineSpec._every_problem`, a wrap validator that merges both lists into one
  :class:`~pydantic.ValidationError`.

Error locations are JSON paths into the spec (``("operator", "assigner", "size_ms")``):
pydantic puts the tag of a discriminated union into the location
(``operator.window.assigner.tumbling.size_ms``), which names no field the user wrote, so
those tags are taken out.

Every model is strict (no ``"5"`` for ``5``) and forbids unknown fields, and is frozen:
a validated spec is a value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from service.core.time import MAX_DURATION_MS
from service.operators.join.kinds import HowName, JoinKindName
from service.operators.steps import MAX_TEXT, STEP_KINDS
from service.operators.table.running import DEFAULT_EMIT_INTERVAL_MS
from service.operators.table.top_n import MAX_N
from service.operators.window.aggregate_kinds import AggregateName
from service.pipeline_spec import rules
from service.runtime.formats.registry import FormatName

__all__ = [
    "INPUT_NAME_PATTERN",
    "PIPELINE_NAME_PATTERN",
    "AggregateFn",
    "AggregateOperator",
    "Aggregation",
    "Assigner",
    "ContinuousTrigger",
    "CountEvictor",
    "CountTrigger",
    "DropStep",
    "EventTimeTrigger",
    "Evictor",
    "FilterStep",
    "GlobalAssigner",
    "InputSpec",
    "IntervalBounds",
    "JoinOperator",
    "KeySpec",
    "KeyedProcessOperator",
    "MapOperator",
    "OperatorSpec",
    "PipelineSpec",
    "ProcessingTimeTrigger",
    "SelectStep",
    "SessionAssigner",
    "SetStep",
    "SinkSpec",
    "SlidingAssigner",
    "SourceSpec",
    "Step",
    "TimeEvictor",
    "TimestampSpec",
    "TopNOperator",
    "TopNOrder",
    "Trigger",
    "TumblingAssigner",
    "UnnestStep",
    "WatermarkSpec",
    "WindowOperator",
    "validate_spec",
]

PIPELINE_NAME_PATTERN = r"^[a-z0-9._-]{1,64}$"
PipelineName = Annotated[str, StringConstraints(pattern=PIPELINE_NAME_PATTERN)]
"""1 to 64 of ``a-z 0-9 . _ -`` (it becomes part of topic and group names)."""

TopicName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,249}$")]
"""What Kafka accepts as a topic name."""

_PATH_PART = r"[^.\x00-\x20\x7f-\x9f\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+"
"""No dot, space or control character. Spelled out rather than as the class of spaces
(backslash-s), whose members differ between the service's regex engine (Rust) and a JSON
Schema validator's (ECMAScript: U+0085 and U+FEFF), so the two agree on every path."""

FieldPath = Annotated[
    str,
    StringConstraints(pattern=rf"^{_PATH_PART}(\.{_PATH_PART})*$", min_length=1, max_length=256),
]
"""A dotted path into the JSON payload: ``"user"``, ``"order.amount"``."""

OutputName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
"""An aggregation's output name in the result record."""

FunctionName = Annotated[str, StringConstraints(min_length=1, max_length=256)]
"""A built-in's name or ``package.module:Name``; checked by the rules."""

INPUT_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"
InputName = Annotated[str, StringConstraints(pattern=INPUT_NAME_PATTERN)]
"""A join input's name: it starts the field paths of ``select`` (``orders.amount``) and
names the input in late records' headers and metrics, so an identifier, lower case."""

MAX_MS = MAX_DURATION_MS
PositiveMs = Annotated[int, Field(gt=0, le=MAX_MS)]
MAX_LOOKUP_ROWS = 100_000_000
"""A lookup table's ``max_rows`` at most (every replica holds the table in memory)."""
NonNegativeMs = Annotated[int, Field(ge=0, le=MAX_MS)]
OffsetMs = Annotated[int, Field(ge=-MAX_MS, le=MAX_MS)]

AggregateFn = AggregateName
"""An aggregate function's name (the operators' list of them)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SourceSpec(_Model):
    """The topics a pipeline consumes and how far."""

    topics: Annotated[list[TopicName], Field(min_length=1, max_length=64)]
    format: FormatName = "json"
    """How the record values are encoded (docs/formats.md): ``json``; ``avro``,
    ``protobuf`` or ``json_schema`` in Confluent's wire format, each record's writer
    schema fetched from the schema registry by its id (``SERVICE_SCHEMA_REGISTRY_URL``);
    or raw Avro with ``avro_schema``."""
    avro_schema: dict[str, Any] | None = None
    """Raw Avro (no wire format, no registry): every record's writer schema."""
    start_from: Literal["earliest", "latest"] = "earliest"
    """Where a new consumer group starts; committed offsets win after that."""
    bounded: bool = False
    """Read up to the end offsets seen at start, fire everything, report ``finished``."""
    changelog: Literal["append", "upsert"] = "append"
    """``append``: every record is a new row (a stream). ``upsert``: the topic is a
    table (Flink's upsert-kafka): the Kafka key is a row's primary key, a key's new
    value replaces its old one and a null value (a tombstone) deletes it; a running
    aggregate or a Top-N over it takes each replaced or deleted row back (a version a
    ``filter`` step drops is its row's delete)."""


Expression = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TEXT)]
"""A SQL expression (Flink SQL / ksqlDB dialect); compiled and checked by the rules."""


class FilterStep(_Model):
    """Keep the record when the expression is TRUE (FALSE and NULL drop it)."""

    filter: Expression


class SetStep(_Model):
    """Computed or overwritten fields: every expression reads the record before the step."""

    set: Annotated[dict[FieldPath, Expression], Field(min_length=1, max_length=256)]


class SelectStep(_Model):
    """Keep only these fields."""

    select: Annotated[list[FieldPath], Field(min_length=1, max_length=256)]


class DropStep(_Model):
    """Remove these fields."""

    drop: Annotated[list[FieldPath], Field(min_length=1, max_length=256)]


class UnnestStep(_Model):
    """One record per element of the array at ``unnest``, the element at ``as``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)

    unnest: FieldPath
    as_: FieldPath = Field(alias="as")


def _step_tag(value: Any) -> str | None:
    if isinstance(value, Mapping):
        for key in value:
            if key in STEP_KINDS:
                return str(key)
        return None
    if isinstance(value, BaseModel):
        for name in STEP_KINDS:
            if name in type(value).model_fields:
                return name
    return None


Step = Annotated[
    Annotated[FilterStep, Tag("filter")]
    | Annotated[SetStep, Tag("set")]
    | Annotated[SelectStep, Tag("select")]
    | Annotated[DropStep, Tag("drop")]
    | Annotated[UnnestStep, Tag("unnest")],
    Discriminator(
        _step_tag,
        custom_error_type="step_kind",
        custom_error_message="a step is one object with one of filter, set, select, drop, unnest",
    ),
]


class KeySpec(_Model):
    """The key a pipeline groups by; omit the whole ``key`` to use the Kafka record key.

    A payload field as the key means a keyed shuffle (two stages through an internal
    topic) unless ``partitioned`` says the source is partitioned by it already."""

    field: FieldPath
    partitioned: bool = False
    """The source's producers partition it by this field with Kafka's default
    partitioner (the field's value as the Kafka key): no shuffle is needed. Checked per
    record; a broken promise is counted in status and metrics, never repaired."""
    shuffle_partitions: Annotated[int, Field(gt=0, le=10_000)] | None = None
    """The shuffle topic's partitions (the keyed stage's parallelism); default: the
    widest source topic's."""


class TimestampSpec(_Model):
    """``{"field": ..., "format": ...}`` or ``{"source": "kafka"}``."""

    source: Literal["field", "kafka"] | None = None
    """``kafka``: the record's timestamp; otherwise the payload ``field``."""
    field: FieldPath | None = None
    format: Literal["epoch_millis", "epoch_seconds", "iso8601"] = "epoch_millis"


class WatermarkSpec(_Model):
    """How each partition's watermark is generated and how often they are combined."""

    strategy: Literal[
        "bounded_out_of_orderness", "ascending", "strictly_ascending", "punctuated"
    ] = "bounded_out_of_orderness"
    max_out_of_orderness_ms: NonNegativeMs = 0
    field: FieldPath | None = None
    """``punctuated`` only: the payload field carrying the watermark."""
    interval_ms: NonNegativeMs = 200
    """How often the combined watermark is recomputed; 0 = after every record."""
    idle_timeout_ms: PositiveMs | None = None
    """A partition silent this long is left out of the minimum."""
    idle_advance: bool = False
    """When every partition is idle, let event time follow the wall clock."""
    max_drift_ms: NonNegativeMs | None = None
    """Pause partitions whose watermark runs ahead of the combined one by more."""


class TumblingAssigner(_Model):
    type: Literal["tumbling"]
    size_ms: PositiveMs
    offset_ms: OffsetMs = 0
    """Shifts the window boundaries (e.g. days in a time zone); ``|offset| < size``."""


class SlidingAssigner(_Model):
    type: Literal["sliding"]
    size_ms: PositiveMs
    slide_ms: PositiveMs
    offset_ms: OffsetMs = 0
    """``|offset| < slide``."""


class SessionAssigner(_Model):
    type: Literal["session"]
    gap_ms: PositiveMs


class GlobalAssigner(_Model):
    type: Literal["global"]


Assigner = Annotated[
    TumblingAssigner | SlidingAssigner | SessionAssigner | GlobalAssigner,
    Field(discriminator="type"),
]


class EventTimeTrigger(_Model):
    type: Literal["event_time"]
    purge: bool = False


class ProcessingTimeTrigger(_Model):
    type: Literal["processing_time"]
    purge: bool = False


class CountTrigger(_Model):
    type: Literal["count"]
    count: PositiveMs
    purge: bool = False


class ContinuousTrigger(_Model):
    type: Literal["continuous"]
    interval_ms: PositiveMs
    """Early firings every ``interval_ms`` of the window's time domain."""
    purge: bool = False


Trigger = Annotated[
    EventTimeTrigger | ProcessingTimeTrigger | CountTrigger | ContinuousTrigger,
    Field(discriminator="type"),
]


class CountEvictor(_Model):
    type: Literal["count"]
    max_count: PositiveMs
    after: bool = False
    """Evict after the window function instead of before."""


class TimeEvictor(_Model):
    type: Literal["time"]
    keep_ms: PositiveMs
    after: bool = False


Evictor = Annotated[CountEvictor | TimeEvictor, Field(discriminator="type")]


class Aggregation(_Model):
    """One output of an incremental aggregation: ``{"fn": "sum", "field": "amount"}``."""

    fn: AggregateFn
    field: FieldPath | None = None
    """Required by every function but ``count``."""
    by: FieldPath | None = None
    """``max_by``/``min_by`` only, and required there: ``field`` of the row with the
    largest/smallest ``by`` (ties: the earliest event time, then the first to arrive)."""


class WindowOperator(_Model):
    """A keyed window: assigner, trigger, optional evictor, and its function."""

    type: Literal["window"]
    assigner: Assigner
    time: Literal["event", "processing"] = "event"
    allowed_lateness_ms: NonNegativeMs = 0
    trigger: Trigger | None = None
    """Default: ``event_time`` for event-time windows, ``processing_time`` otherwise."""
    evictor: Evictor | None = None
    """Needs the element list: only with ``function``."""
    aggregations: Annotated[dict[OutputName, Aggregation], Field(min_length=1)] | None = None
    function: FunctionName | None = None
    """``package.module:Name``: a window function given all elements of the window."""
    on_bad_value: Literal["dead_letter", "skip"] = "dead_letter"
    """A value an aggregation cannot take ("abc" for sum): send the record to the
    dead-letter topic (``bad_value``, counted in no window), or ``skip``: aggregate the
    record with that field as NULL. Counted either way (status, metrics)."""


class KeyedProcessOperator(_Model):
    """A keyed process function with timers and keyed state."""

    type: Literal["keyed_process"]
    function: FunctionName
    params: dict[str, Any] = Field(default_factory=dict)


class IntervalBounds(_Model):
    """An interval join's match condition: ``l.ts + lower_ms <= r.ts <= l.ts + upper_ms``
    (inclusive; ``lower_ms`` may be negative, ``lower_ms <= upper_ms``)."""

    lower_ms: OffsetMs
    upper_ms: OffsetMs


JoinAssigner = Annotated[TumblingAssigner | SlidingAssigner, Field(discriminator="type")]


class JoinOperator(_Model):
    """A join of the pipeline's two ``inputs`` (semantics.md section 10): the key of each
    input is the join key."""

    type: Literal["join"]
    kind: JoinKindName
    how: HowName = "inner"
    """Which rows besides the matches; each kind takes some (the rules say which)."""
    left: InputName
    right: InputName
    between: IntervalBounds | None = None
    """``interval`` only, and required there."""
    assigner: JoinAssigner | None = None
    """``window`` only, and required there."""
    allowed_lateness_ms: NonNegativeMs = 0
    """How long past ``W`` a row still joins (``window``: with ``how: inner`` only;
    ``lookup`` and ``regular``: nothing is late, leave it out)."""
    max_rows: Annotated[int, Field(ge=1, le=MAX_LOOKUP_ROWS)] | None = None
    """``lookup`` only, and required there: the most keys its table may hold in memory
    (on every replica); one more fails the pipeline."""
    state_ttl_ms: PositiveMs | None = None
    """``regular`` only: drop a row once the join's watermark reaches its time plus this
    (Flink's ``table.exec.state.ttl``, in event time); without it every row is kept."""
    select: Annotated[dict[OutputName, Expression], Field(min_length=1, max_length=256)] | None = (
        None
    )
    """Output fields as SQL expressions over ``<input>.<path>`` (a missing side is
    NULL); without it the output is ``{"left": ..., "right": ...}``."""
    where: Expression | None = None
    """A condition over ``<input>.<path>`` of both inputs (SQL's ``WHERE`` over the joined
    rows): a row is emitted only when it is TRUE; a missing side reads as NULL."""


class MapOperator(_Model):
    """No state: every record, after the steps, is a result at once (a SQL ``SELECT``
    without a window or a join). The key only names the outputs: nothing is shuffled."""

    type: Literal["map"]
    fields: Annotated[list[OutputName], Field(min_length=1, max_length=256)] | None = None
    """The result keeps only these top-level fields, in this order (missing: null),
    chosen after the key and timestamp are read, so the time field may be left out;
    omitted: the whole record."""


class AggregateOperator(_Model):
    """A running aggregate: the aggregations of each key over all its records, with no
    window (a SQL ``GROUP BY`` without one). Its results are an upsert stream: each key's
    newest value, at most once per ``emit_interval_ms``, and a delete (a tombstone) when
    ``state_ttl_ms`` expires it (docs/pipeline-spec.md, "Running aggregates")."""

    type: Literal["aggregate"]
    aggregations: Annotated[dict[OutputName, Aggregation], Field(min_length=1)]
    emit_interval_ms: PositiveMs = DEFAULT_EMIT_INTERVAL_MS
    """Processing time between two emissions of a key (Flink's mini-batch): a key emits
    at most once per interval, its newest value. Under ``exactly_once`` delivery results
    are emitted at the checkpoints instead."""
    state_ttl_ms: PositiveMs | None = None
    """Processing time a key may go without a record before its state is dropped and a
    delete emitted (Flink's state TTL); without it every key is kept."""
    on_bad_value: Literal["dead_letter", "skip"] = "dead_letter"
    """As a window's: a value an aggregation cannot take dead-letters its record, or
    ``skip``: the record is aggregated with that field as NULL."""


class TopNOrder(_Model):
    """What a Top-N ranks by: one numeric field, the largest first unless ``desc`` is false."""

    field: FieldPath
    desc: bool = True


class TopNOperator(_Model):
    """Top-N: the best ``n`` rows of each key by ``order_by`` (SQL's ``ROW_NUMBER() OVER
    (PARTITION BY ... ORDER BY ...) <= n``). Its results are an upsert stream of rank
    rows, ``<key>|<rank>``, at most once per ``emit_interval_ms`` each
    (docs/pipeline-spec.md, "Top-N")."""

    type: Literal["top_n"]
    order_by: TopNOrder
    n: Annotated[int, Field(ge=1, le=MAX_N)]
    row_key: FieldPath | None = None
    """The field naming a row: a newer record of the row replaces it (Flink's unique key).
    Omitted: every record is a row of its own (append-only)."""
    emit_interval_ms: PositiveMs = DEFAULT_EMIT_INTERVAL_MS
    """Processing time between two emissions of a key's changed ranks (Flink's
    mini-batch). Under ``exactly_once`` delivery they are emitted at the checkpoints."""


OperatorSpec = Annotated[
    WindowOperator
    | KeyedProcessOperator
    | JoinOperator
    | MapOperator
    | AggregateOperator
    | TopNOperator,
    Field(discriminator="type"),
]


class SinkSpec(_Model):
    """Where results, late records and dead letters go."""

    topic: TopicName
    late_topic: TopicName | None = None
    """Late records (event-time windows); without it they are counted and dropped."""
    dead_letter_topic: TopicName | None = None
    """Records that cannot be decoded, timestamped or processed; default ``<topic>.dlq``."""
    format: FormatName = "json"
    """How results are encoded: ``json``, or ``avro``, ``protobuf`` or ``json_schema`` in
    Confluent's wire format with a schema derived from the aggregations, registered
    under ``<topic>-value``
    (docs/formats.md, "Results"). Late records and dead letters keep their input's bytes."""


class InputSpec(_Model):
    """One named input of a join: a stream as a one-input pipeline reads it."""

    source: SourceSpec
    steps: Annotated[list[Step], Field(max_length=64)] = Field(default_factory=list)
    key: KeySpec | None = None
    """The join key of this input; omitted: the Kafka record key as UTF-8 text."""
    timestamp: TimestampSpec = TimestampSpec(source="kafka")
    watermark: WatermarkSpec = WatermarkSpec()


MIN_STATE_CACHE_BYTES = 1024 * 1024
DEFAULT_STATE_CACHE_BYTES = 64 * 1024 * 1024
MAX_STANDBY_REPLICAS = 8


class StateSpec(_Model):
    """Where keyed state lives (docs/pipeline-spec.md, "State backends")."""

    backend: Literal["memory", "rocksdb"] | None = None
    """``memory``: in Python dicts. ``rocksdb``: one RocksDB per owned partition and stage
    under ``SERVICE_STATE_DIR``, behind a write-back cache of ``cache_bytes`` (a window,
    and a running aggregate over a stream without a state TTL, so far). Omitted: the
    service's ``SERVICE_STATE_BACKEND``, for the operators that support it."""
    cache_bytes: Annotated[int, Field(ge=MIN_STATE_CACHE_BYTES, le=1 << 40)] = (
        DEFAULT_STATE_CACHE_BYTES
    )
    """With rocksdb: the bytes of state each partition's cache holds in memory (counted at
    their encoded size plus ~300 B an entry: about what they take in memory)."""
    standby_replicas: Annotated[int, Field(ge=0, le=MAX_STANDBY_REPLICAS)] | None = None
    """With rocksdb: how many other replicas keep a warm copy of each partition's store,
    tailing its changelog, so that a failover replays only the tail (Kafka Streams'
    ``num.standby.replicas``). Omitted: the service's ``SERVICE_STANDBY_REPLICAS``."""


class PipelineSpec(_Model):
    """One pipeline as a user configures it over REST.

    Validate with :func:`validate_spec` (or ``model_validate(data, context=...)`` with
    ``{"allowed_modules": (...)}``): user functions are only accepted from the modules
    the service allows.
    """

    name: PipelineName
    source: SourceSpec | None = None
    """One stream; or ``inputs`` (a join's two), never both (the rules say so)."""
    inputs: Annotated[dict[InputName, InputSpec], Field(min_length=2, max_length=2)] | None = None
    """A join's two named inputs, each with its own source, steps, key, timestamp and
    watermark (then those four are not given here)."""
    steps: Annotated[list[Step], Field(max_length=64)] = Field(default_factory=list)
    """Applied in order to each decoded record, before the key and timestamp are taken."""
    key: KeySpec | None = None
    """Omitted: the Kafka record key as UTF-8 text."""
    timestamp: TimestampSpec = TimestampSpec(source="kafka")
    watermark: WatermarkSpec = WatermarkSpec()
    operator: OperatorSpec
    sink: SinkSpec
    delivery: Literal["at_least_once", "exactly_once"] = "at_least_once"
    """``exactly_once``: results, late records and dead letters appear to
    ``read_committed`` readers exactly once, at checkpoints (Kafka transactions; the
    broker must support them). ``at_least_once``: as soon as produced; a restart can
    repeat some, with the same ids."""
    state: StateSpec = StateSpec()
    """Where keyed state lives: ``memory`` or ``rocksdb``; a change keeps the state (both
    restore from the same changelog)."""

    @model_validator(mode="wrap")
    @classmethod
    def _every_problem(
        cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        """Run the field checks and the cross-field rules, and report both together."""
        problems: list[rules.Problem] = []
        result: Any = None
        try:
            result = handler(data)
        except ValidationError as exc:
            problems.extend(
                rules.Problem(_json_path(err["loc"]), err["type"], err["msg"], err.get("input"))
                for err in exc.errors(include_url=False)
            )
        if isinstance(data, Mapping):
            context = info.context if isinstance(info.context, Mapping) else {}
            service = rules.Service(
                tuple(context.get("allowed_modules", ())), context.get("schema_registry")
            )
            problems.extend(rules.check(data, service))
        if problems:
            raise ValidationError.from_exception_data(
                cls.__name__, [_line_error(p) for p in problems]
            )
        return result

    def to_json(self) -> dict[str, Any]:
        """The spec as JSON data, without defaults the user did not write."""
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)

    def sources(self) -> list[SourceSpec]:
        """What the pipeline reads: its ``source``, or each input's (a valid spec has
        one or the other)."""
        if self.inputs is not None:
            return [spec.source for spec in self.inputs.values()]
        return [] if self.source is None else [self.source]

    def topics(self) -> list[str]:
        """Every topic the pipeline reads, of every input."""
        return [topic for source in self.sources() for topic in source.topics]

    def stream_topics(self) -> list[str]:
        """The topics its consumer group reads (bounded input ends there): every topic
        but a lookup join's table, which each replica reads apart."""
        op = self.operator
        if isinstance(op, JoinOperator) and op.kind == "lookup" and self.inputs is not None:
            table = self.inputs.get(op.right)
            if table is not None:
                return [t for t in self.topics() if t not in table.source.topics]
        return self.topics()

    @property
    def bounded(self) -> bool:
        """Whether the pipeline reads to an end (every input agrees: the rules say so)."""
        return any(source.bounded for source in self.sources())


def validate_spec(
    data: Any, allowed_modules: Sequence[str], *, schema_registry: bool | None = None
) -> PipelineSpec:
    """Validate a spec; raises :class:`~pydantic.ValidationError` listing every problem.

    ``schema_registry``: whether the service has one (None: not asked, as for a stored
    spec; :class:`service.pipeline_spec.rules.Service`)."""
    return PipelineSpec.model_validate(
        data,
        context={"allowed_modules": tuple(allowed_modules), "schema_registry": schema_registry},
    )


_UNION_TAGS: dict[tuple[str | int, ...], frozenset[str]] = {
    ("operator",): frozenset({"window", "keyed_process", "join", "map", "aggregate", "top_n"}),
    ("operator", "assigner"): frozenset({"tumbling", "sliding", "session", "global"}),
    ("operator", "trigger"): frozenset({"event_time", "processing_time", "count", "continuous"}),
    ("operator", "evictor"): frozenset({"count", "time"}),
}


def _json_path(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Drop the union tags pydantic inserts, so the location is the user's JSON path."""
    out: list[str | int] = []
    skip_next = False
    for i, part in enumerate(loc):
        if _is_step(out) and isinstance(part, str) and part in STEP_KINDS and i + 1 < len(loc):
            continue  # a step's tag (the step's kind), not a field of it
        if skip_next:
            skip_next = False
            tags = _UNION_TAGS[tuple(out)]
            if isinstance(part, str) and part in tags:
                continue
        out.append(part)
        if tuple(out) in _UNION_TAGS:
            skip_next = True
    return tuple(out)


def _is_step(out: list[str | int]) -> bool:
    """Whether ``out`` is a step's path: ``steps.<i>``, or ``inputs.<name>.steps.<i>``."""
    if len(out) == 2:
        return out[0] == "steps" and isinstance(out[1], int)
    return len(out) == 4 and out[0] == "inputs" and out[2] == "steps" and isinstance(out[3], int)


def _line_error(problem: rules.Problem) -> InitErrorDetails:
    # The message is already rendered; without a context pydantic keeps it verbatim.
    return {
        "type": PydanticCustomError(problem.type, problem.msg),
        "loc": problem.loc,
        "input": problem.input,
    }
