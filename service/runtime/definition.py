"""What the runtime needs to run one pipeline, as plain frozen data.

The API layer validates a pipeline spec (pydantic) and ``build()``s one of these; the
runtime never sees pydantic, and tests can build definitions directly. Keeping the
spec's raw JSON beside the built parts lets the runtime report it and decide whether a
replacement can keep the state (same ``state_fingerprint``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from service.core.state_cache import StateMaps
from service.core.time import Clock
from service.operators.base import Operator
from service.operators.steps import StepProgram
from service.runtime.formats.registry import FormatName, schema_type
from service.runtime.pipeline_topics.names import (
    changelog_topic,
    group_id,
    keyed_group_id,
    shuffle_topic,
)

OperatorFactory = Callable[[Clock], Operator]
"""Builds a fresh operator instance for one partition."""


@runtime_checkable
class StateBackedFactory(Protocol):
    """An operator factory whose operators can keep their keyed state in RocksDB: a
    window over a stream, a running aggregate, a Top-N, a keyed process function, a join
    of any kind but lookup (the spec's rule ``rocksdb_state_supported`` refuses the
    others)."""

    def __call__(self, clock: Clock) -> Operator: ...

    def with_state(self, clock: Clock, state_map: StateMaps) -> Operator:
        """An operator keeping its keyed state in the named maps ``state_map`` makes."""


@dataclass(frozen=True, slots=True)
class StateSettings:
    """Where the pipeline's keyed state lives (the spec's ``state``)."""

    backend: Literal["memory", "rocksdb"] | None = None
    """None: the service's ``SERVICE_STATE_BACKEND``."""
    cache_bytes: int = 64 * 1024 * 1024
    """With rocksdb: each partition's write-back cache, in bytes."""
    standby_replicas: int | None = None
    """With rocksdb: the members keeping a warm copy of each partition besides its
    owner; None: the service's ``SERVICE_STANDBY_REPLICAS``."""


@dataclass(frozen=True, slots=True)
class TimestampSettings:
    """Where a record's event time comes from (semantics.md section 2)."""

    source: Literal["field", "kafka"] = "kafka"
    field: str | None = None
    format: Literal["epoch_millis", "epoch_seconds", "iso8601"] = "epoch_millis"


@dataclass(frozen=True, slots=True)
class WatermarkSettings:
    """How each partition's watermark is generated and how they are combined.

    The spec's ``WatermarkSpec`` without pydantic: the same fields, names and defaults
    (``tests/pipeline_spec/test_build.py``), copied field for field by the spec's build, so a new
    watermark setting is declared in the model and read here, and nowhere else."""

    strategy: Literal[
        "bounded_out_of_orderness", "ascending", "strictly_ascending", "punctuated"
    ] = "bounded_out_of_orderness"
    max_out_of_orderness_ms: int = 0
    field: str | None = None
    interval_ms: int = 200
    """0 = recompute after every record."""
    idle_timeout_ms: int | None = None
    idle_advance: bool = False
    """Let event time follow the wall clock when every partition is idle (issue 10)."""
    max_drift_ms: int | None = None
    """Pause partitions whose watermark runs ahead of the combined one by more (issue 10)."""


@dataclass(frozen=True, slots=True)
class ShuffleSettings:
    """A keyed shuffle: the pipeline runs as two stages through an internal topic."""

    partitions: int | None = None
    """The shuffle topic's partition count; None: the widest source topic's."""


@dataclass(frozen=True, slots=True)
class FormatSettings:
    """How a source's record values are encoded (runtime/formats/, docs/formats.md)."""

    kind: FormatName = "json"
    avro_schema: str | None = None
    """Raw Avro: the writer schema of every record (JSON text), no registry; None: the
    Confluent wire format, each record's writer schema fetched by its id."""

    @property
    def uses_registry(self) -> bool:
        return self.kind != "json" and self.avro_schema is None


@dataclass(frozen=True, slots=True)
class SinkSettings:
    topic: str
    dead_letter_topic: str
    late_topic: str | None = None
    format: FormatName = "json"
    """How results are encoded; late records and dead letters keep their input's bytes."""
    value_schema: str | None = None
    """Not ``json``: the results' schema as the registry takes it (Avro's or JSON
    Schema's JSON text, ``.proto`` text), registered under ``<topic>-value``."""

    @property
    def subject(self) -> str:
        """The registry subject of the results' values (Confluent's topic naming)."""
        return f"{self.topic}-value"

    @property
    def schema_type(self) -> str:
        """The registry's type of ``value_schema``: ``AVRO``, ``PROTOBUF``, ``JSON``."""
        return schema_type(self.format)


@dataclass(frozen=True, slots=True)
class InputSettings:
    """One named input of a join: its own topics, key, steps, timestamps and watermark
    (each as a one-input pipeline has them)."""

    name: str
    topics: tuple[str, ...]
    key_field: str | None = None
    steps: StepProgram | None = None
    timestamp: TimestampSettings = TimestampSettings()
    watermark: WatermarkSettings = WatermarkSettings()
    format: FormatSettings = FormatSettings()
    """This input's payload format (each input has its own: an Avro topic joined with a
    JSON one)."""
    table: bool = False
    """A versioned table (a temporal join's right input): a record with a null value is
    a tombstone of its Kafka key, at its Kafka timestamp."""


@dataclass(frozen=True, slots=True)
class PipelineDefinition:
    """One validated pipeline, ready to run."""

    name: str
    topics: tuple[str, ...]
    sink: SinkSettings
    operator_factory: OperatorFactory
    key_field: str | None = None
    """Dotted path into the payload; None = the Kafka record key as UTF-8 text."""
    shuffle: ShuffleSettings | None = None
    """Set: records are routed by key through the shuffle topic to the keyed stage
    (semantics.md section 8); None: the keyed operator reads the source directly."""
    key_partitioned: bool = False
    """The spec promises the source is partitioned by ``key_field`` as Kafka's default
    partitioner would (no shuffle); the promise is checked per record and counted."""
    steps: StepProgram | None = None
    """The spec's steps, compiled: run on each decoded record before its key and
    timestamp are taken (None: no steps)."""
    timestamp: TimestampSettings = TimestampSettings()
    watermark: WatermarkSettings = WatermarkSettings()
    start_from: Literal["earliest", "latest"] = "earliest"
    format: FormatSettings = FormatSettings()
    """The source's payload format (a join's: each input's, in ``inputs``; a lookup
    join's, the left input's)."""
    bounded: bool = False
    delivery: Literal["at_least_once", "exactly_once"] = "at_least_once"
    """``exactly_once``: each partition's outputs, changelog and offset commit in one
    Kafka transaction per checkpoint (transactions.py); inputs read ``read_committed``."""
    end_offsets: tuple[tuple[str, int, int], ...] | None = None
    """Bounded input: ``(topic, partition, end offset)`` of every source partition, read
    once when the pipeline was created, so every replica (and every restart) reads to
    the same ends; None: each session reads them when it starts."""
    spec: dict[str, Any] = field(default_factory=dict)
    """The spec as the user gave it (JSON), for status and the pipeline store."""
    state_fingerprint: str = ""
    """Equal fingerprints mean a replaced spec can keep the checkpointed state."""
    state: StateSettings = StateSettings()
    inputs: tuple[InputSettings, InputSettings] | None = None
    """A join's left and right input; ``topics`` is then every input's topics, and the
    pipeline runs through the shuffle (both inputs routed to the join's key); but see
    ``lookup``."""
    lookup: bool = False
    """A lookup join: the right input (``inputs[1]``) is a table every replica reads
    whole, outside the consumer group; ``topics``, ``key_field``, ``steps``,
    ``timestamp`` and ``watermark`` are the left input's, read by one keyed stage
    without a shuffle."""
    table: bool = False
    """The source is a table (``source.changelog: "upsert"``): each record is the row of
    its Kafka key (the primary key), a null value its delete; the records are decoded
    keyed by the Kafka key, and ``key_field``, if any, names the row's group (the route
    stage's retraction shuffle and the table aggregate read it from the value)."""
    state_epoch: int = 0
    """Bumped by every ``reset_state`` replacement (the pipeline store keeps it). Each
    epoch has its own consumer group and changelog, so a reset starts afresh on every
    replica at once: a replica still on the old epoch checkpoints into the old
    changelog, which the new epoch never reads."""

    def input_of(self, topic: str) -> int:
        """Which input of a join reads ``topic`` (0: left, 1: right)."""
        assert self.inputs is not None
        for side, settings in enumerate(self.inputs):
            if topic in settings.topics:
                return side
        raise KeyError(f"{topic} is no input's topic")

    def as_input(self, side: int) -> PipelineDefinition:
        """This pipeline as one input of its join reads: that input's topics, key, steps,
        timestamps and watermark (what the route stage decodes a partition with)."""
        assert self.inputs is not None
        settings = self.inputs[side]
        return replace(
            self,
            topics=settings.topics,
            key_field=settings.key_field,
            steps=settings.steps,
            timestamp=settings.timestamp,
            watermark=settings.watermark,
            format=settings.format,
        )

    @property
    def lookup_table(self) -> InputSettings | None:
        """A lookup join's table input; None for any other pipeline."""
        return self.inputs[1] if self.lookup and self.inputs is not None else None

    @property
    def exactly_once(self) -> bool:
        return self.delivery == "exactly_once"

    @property
    def isolation_level(self) -> str:
        """How the pipeline's consumers read: committed records only with exactly-once
        (aborted outputs of a shuffle's stage 1 or of an upstream producer never count)."""
        return "read_committed" if self.exactly_once else "read_uncommitted"

    @property
    def group_id(self) -> str:
        """One consumer group per pipeline and state epoch; every replica joins it."""
        return group_id(self.name, self.state_epoch)

    @property
    def changelog_topic(self) -> str:
        """Where the pipeline's per-partition state is checkpointed (this epoch's)."""
        return changelog_topic(self.name, self.state_epoch)

    @property
    def shuffle_topic(self) -> str:
        """The internal topic a shuffled pipeline routes records through (this epoch's)."""
        return shuffle_topic(self.name, self.state_epoch)

    @property
    def shuffle_group_id(self) -> str:
        """The keyed stage's consumer group when the pipeline shuffles."""
        return keyed_group_id(self.name, self.state_epoch)
