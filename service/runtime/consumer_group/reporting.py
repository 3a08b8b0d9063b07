"""What a session reports: partition status snapshots and the periodic metrics refresh.

Nothing here runs per record: the loop counts into plain integers on the partitions and
the sink, and :meth:`SessionReporter.refresh` moves those counts into the Prometheus
metrics every ``metrics_interval_s`` (and once more when a partition is revoked).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any, Protocol

from aiokafka import TopicPartition

from service.core.alignment import WatermarkAlignment
from service.core.shuffle import ShuffleInput
from service.core.time import MIN_TIMESTAMP
from service.operators.join.inputs import SidedJoin
from service.operators.join.rows import Side
from service.runtime.consumer_group.pauses import PauseControl
from service.runtime.consumer_group.pending_input import PendingInput
from service.runtime.consumer_group.views import RunsStage, SessionBasics
from service.runtime.consumer_group.watermark_emitter import WatermarkSnapshot
from service.runtime.observability.metrics import RuntimeMetrics
from service.runtime.observability.status import PartitionStatus
from service.runtime.partition.sinks import OutputSink
from service.runtime.partition.task import PartitionTask
from service.runtime.shuffle.reader import ShuffleDecoder
from service.runtime.shuffle.writer import ShuffleWriter


class ReportedWatermarks(Protocol):
    """What the reporter reads of the watermark emitter: a snapshot."""

    def snapshot(self, now: int) -> WatermarkSnapshot: ...


class ReportSession(SessionBasics, RunsStage, Protocol):
    """What the reporter reads of its session: the partitions and what holds them back,
    the combined watermark, and the sink, whose counts it takes."""

    @property
    def metrics(self) -> RuntimeMetrics: ...
    @property
    def partitions(self) -> Mapping[TopicPartition, PartitionTask]: ...
    @property
    def partitions_done(self) -> tuple[int, int]: ...
    @property
    def emitter(self) -> ReportedWatermarks: ...
    @property
    def alignment(self) -> WatermarkAlignment[TopicPartition] | None: ...
    @property
    def pauses(self) -> PauseControl: ...
    @property
    def pending(self) -> Mapping[TopicPartition, PendingInput]: ...
    @property
    def sink(self) -> OutputSink | None: ...
    def standby_placement(self) -> Mapping[TopicPartition, tuple[str, ...]]: ...


class SessionReporter:
    """Status and metrics of one session's partitions."""

    def __init__(self, session: ReportSession) -> None:
        self.session = session
        metrics = session.metrics
        self.records_in: dict[TopicPartition, Any] = {}
        """Per-partition ``records_in`` counters, looked up once per partition."""
        self.batch_seconds = metrics.batch_seconds.labels(session.name)
        self.lateness = metrics.processing_timer_lateness.labels(session.name)
        self.records_held = metrics.alignment_records_held.labels(session.name)
        self.last_refresh = 0.0
        self._alignment_reported = (0, 0)
        self._shuffle_reported: dict[TopicPartition, tuple[int, int, int]] = {}
        """Per partition: (routed, markers, replays) or mismatches, as last reported."""

    @property
    def prefetched(self) -> Any:
        """``clockwork_prefetched_records``: records the prefetcher read during the join,
        counted as the loop takes them (its series appears once the loop takes waiting
        input)."""
        return self.session.metrics.prefetched_records.labels(self.session.name)

    def records_counter(self, tp: TopicPartition) -> Any:
        """``clockwork_records_in`` of a source partition; a shuffle partition's records
        count in ``clockwork_shuffle_records_in`` (each source record counts once)."""
        counter = self.records_in.get(tp)
        if counter is None:
            metrics = self.session.metrics
            metric = (
                metrics.records_in
                if self.session.stage.reads_source
                else (metrics.shuffle_records_in)
            )
            counter = self.records_in[tp] = metric.labels(
                self.session.name, f"{tp.topic}/{tp.partition}"
            )
        return counter

    def shuffle_numbers(self, part: PartitionTask) -> dict[str, Any] | None:
        """The stage-specific numbers of a partition (PartitionStatus.shuffle)."""
        operator, generator, check = part.operator, part.generator, part.check
        if isinstance(operator, ShuffleWriter):
            return {"routed": operator.routed, "frames": operator.frames}
        if isinstance(generator, ShuffleInput):
            decoder = part.decoder
            frames = decoder.frames if isinstance(decoder, ShuffleDecoder) else 0
            rows = decoder.frame_rows if isinstance(decoder, ShuffleDecoder) else 0
            numbers: dict[str, Any] = {
                "frames": frames,
                "rows_per_frame": round(rows / frames, 1) if frames else None,
                "legacy_rows": decoder.legacy_rows if isinstance(decoder, ShuffleDecoder) else 0,
                "sources": generator.sources,
                "markers_received": {str(s): n for s, n in generator.markers_received().items()},
                "idle_sources": generator.idle_sources(),
                "replays_dropped": generator.replays,
            }
            if isinstance(operator, SidedJoin):  # each input's watermark and rows held
                numbers["inputs"] = {
                    name: {
                        "watermark": _or_none(generator.watermark_of(operator.sources_of(side))),
                        "rows_held": operator.rows_held(side),
                    }
                    for side, name in zip(Side, operator.join.inputs, strict=True)
                }
            return numbers
        if check is not None:
            return {"key_partition_mismatches": check.mismatches}
        return None

    def report_shuffle(self, part: PartitionTask) -> None:
        """Move a partition's stage-specific counts into the metrics (deltas)."""
        m = self.session.metrics
        name = self.session.name
        operator, generator, check = part.operator, part.generator, part.check
        if isinstance(operator, ShuffleWriter):
            now = (operator.routed, 0, 0)
        elif isinstance(generator, ShuffleInput):
            markers = sum(generator.markers_received().values())
            now = (0, markers, generator.replays)
        elif check is not None:
            now = (check.mismatches, 0, 0)
        else:
            return
        decoder = part.decoder
        if isinstance(decoder, ShuffleDecoder):
            frames, rows = decoder.take_frame_counts()
            if frames:
                label = (name, f"{part.tp.topic}/{part.tp.partition}")
                m.shuffle_frames.labels(*label).inc(frames)
                m.shuffle_frame_rows.labels(*label).inc(rows)
        before = self._shuffle_reported.get(part.tp, (0, 0, 0))
        self._shuffle_reported[part.tp] = now
        first, markers, replays = (now[i] - before[i] for i in range(3))
        if first and isinstance(operator, ShuffleWriter):
            m.shuffle_records_routed.labels(name).inc(first)
        elif first:
            m.key_partition_mismatches.labels(name).inc(first)
        if markers:
            m.shuffle_markers.labels(name).inc(markers)
        if replays:
            m.shuffle_replays.labels(name).inc(replays)

    def partition_status(self, part: PartitionTask, now: int) -> PartitionStatus:
        session = self.session
        gauges = part.operator.gauges()
        watermarks = session.emitter.snapshot(now)
        idle = part.tp in watermarks.idle
        watermark = part.watermark
        combined = watermarks.current
        drift = None if watermark is None or combined is None else max(0, watermark - combined)
        pending = session.pending.get(part.tp)
        return PartitionStatus(
            topic=part.tp.topic,
            partition=part.tp.partition,
            offset=part.next_offset,
            end_offset=part.end_offset if part.end_offset is not None else part.highwater,
            lag=part.lag(),
            watermark=watermark,
            delivered_watermark=part.delivered_watermark,
            idle=idle,
            event_timers=gauges.event_timers,
            processing_timers=gauges.processing_timers,
            windows_open=gauges.windows_open,
            keys=gauges.keys,
            records_in=part.records_in,
            last_checkpoint_ms=part.last_checkpoint_ms,
            finished=part.finished,
            aligned_paused=part.tp in session.pauses.aligned,
            drift_ms=drift,
            held_records=pending.held if pending is not None else 0,
            max_lead_ms=part.max_lead,
            stage=session.stage.name,
            shuffle=self.shuffle_numbers(part),
            bad_values=_by_field(part.bad_values),
            standbys=session.standby_placement().get(part.tp, ()),
        )

    def refresh(self) -> None:
        session = self.session
        m = session.metrics
        name = session.name
        now = session.clock.now_ms()
        wall = time.time()
        watermarks = session.emitter.snapshot(now)
        current = watermarks.current
        rows_held: dict[str, int] = {}
        for tp, part in session.partitions.items():
            label = f"{tp.topic}/{tp.partition}"
            gauges = part.operator.gauges()
            m.timers_queued.labels(name, label, "event").set(gauges.event_timers)
            m.timers_queued.labels(name, label, "processing").set(gauges.processing_timers)
            m.windows_open.labels(name, label).set(gauges.windows_open)
            m.keys.labels(name, label).set(gauges.keys)
            watermark = part.watermark
            if watermark is not None:
                m.watermark.labels(name, label).set(watermark)
                m.watermark_lag.labels(name, label).set(now - watermark)
                if current is not None:
                    m.watermark_drift.labels(name, label).set(max(0, watermark - current))
            delivered = part.delivered_watermark
            if delivered is not None:
                m.delivered_watermark.labels(name, label).set(delivered)
            if part.max_lead is not None:
                m.alignment_max_lead.labels(name, label).set(part.max_lead)
            lag = part.lag()
            if lag is not None:
                m.consumer_lag.labels(name, label).set(lag)
            if part.last_checkpoint_ms is not None:
                m.checkpoint_age.labels(name, label).set(wall - part.last_checkpoint_ms / 1000.0)
            for kind, count in part.firings.items():
                m.window_firings.labels(name, kind).inc(count)
            part.firings.clear()
            if part.late_dropped:
                m.late_records.labels(name, "dropped").inc(part.late_dropped)
                part.late_dropped = 0
            if part.bad_values_unreported:
                for (field, reason), count in part.bad_values_unreported.items():
                    m.bad_values.labels(name, field, reason).inc(count)
                part.bad_values_unreported.clear()
            self.report_timer_counts(part)
            self.report_shuffle(part)
            operator = part.operator
            if isinstance(operator, SidedJoin):
                for side, input_name in zip(Side, operator.join.inputs, strict=True):
                    rows_held[input_name] = rows_held.get(input_name, 0) + operator.rows_held(side)
            wakeups = part.timers.wakeups
            if wakeups:
                m.timers_fired.labels(name).inc(wakeups)
                part.timers.wakeups = 0
        for input_name, held in rows_held.items():
            m.join_state_rows.labels(name, input_name).set(held)
        if current is not None:
            m.combined_watermark.labels(name).set(current)
            m.combined_watermark_lag.labels(name).set(now - current)
        m.idle_partitions.labels(name).set(len(watermarks.idle))
        m.idle_advancing.labels(name).set(1 if watermarks.idle_advancing else 0)
        alignment = session.alignment
        if session.definition.bounded and session.partitions_done[1]:
            m.partitions_finished.labels(name).set(session.partitions_done[0])
        if alignment is not None:
            m.alignment_paused.labels(name).set(len(session.pauses.aligned))
            m.alignment_held.labels(name).set(sum(p.held for p in session.pending.values()))
            pauses, resumes = self._alignment_reported
            if alignment.pauses > pauses:
                m.alignment_pauses.labels(name).inc(alignment.pauses - pauses)
            if alignment.resumes > resumes:
                m.alignment_resumes.labels(name).inc(alignment.resumes - resumes)
            self._alignment_reported = (alignment.pauses, alignment.resumes)
        sink = session.sink
        if sink is not None:
            if sink.results_sent:
                m.records_out.labels(name, "result").inc(sink.results_sent)
                sink.results_sent = 0
            if sink.late_sent:
                m.records_out.labels(name, "late").inc(sink.late_sent)
                m.late_records.labels(name, "side_output").inc(sink.late_sent)
                sink.late_sent = 0
            for reason, count in sink.dead_lettered.items():
                m.records_out.labels(name, "dead_letter").inc(count)
                m.dead_lettered.labels(name, reason).inc(count)
            sink.dead_lettered.clear()

    def report_timer_counts(self, part: PartitionTask) -> None:
        m = self.session.metrics
        name = self.session.name
        for domain, (registered, fired, deleted) in part.take_timer_counts().items():
            if registered:
                m.timers_registered.labels(name, domain).inc(registered)
            if fired:
                m.timer_fires.labels(name, domain).inc(fired)
            if deleted:
                m.timers_deleted.labels(name, domain).inc(deleted)

    def forget(self, tp: TopicPartition) -> None:
        """``tp`` left this session: drop its per-partition series."""
        self.records_in.pop(tp, None)
        self._shuffle_reported.pop(tp, None)
        label = f"{tp.topic}/{tp.partition}"
        m = self.session.metrics
        name = self.session.name
        for gauge in (
            m.windows_open,
            m.keys,
            m.watermark,
            m.watermark_lag,
            m.watermark_drift,
            m.delivered_watermark,
            m.alignment_max_lead,
            m.consumer_lag,
            m.checkpoint_age,
        ):
            with contextlib.suppress(KeyError):
                gauge.remove(name, label)
        for domain in ("event", "processing"):
            with contextlib.suppress(KeyError):
                m.timers_queued.remove(name, label, domain)


def _by_field(counts: dict[tuple[str, str], int]) -> dict[str, dict[str, int]] | None:
    """``{(field, reason): n}`` as status shows it: ``{field: {reason: n}}``."""
    if not counts:
        return None
    out: dict[str, dict[str, int]] = {}
    for (field, reason), count in counts.items():
        out.setdefault(field, {})[reason] = count
    return out


def _or_none(watermark: int) -> int | None:
    """A watermark for status: None before the first (``MIN``)."""
    return None if watermark == MIN_TIMESTAMP else watermark
