"""What several parts of a session read of it, each group declared once.

Each part (the loop, the checkpointer, the assignment, the reporter, the stages)
declares what it uses as a protocol beside itself, made of the groups here that it uses
whole and the members that are its business alone, so that no part sees more of the
session than it uses. A member whose type a part reads only in part (the emitter, the
checkpointer, the reporter) is declared by each part with a protocol of what it calls
of it, never as the class: the loop cannot revoke a partition's watermark, nor the
assignment checkpoint on time.
"""

from __future__ import annotations

from typing import Any, Protocol

from aiokafka import TopicPartition

from service.core.alignment import WatermarkAlignment
from service.core.time import Clock
from service.runtime.consumer_group.pauses import PauseControl
from service.runtime.consumer_group.pending_input import PendingInput
from service.runtime.consumer_group.stages import Stage
from service.runtime.definition import PipelineDefinition
from service.runtime.kafka.batch_producer import BatchProducer
from service.runtime.kafka.transactions import PartitionTransactions
from service.runtime.partition.sinks import OutputSink
from service.runtime.partition.task import PartitionTask


class SessionBasics(Protocol):
    """Whose session it is and what time it is: every part logs the one and reads the
    other."""

    @property
    def name(self) -> str: ...
    @property
    def clock(self) -> Clock: ...


class RunsStage(Protocol):
    """The pipeline the session runs and the stage of it: fixed for its life."""

    @property
    def definition(self) -> PipelineDefinition: ...
    @property
    def stage(self) -> Stage: ...


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
    """The partitions a session holds and the places a held partition is in besides the
    watermark emitter: what the loop works on and the assignment changes."""

    @property
    def partitions(self) -> dict[TopicPartition, PartitionTask]: ...
    @property
    def pending(self) -> dict[TopicPartition, PendingInput]: ...
    @property
    def pauses(self) -> PauseControl: ...
    @property
    def alignment(self) -> WatermarkAlignment[TopicPartition] | None: ...
