"""What every part of a session reads of it: which pipeline and stage it runs, with
which settings, clock and metrics.

Each part (the loop, the checkpointer, the assignment, the reporter) declares what it
uses as a protocol beside itself, extending :class:`SessionBasics` and, where it uses
them, :class:`SessionClients` and :class:`HeldPartitions`: so each member is written
down once, and a part's protocol lists only what is its own business.
"""

from __future__ import annotations

from typing import Any, Protocol

from aiokafka import TopicPartition

from service.core.alignment import WatermarkAlignment
from service.core.time import Clock
from service.runtime.consumer_group.pauses import PauseControl
from service.runtime.consumer_group.pending_input import PendingInput
from service.runtime.consumer_group.stages import Stage
from service.runtime.consumer_group.watermark_emitter import WatermarkEmitter
from service.runtime.definition import PipelineDefinition
from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.kafka.transactions import PartitionTransactions
from service.runtime.observability.metrics import RuntimeMetrics
from service.runtime.partition.sinks import OutputSink
from service.runtime.partition.task import PartitionTask
from service.runtime.settings import RuntimeSettings


class SessionBasics(Protocol):
    """The session's identity: fixed for its life."""

    @property
    def name(self) -> str: ...
    @property
    def definition(self) -> PipelineDefinition: ...
    @property
    def stage(self) -> Stage: ...
    @property
    def settings(self) -> RuntimeSettings: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def metrics(self) -> RuntimeMetrics: ...


class SessionClients(Protocol):
    """The session's Kafka clients and where outputs go (None before the start)."""

    @property
    def consumer(self) -> Any: ...
    @property
    def batches(self) -> BatchProducer | None: ...
    @property
    def transactions(self) -> PartitionTransactions | None: ...
    @property
    def sink(self) -> OutputSink | None: ...


class HeldPartitions(Protocol):
    """The partitions a session holds and every place a held partition is in: what
    the loop works on and the assignment changes."""

    @property
    def partitions(self) -> dict[TopicPartition, PartitionTask]: ...
    @property
    def pending(self) -> dict[TopicPartition, PendingInput]: ...
    @property
    def pauses(self) -> PauseControl: ...
    @property
    def alignment(self) -> WatermarkAlignment[TopicPartition] | None: ...
    @property
    def emitter(self) -> WatermarkEmitter: ...
