"""The stages a pipeline runs as: what each consumer-group membership reads and does.

A pipeline keyed by the Kafka key, or by a payload field the source is declared to be
partitioned by, runs as one stage, :class:`KeyedStage`: each source partition is a shard
of state with its own keyed operator. A pipeline keyed by any other payload field runs
as two (semantics.md section 8), each with a consumer group of its own:

- :class:`RouteStage` reads the source partitions, decodes them, takes key and
  timestamp, and writes each record to the shuffle partition of its key, with watermark
  markers (``runtime/shuffle/``); it keeps no state but its position and its
  partitions' watermark generators;
- :class:`ShuffledStage` reads the shuffle partitions and runs the keyed operator per
  shuffle partition, its watermark the minimum of the markers
  (:class:`~service.core.shuffle.ShuffleInput`).

A lookup join runs as one stage too, :class:`LookupStage`: a keyed stage over the left
input's partitions, each joined against the table this replica reads whole
(``table_reader.py``), never shuffled.

A :class:`~service.runtime.consumer_group.session.Session` runs one stage; everything
else about it (the fetch loop, checkpoints, rebalances, restores) is the same for all
of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any, Protocol, cast

from aiokafka import TopicPartition

from service.core.partitioner import KeyPartitioner
from service.core.shuffle import ShuffleInput
from service.core.state_cache import StateMaps
from service.core.time import Clock
from service.core.watermarks import WatermarkGenerator, make_generator
from service.operators.base import Operator
from service.operators.join.inputs import SidedJoin, TwoInputOperator
from service.operators.join.lookup import LookupTable
from service.operators.join.rows import Side
from service.runtime.consumer_group.route_markers import announces_idle
from service.runtime.consumer_group.table_reader import TableReader
from service.runtime.definition import PipelineDefinition, StateBackedFactory, WatermarkSettings
from service.runtime.factories import LookupJoinFactory, PerPartitionFactory
from service.runtime.formats.schemas import WriterSchemas
from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.observability.metrics import RuntimeMetrics
from service.runtime.partition.decoding import Decoder, RecordDecoder, TableDecoder
from service.runtime.partition.partitioning_check import PartitioningCheck
from service.runtime.partition.sinks import OriginOf, fetched_origin
from service.runtime.partition.task import PartitionTask
from service.runtime.pipeline_topics.trim import ShuffleTrimmer
from service.runtime.settings import RuntimeSettings
from service.runtime.shuffle.reader import RoutedOrigin, ShuffleDecoder
from service.runtime.shuffle.table_writer import TableShuffleWriter
from service.runtime.shuffle.task import ShuffledPartitionTask
from service.runtime.shuffle.writer import ShuffleWriter


class StageSetup(Protocol):
    """What a stage uses of its session before the session reads anything
    (:meth:`Stage.prepare`, :meth:`Stage.ready`)."""

    @property
    def settings(self) -> RuntimeSettings: ...
    @property
    def metrics(self) -> RuntimeMetrics: ...
    def abort(self, exc: BaseException) -> None: ...
    def waiting(self, reason: str | None) -> None: ...


class PartitionBuilding(Protocol):
    """What a stage uses of its session to build a partition's operator and decoder
    (the checkpointer's restore calls it)."""

    @property
    def settings(self) -> RuntimeSettings: ...
    @property
    def decoder(self) -> Decoder: ...
    def batches_for(self, tp: TopicPartition) -> BatchProducer: ...


class MarkerWatermarks(Protocol):
    """What stage 1's markers ask of the watermark emitter."""

    def idle_advanced(self) -> int | None: ...
    def is_idle(self, tp: TopicPartition, now: int) -> bool: ...


class EmissionSession(Protocol):
    """What a stage uses of its session after a watermark emission (:meth:`Stage.on_emit`)."""

    @property
    def partitions(self) -> Mapping[TopicPartition, PartitionTask]: ...
    @property
    def emitter(self) -> MarkerWatermarks: ...


class Stage:
    """What one stage reads, how it builds a partition's parts, and how it ends."""

    name = "keyed"
    """``keyed`` (the keyed operator over the source), ``route`` or ``shuffled``."""
    reads_source = True
    """Whether its partitions are the pipeline's source partitions (records counted in
    ``clockwork_records_in``, bounded input ended by end offsets)."""

    def __init__(self, definition: PipelineDefinition) -> None:
        self.definition = definition
        self.watermark: WatermarkSettings = definition.watermark

    @property
    def topics(self) -> tuple[str, ...]:
        return self.definition.topics

    @property
    def group_id(self) -> str:
        return self.definition.group_id

    @property
    def start_from(self) -> str:
        return self.definition.start_from

    @property
    def prefetches(self) -> bool:
        """Whether the source may be read during the group join (prefetch.py); not a
        table's, whose tombstones only the partition's table decoder reads."""
        return not self.definition.table

    def prepare(self, session: StageSetup, counts: dict[str, int]) -> None:
        """Once per session, with the partition counts of the pipeline's topics."""

    async def ready(self, session: StageSetup) -> None:
        """Once per session, after :meth:`prepare` and before it reads anything or joins
        its group; an error fails the session."""

    def decoder(self) -> RecordDecoder:
        """The decoder a session shares between its partitions; a table's rows keyed by
        their primary key, the Kafka key (their group is read from the value later)."""
        definition = self.definition
        if definition.table:
            definition = replace(definition, key_field=None)
        return RecordDecoder(definition)

    def generator(self, tp: TopicPartition) -> WatermarkGenerator:
        """A new watermark generator for partition ``tp``."""
        wm = self.definition.watermark
        return make_generator(wm.strategy, wm.max_out_of_orderness_ms, wm.field)

    def partition_decoder(
        self, session: PartitionBuilding, tp: TopicPartition, generator: WatermarkGenerator
    ) -> Decoder:
        """The decoder of one partition (the session's, unless it needs the partition's
        own state); a table's tombstones decode to the value None."""
        if self.definition.table and isinstance(session.decoder, RecordDecoder):
            unnest = self.definition.steps is not None and self.definition.steps.has_unnest
            return TableDecoder(session.decoder, positioned=unnest)
        return session.decoder

    def writer_schemas(self, decoder: RecordDecoder, topic: str) -> WriterSchemas[Any] | None:
        """The registry's writer schemas the decoder of ``topic`` reads with, which the
        fetch loop fills before a batch is decoded (None: its format names none);
        ``decoder``: the session's."""
        return decoder.schemas

    def operator(
        self,
        session: PartitionBuilding,
        tp: TopicPartition,
        clock: Clock,
        state_map: StateMaps | None = None,
    ) -> Operator:
        factory = self.definition.operator_factory
        if state_map is not None and isinstance(factory, StateBackedFactory):
            return factory.with_state(clock, state_map)
        if isinstance(factory, PerPartitionFactory):
            return factory.for_partition(clock, f"{tp.topic}/{tp.partition}")
        return factory(clock)

    runs_operator = True
    """Whether this stage's partitions run the pipeline's operator (the route stage runs
    a shuffle writer instead): those keep the operator's state."""

    @property
    def task(self) -> type[PartitionTask]:
        """The partition task class of this stage's partitions."""
        return PartitionTask

    def input_check(self, tp: TopicPartition) -> PartitioningCheck | None:
        """What each slice of ``tp``'s input records is checked by before the operator."""
        return None

    def on_emit(self, session: EmissionSession, now: int) -> bool:
        """After every watermark emission (every tick, every record with
        ``interval_ms = 0``); True if it produced something."""
        return False

    def committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """After a checkpoint whose offset commit the group accepted."""

    def origin(self) -> OriginOf:
        """How the sink finds the input record behind a record this stage fetched (for
        late records and dead letters; after :meth:`prepare`)."""
        return fetched_origin

    async def close(self) -> None:
        """When the stage runner stops for good."""


class KeyedStage(Stage):
    """The keyed operator per source partition (the source is partitioned by the key)."""

    def __init__(self, definition: PipelineDefinition) -> None:
        super().__init__(definition)
        self.partitioners: dict[str, KeyPartitioner] = {}

    def prepare(self, session: StageSetup, counts: dict[str, int]) -> None:
        if self.definition.key_partitioned:  # the promise is checked per record
            self.partitioners = {t: KeyPartitioner(counts[t]) for t in self.definition.topics}

    def input_check(self, tp: TopicPartition) -> PartitioningCheck | None:
        partitioner = self.partitioners.get(tp.topic)
        return None if partitioner is None else PartitioningCheck(partitioner, tp.partition)


class LookupStage(KeyedStage):
    """A lookup join: the left input per source partition, each partition's operator
    over the table this replica holds whole (:class:`TableReader`, one per pipeline on
    the replica, kept across sessions). A session reads nothing before the table is
    loaded; a reader that fails (``max_rows`` exceeded, a topic gone) ends the session
    with its reason, and the next session reads the table again from the start."""

    def __init__(self, definition: PipelineDefinition) -> None:
        super().__init__(definition)
        factory = definition.operator_factory
        if not isinstance(factory, LookupJoinFactory):
            raise TypeError("a lookup join's operator factory is a LookupJoinFactory")
        self.factory = factory
        self.reader: TableReader | None = None
        self.sources: dict[TopicPartition, int] = {}

    @property
    def table(self) -> LookupTable | None:
        """The table in use (None before the first session)."""
        return self.reader.table if self.reader is not None else None

    def prepare(self, session: StageSetup, counts: dict[str, int]) -> None:
        super().prepare(session, counts)
        self.sources = {tp: n for n, tp in enumerate(source_numbers(self.definition, counts))}

    async def ready(self, session: StageSetup) -> None:
        reader = self.reader
        if reader is None or reader.failed is not None:
            if reader is not None:
                await reader.close()
            reader = TableReader(
                KafkaCluster.of(session.settings),
                session.settings,
                self.definition,
                self.factory.table(),
                session.metrics,
            )
            self.reader = reader
            reader.start()
        reader.on_failure = session.abort
        reader.on_waiting = session.waiting
        await reader.wait_loaded()

    def operator(
        self,
        session: PartitionBuilding,
        tp: TopicPartition,
        clock: Clock,
        state_map: StateMaps | None = None,
    ) -> Operator:
        assert self.reader is not None  # ready() made it
        return self.factory.build(clock, self.reader.table, self.sources[tp])

    async def close(self) -> None:
        if self.reader is not None:
            await self.reader.close()


def source_numbers(
    definition: PipelineDefinition, counts: Mapping[str, int]
) -> list[TopicPartition]:
    """Every source partition of the pipeline in the order that numbers them, the same
    on every replica and in both stages: the topics sorted, then the partitions."""
    return [
        TopicPartition(topic, partition)
        for topic in sorted(definition.topics)
        for partition in range(counts[topic])
    ]


class RouteStage(Stage):
    """Stage 1 of a shuffled pipeline: source partitions to the shuffle topic by key.

    A join's two inputs are routed into one shuffle topic: each source partition is
    decoded, timestamped and watermarked as its own input says (``as_input``)."""

    name = "route"
    runs_operator = False

    def __init__(self, definition: PipelineDefinition) -> None:
        super().__init__(definition)
        self.sources: dict[TopicPartition, int] = {}
        self.partitioner: KeyPartitioner | None = None
        self._inputs: dict[str, PipelineDefinition] = {}  # a join's: by topic
        self._decoders: dict[str, tuple[Decoder, RecordDecoder]] = {}

    @property
    def prefetches(self) -> bool:
        # a join's decoder is per input; a table's tombstones need the table decoder
        return self.definition.inputs is None and not self.definition.table

    def prepare(self, session: StageSetup, counts: dict[str, int]) -> None:
        # Every source partition of the pipeline gets a number, the same on every replica.
        self.sources = {tp: n for n, tp in enumerate(source_numbers(self.definition, counts))}
        self.partitioner = KeyPartitioner(counts[self.definition.shuffle_topic])
        definition = self.definition
        if definition.inputs is not None:
            self._inputs = {
                topic: definition.as_input(definition.input_of(topic))
                for topic in definition.topics
            }

    def _input(self, tp: TopicPartition) -> PipelineDefinition:
        return self._inputs.get(tp.topic, self.definition)

    def generator(self, tp: TopicPartition) -> WatermarkGenerator:
        wm = self._input(tp).watermark
        return make_generator(wm.strategy, wm.max_out_of_orderness_ms, wm.field)

    def partition_decoder(
        self, session: PartitionBuilding, tp: TopicPartition, generator: WatermarkGenerator
    ) -> Decoder:
        if not self._inputs:
            return super().partition_decoder(session, tp, generator)
        return self._input_decoder(tp.topic)[0]

    def writer_schemas(self, decoder: RecordDecoder, topic: str) -> WriterSchemas[Any] | None:
        if not self._inputs:
            return decoder.schemas
        return self._input_decoder(topic)[1].schemas  # each input its own format

    def _input_decoder(self, topic: str) -> tuple[Decoder, RecordDecoder]:
        """A join's decoder of ``topic`` (its input's), and the record decoder in it."""
        found = self._decoders.get(topic)
        if found is None:
            view = self._inputs[topic]
            records = RecordDecoder(view)
            decoder: Decoder = records
            inputs = self.definition.inputs
            assert inputs is not None
            if inputs[self.definition.input_of(topic)].table:
                unnest = view.steps is not None and view.steps.has_unnest
                decoder = TableDecoder(records, positioned=unnest)
            found = self._decoders[topic] = (decoder, records)
        return found

    def operator(
        self,
        session: PartitionBuilding,
        tp: TopicPartition,
        clock: Clock,
        state_map: StateMaps | None = None,
    ) -> Operator:
        assert self.partitioner is not None
        reads = self._input(tp)
        steps = reads.steps
        args = (
            partial(session.batches_for, tp),
            self.definition.shuffle_topic,
            self.partitioner,
            self.sources[tp],
            len(self.sources),
        )
        # the shuffle carries JSON: what the steps made, or what the format decoded
        reencode = steps is not None or reads.format.kind != "json"
        positioned = steps is not None and steps.has_unnest
        max_bytes = session.settings.shuffle_frame_max_bytes
        group = self.definition.key_field
        if self.definition.table and group is not None:
            # a table grouped by a field: versions by group, moved rows' deletes too
            return TableShuffleWriter(
                *args,
                group_field=group,
                reencode=reencode,
                positioned=positioned,
                max_frame_bytes=max_bytes,
            )
        return ShuffleWriter(
            *args, reencode=reencode, positioned=positioned, max_frame_bytes=max_bytes
        )

    def on_emit(self, session: EmissionSession, now: int) -> bool:
        """Markers: each source partition whose watermark or idleness changed says so
        to every shuffle partition (when it says idle: :func:`.route_markers.announces_idle`)."""
        emitter = session.emitter
        advanced = emitter.idle_advanced()  # idle_advance: event time runs on the clock
        is_idle = emitter.is_idle
        wrote = False
        for tp, part in session.partitions.items():
            writer = part.operator
            if not isinstance(writer, ShuffleWriter) or part.finished:
                continue
            if advanced is not None:
                wrote |= writer.announce(advanced, False)
                continue
            idle = announces_idle(is_idle(tp, now), part.lag())
            wrote |= writer.announce(part.generator.current_watermark, idle)
        return wrote


class ShuffledStage(Stage):
    """Stage 2 of a shuffled pipeline: the keyed operator per shuffle partition."""

    name = "shuffled"
    reads_source = False

    def __init__(self, definition: PipelineDefinition) -> None:
        super().__init__(definition)
        self.trimmer: ShuffleTrimmer | None = None
        self.sides: list[Side] = []
        """A join's: the input of each source partition number (prepare)."""
        self.origins = RoutedOrigin(())
        """The source partition of each number (prepare)."""
        # Idleness comes from the markers, declared upstream; never from silence here.
        self.watermark = replace(
            definition.watermark, idle_timeout_ms=None, idle_advance=False, max_drift_ms=None
        )

    @property
    def topics(self) -> tuple[str, ...]:
        return (self.definition.shuffle_topic,)

    @property
    def group_id(self) -> str:
        return self.definition.shuffle_group_id

    @property
    def start_from(self) -> str:
        return "earliest"  # every routed record counts, whenever this stage first starts

    @property
    def prefetches(self) -> bool:
        return False  # the decoder is per partition

    def generator(self, tp: TopicPartition) -> WatermarkGenerator:
        return ShuffleInput()

    def operator(
        self,
        session: PartitionBuilding,
        tp: TopicPartition,
        clock: Clock,
        state_map: StateMaps | None = None,
    ) -> Operator:
        """The keyed operator; a join's, fed by the side each record's source says."""
        factory = self.definition.operator_factory
        if state_map is not None and isinstance(factory, StateBackedFactory):
            operator = factory.with_state(clock, state_map)
        else:
            operator = factory(clock)
        if self.definition.inputs is None:
            return operator
        return SidedJoin(cast(TwoInputOperator, operator), self.sides)

    def partition_decoder(
        self, session: PartitionBuilding, tp: TopicPartition, generator: WatermarkGenerator
    ) -> Decoder:
        assert isinstance(generator, ShuffleInput)
        return ShuffleDecoder(generator)

    @property
    def task(self) -> type[PartitionTask]:
        return ShuffledPartitionTask

    def prepare(self, session: StageSetup, counts: dict[str, int]) -> None:
        definition = self.definition
        sources = source_numbers(definition, counts)
        self.origins = RoutedOrigin(sources)
        if definition.inputs is not None:
            self.sides = [Side(definition.input_of(tp.topic)) for tp in sources]
        if self.trimmer is None:
            self.trimmer = ShuffleTrimmer(
                KafkaCluster.of(session.settings),
                self.definition.name,
                session.settings.shuffle_trim_interval_s,
                session.metrics.shuffle_trims,
            )

    def committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        if self.trimmer is not None:
            self.trimmer.committed(offsets)

    def origin(self) -> OriginOf:
        return self.origins

    async def close(self) -> None:
        if self.trimmer is not None:
            await self.trimmer.close()


def stages_of(definition: PipelineDefinition) -> list[Stage]:
    """The stages ``definition`` runs as."""
    if definition.lookup:
        return [LookupStage(definition)]
    if definition.shuffle is None:
        return [KeyedStage(definition)]
    return [RouteStage(definition), ShuffledStage(definition)]
