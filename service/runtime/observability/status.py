"""What the runtime reports about a pipeline: plain frozen data the API serializes.

Snapshots are taken on request (``Runtime.status``), never kept up to date per record.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class UnknownPipeline(KeyError):
    """No pipeline with that name runs here (a status, or any other lookup by name)."""


class PipelineState(StrEnum):
    """The lifecycle of one pipeline on this replica (contract.md, status endpoint)."""

    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """One assigned source partition."""

    topic: str
    partition: int
    offset: int | None
    """The next offset to process."""
    end_offset: int | None
    """The fetch high watermark (bounded mode: the end captured at start)."""
    lag: int | None
    watermark: int | None
    """The partition's own watermark; None before its first record."""
    delivered_watermark: int | None
    """The watermark its operator was delivered (what windows and timers fire by and
    lateness is judged against; never goes back); None before the first."""
    idle: bool
    event_timers: int
    processing_timers: int
    windows_open: int
    keys: int
    records_in: int
    last_checkpoint_ms: int | None
    """Wall-clock time of the last completed checkpoint of this partition."""
    finished: bool
    aligned_paused: bool = False
    """Paused by watermark alignment: its watermark is more than ``max_drift_ms`` ahead."""
    drift_ms: int | None = None
    """How far its watermark is ahead of the combined one (0 if not); None before both."""
    held_records: int = 0
    """Fetched records held back by watermark alignment until the others catch up."""
    stage: str = "keyed"
    """The stage it belongs to: ``keyed`` (the operator over the source), ``route``
    (a source partition routed into the shuffle) or ``shuffled`` (the operator over a
    shuffle partition)."""
    shuffle: dict[str, Any] | None = None
    """Stage-specific numbers: a routed partition's records routed and frames written; a
    shuffle partition's frames read and rows per frame, markers received per source
    partition, idle sources and replays dropped; a partition whose source is declared
    partitioned by the key, the records whose key belongs to another partition."""
    max_lead_ms: int | None = None
    """The largest lead of its watermark over the other partitions' minimum after any
    processed batch (alignment keeps it within ``max_drift_ms`` plus one record's step)."""
    bad_values: dict[str, dict[str, int]] | None = None
    """Values an aggregation could not take, ``{field: {reason: count}}``, since the
    partition was assigned here (None: none)."""
    standbys: tuple[str, ...] = ()
    """The members keeping a warm copy of it (standby replicas, by member name), as the
    last rebalance placed them."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "end_offset": self.end_offset,
            "lag": self.lag,
            "watermark": self.watermark,
            "delivered_watermark": self.delivered_watermark,
            "idle": self.idle,
            "event_timers": self.event_timers,
            "processing_timers": self.processing_timers,
            "windows_open": self.windows_open,
            "keys": self.keys,
            "records_in": self.records_in,
            "last_checkpoint_ms": self.last_checkpoint_ms,
            "finished": self.finished,
            "aligned_paused": self.aligned_paused,
            "drift_ms": self.drift_ms,
            "held_records": self.held_records,
            "max_lead_ms": self.max_lead_ms,
            "stage": self.stage,
            **({"shuffle": self.shuffle} if self.shuffle is not None else {}),
            "bad_values": self.bad_values or {},
            "standbys": list(self.standbys),
        }


@dataclass(frozen=True, slots=True)
class StandbyStatus:
    """One warm copy this member keeps of a partition another member owns."""

    topic: str
    partition: int
    position: int | None
    """The changelog offset of the last checkpoint applied (None: none yet)."""
    offset: int | None
    """The source offset that checkpoint resumes at (what the copy reflects)."""
    lag: int | None
    """Changelog records not yet applied: not read yet, or of a checkpoint not complete
    (None before the tail's first fetch answered)."""
    keys: int
    stage: str = "keyed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "stage": self.stage,
            "position": self.position,
            "offset": self.offset,
            "lag": self.lag,
            "keys": self.keys,
        }


@dataclass(frozen=True, slots=True)
class StageStatus:
    """One stage of a pipeline that runs as several (a keyed shuffle)."""

    name: str
    state: PipelineState
    reason: str | None
    watermark: int | None = None
    """The stage's combined watermark over its partitions held here."""
    records_in: int = 0
    loop_turns: int = 0
    partitions_finished: int | None = None
    partitions_total: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state.value,
            "reason": self.reason,
            "watermark": self.watermark,
            "records_in": self.records_in,
            "loop_turns": self.loop_turns,
            "partitions_finished": self.partitions_finished,
            "partitions_total": self.partitions_total,
        }


@dataclass(frozen=True, slots=True)
class LookupTableStatus:
    """A lookup join's table on this replica."""

    input: str
    rows: int
    """Keys held now."""
    max_rows: int
    loaded: bool
    """The topic was read whole (the left input waits until then)."""
    updates: int
    """Table records applied since the table was last read from the start."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "rows": self.rows,
            "max_rows": self.max_rows,
            "loaded": self.loaded,
            "updates": self.updates,
        }


@dataclass(frozen=True, slots=True)
class PipelineStatus:
    """One pipeline on this replica."""

    name: str
    state: PipelineState
    reason: str | None
    """Why the pipeline failed, or the error it is retrying after."""
    watermark: int | None
    """The combined watermark: the minimum over the partitions held here that are
    neither idle nor finished; None before the first. It goes down when a partition
    joins behind it; the watermark delivered to each operator never does."""
    partitions: tuple[PartitionStatus, ...]
    records_in: int
    restarts: int
    loop_turns: int = 0
    """Fetches the consumer loop made in this session: it moves while the pipeline is
    alive, paused or not (what shows a paused pipeline had its chances to consume)."""
    idle_advancing: bool = False
    """Every partition is idle and event time follows the wall clock (``idle_advance``)."""
    finished_here: tuple[str, ...] = ()
    """Bounded input: the partitions (``topic/partition``) this replica read to their end."""
    partitions_finished: int | None = None
    """Bounded input: partitions of the whole pipeline finished (on any replica), as the
    group's committed offsets said at the last look; None before it."""
    partitions_total: int | None = None
    """Bounded input: partitions of the whole pipeline."""
    stages: tuple[StageStatus, ...] = ()
    """A pipeline with a keyed shuffle: its two stages (``route``, ``shuffled``)."""
    lookup_table: LookupTableStatus | None = None
    """A lookup join's table on this replica (None before its first read starts)."""
    standbys: tuple[StandbyStatus, ...] = ()
    """The warm copies this replica keeps of partitions other members own."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state.value,
            "reason": self.reason,
            "watermark": self.watermark,
            "records_in": self.records_in,
            "restarts": self.restarts,
            "loop_turns": self.loop_turns,
            "idle_advancing": self.idle_advancing,
            "finished_here": list(self.finished_here),
            "partitions_finished": self.partitions_finished,
            "partitions_total": self.partitions_total,
            "partitions": [p.to_dict() for p in self.partitions],
            "standbys": [s.to_dict() for s in self.standbys],
            **({"stages": [s.to_dict() for s in self.stages]} if self.stages else {}),
            **(
                {"lookup_table": self.lookup_table.to_dict()}
                if self.lookup_table is not None
                else {}
            ),
        }
