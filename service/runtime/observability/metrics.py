"""The runtime's Prometheus metrics, in one registry the API's ``/metrics`` serves.

Why a module-level registry and not prometheus-client's global one: the API serves
exactly what the service defines (no surprise collectors from imported libraries), and
tests can read it, or build an isolated one with :func:`build_metrics`.

Metrics are updated once per batch, per watermark emission, per checkpoint; never per
record. Labels: ``pipeline`` always, ``partition`` (``topic/partition``) where the number
is a property of one partition.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_P = ("pipeline",)
_PP = ("pipeline", "partition")


@dataclass(frozen=True, slots=True)
class RuntimeMetrics:
    """Every metric the runtime exports; see :data:`METRIC_NAMES` for the names."""

    records_in: Counter
    records_out: Counter
    dead_lettered: Counter
    late_records: Counter
    bad_values: Counter
    window_firings: Counter
    batch_seconds: Histogram
    timers_queued: Gauge
    timers_fired: Counter
    timers_registered: Counter
    timer_fires: Counter
    timers_deleted: Counter
    processing_timer_lateness: Histogram
    watermark: Gauge
    watermark_lag: Gauge
    combined_watermark: Gauge
    combined_watermark_lag: Gauge
    idle_partitions: Gauge
    idle_advancing: Gauge
    watermark_drift: Gauge
    delivered_watermark: Gauge
    alignment_paused: Gauge
    alignment_held: Gauge
    alignment_records_held: Counter
    alignment_max_lead: Gauge
    alignment_pauses: Counter
    alignment_resumes: Counter
    windows_open: Gauge
    join_state_rows: Gauge
    lookup_table_rows: Gauge
    lookup_table_loaded: Gauge
    keys: Gauge
    consumer_lag: Gauge
    checkpoint_seconds: Histogram
    checkpoint_entries: Counter
    checkpoint_bytes: Counter
    checkpoint_age: Gauge
    checkpoint_failures: Counter
    restore_seconds: Histogram
    partitions_restored: Counter
    state_restored_keys: Counter
    standby_lag: Gauge
    partitions_taken_over: Counter
    takeover_delay: Histogram
    partitions_finished: Gauge
    prefetched_records: Counter
    shuffle_records_in: Counter
    shuffle_records_routed: Counter
    shuffle_markers: Counter
    shuffle_replays: Counter
    shuffle_frames: Counter
    shuffle_frame_rows: Counter
    shuffle_trims: Counter
    key_partition_mismatches: Counter
    pipeline_up: Gauge
    pipeline_restarts: Counter
    broker_ready: Gauge


def build_metrics(registry: CollectorRegistry) -> RuntimeMetrics:
    """Create every runtime metric in ``registry``."""
    r = registry
    return RuntimeMetrics(
        records_in=Counter(
            "clockwork_records_in", "Records consumed from source partitions.", _PP, registry=r
        ),
        records_out=Counter(
            "clockwork_records_out",
            "Records produced, by output kind (result, late, dead_letter).",
            ("pipeline", "output"),
            registry=r,
        ),
        dead_lettered=Counter(
            "clockwork_dead_lettered_records",
            "Records sent to the dead-letter topic, by reason.",
            ("pipeline", "reason"),
            registry=r,
        ),
        late_records=Counter(
            "clockwork_late_records",
            "Records behind the watermark for every window, by what happened to them.",
            ("pipeline", "action"),  # side_output | dropped
            registry=r,
        ),
        bad_values=Counter(
            "clockwork_bad_values",
            "Values an aggregation could not take (a string for sum...), by field and reason "
            "(not_a_number, not_comparable; a Top-N's: not_a_number, missing for its row "
            "key); dead-lettered or taken as NULL (on_bad_value).",
            ("pipeline", "field", "reason"),
            registry=r,
        ),
        window_firings=Counter(
            "clockwork_window_firings",
            "Window results emitted, by firing kind (early, on_time, late).",
            ("pipeline", "fire"),
            registry=r,
        ),
        batch_seconds=Histogram(
            "clockwork_batch_processing_seconds",
            "Time to decode, process and hand one fetched batch to the sinks.",
            _P,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=r,
        ),
        timers_queued=Gauge(
            "clockwork_timers_queued",
            "Timers queued in a partition's timer service, by time domain.",
            ("pipeline", "partition", "domain"),
            registry=r,
        ),
        timers_fired=Counter(
            "clockwork_processing_timer_wakeups",
            "Wake-ups of a partition's single processing-time handle.",
            _P,
            registry=r,
        ),
        timers_registered=Counter(
            "clockwork_timers_registered",
            "Timers registered (a re-registration of a queued timer is none), by domain.",
            ("pipeline", "domain"),
            registry=r,
        ),
        timer_fires=Counter(
            "clockwork_timers_fired",
            "Timers fired, by domain.",
            ("pipeline", "domain"),
            registry=r,
        ),
        timers_deleted=Counter(
            "clockwork_timers_deleted",
            "Timers deleted before firing (a move counts as a delete and a register).",
            ("pipeline", "domain"),
            registry=r,
        ),
        processing_timer_lateness=Histogram(
            "clockwork_processing_timer_lateness_seconds",
            "How late the processing-time wake-up ran after the head timer's time.",
            _P,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0),
            registry=r,
        ),
        watermark=Gauge(
            "clockwork_partition_watermark_milliseconds",
            "A partition's own watermark (epoch ms; absent before its first record).",
            _PP,
            registry=r,
        ),
        watermark_lag=Gauge(
            "clockwork_partition_watermark_lag_milliseconds",
            "Processing time minus the partition's watermark.",
            _PP,
            registry=r,
        ),
        combined_watermark=Gauge(
            "clockwork_watermark_milliseconds",
            "The combined watermark delivered to the operators (epoch ms).",
            _P,
            registry=r,
        ),
        combined_watermark_lag=Gauge(
            "clockwork_watermark_lag_milliseconds",
            "Processing time minus the combined watermark.",
            _P,
            registry=r,
        ),
        idle_advancing=Gauge(
            "clockwork_watermark_idle_advancing",
            "1 while every partition is idle and event time follows the wall clock.",
            _P,
            registry=r,
        ),
        watermark_drift=Gauge(
            "clockwork_partition_watermark_drift_milliseconds",
            "How far a partition's watermark is ahead of the combined one (0 if behind).",
            _PP,
            registry=r,
        ),
        delivered_watermark=Gauge(
            "clockwork_partition_delivered_watermark_milliseconds",
            "The watermark a partition's operator was delivered (epoch ms; never goes "
            "back; behind the combined one while a partition that joined late catches up).",
            _PP,
            registry=r,
        ),
        alignment_paused=Gauge(
            "clockwork_partitions_alignment_paused",
            "Partitions paused by watermark alignment (holding records back, or ahead).",
            _P,
            registry=r,
        ),
        alignment_held=Gauge(
            "clockwork_alignment_held_records",
            "Records fetched and held back by watermark alignment until the others catch up.",
            _P,
            registry=r,
        ),
        alignment_records_held=Counter(
            "clockwork_alignment_records_held",
            "Records watermark alignment held back (each counted once, when first held).",
            _P,
            registry=r,
        ),
        alignment_max_lead=Gauge(
            "clockwork_partition_max_lead_milliseconds",
            "The largest lead of a partition's watermark over the other partitions' minimum "
            "after any processed batch since its assignment (alignment bounds it by "
            "max_drift_ms plus one record's step).",
            _PP,
            registry=r,
        ),
        alignment_pauses=Counter(
            "clockwork_alignment_pauses",
            "Times watermark alignment paused a partition.",
            _P,
            registry=r,
        ),
        alignment_resumes=Counter(
            "clockwork_alignment_resumes",
            "Times watermark alignment resumed a partition.",
            _P,
            registry=r,
        ),
        idle_partitions=Gauge(
            "clockwork_idle_partitions",
            "Assigned partitions currently idle (left out of the combined watermark).",
            _P,
            registry=r,
        ),
        windows_open=Gauge(
            "clockwork_windows_open", "Windows with state in a partition.", _PP, registry=r
        ),
        keys=Gauge(
            "clockwork_keys",
            "Keys with state in a partition (a window join: key-window pairs).",
            _PP,
            registry=r,
        ),
        join_state_rows=Gauge(
            "clockwork_join_state_rows",
            "Rows a join holds for one input on this replica (interval and window joins: "
            "rows waiting for partners; temporal: left rows waiting, table versions kept).",
            [*_P, "input"],
            registry=r,
        ),
        lookup_table_rows=Gauge(
            "clockwork_lookup_table_rows",
            "Rows (keys) of a lookup join's table held in memory on this replica.",
            [*_P, "input"],
            registry=r,
        ),
        lookup_table_loaded=Gauge(
            "clockwork_lookup_table_loaded",
            "1 once this replica has read a lookup join's table whole (the left input "
            "waits for it), else 0.",
            [*_P, "input"],
            registry=r,
        ),
        consumer_lag=Gauge(
            "clockwork_consumer_lag_records",
            "High watermark (read_committed: last stable offset) minus the next offset to process.",
            _PP,
            registry=r,
        ),
        checkpoint_seconds=Histogram(
            "clockwork_checkpoint_duration_seconds",
            "Time of one checkpoint: flush outputs, write the changelog, commit offsets.",
            _P,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=r,
        ),
        checkpoint_entries=Counter(
            "clockwork_checkpoint_entries",
            "Changelog entries written (changed state entries, tombstones, metadata).",
            _P,
            registry=r,
        ),
        checkpoint_bytes=Counter(
            "clockwork_checkpoint_bytes", "Changelog bytes written.", _P, registry=r
        ),
        checkpoint_age=Gauge(
            "clockwork_checkpoint_age_seconds",
            "Seconds since a partition's last completed checkpoint.",
            _PP,
            registry=r,
        ),
        checkpoint_failures=Counter(
            "clockwork_checkpoint_failures", "Checkpoints that failed.", _P, registry=r
        ),
        restore_seconds=Histogram(
            "clockwork_restore_duration_seconds",
            "Time to rebuild assigned partitions' state from the changelog.",
            _P,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=r,
        ),
        partitions_restored=Counter(
            "clockwork_partitions_restored",
            "Assigned partitions whose state was rebuilt, by where from: 'changelog' (read "
            "back), 'memory' (kept since this member's own revoke checkpoint, the "
            "changelog unchanged since) or 'local' (the rocksdb backend's store on this "
            "disk, the changelog's tail replayed onto it).",
            [*_P, "source"],
            registry=r,
        ),
        state_restored_keys=Counter(
            "clockwork_state_restored",
            "The rocksdb backend's restores, by where from: 'changelog' (changelog records "
            "read) or 'local' (keys found in the local stores).",
            [*_P, "source"],
            registry=r,
        ),
        standby_lag=Gauge(
            "clockwork_standby_lag_records",
            "A standby copy this member keeps of a partition another member owns: the "
            "changelog records not yet applied to its store (not read yet, or of a "
            "checkpoint not complete).",
            _PP,
            registry=r,
        ),
        partitions_taken_over=Counter(
            "clockwork_partitions_taken_over",
            "Assigned partitions whose last owner did not hand them over (it died, or its "
            "session failed): restored from that owner's last checkpoint.",
            _P,
            registry=r,
        ),
        takeover_delay=Histogram(
            "clockwork_takeover_delay_seconds",
            "For a partition taken over: time from its lost owner's last checkpoint to the "
            "takeover (an upper bound of the time from the loss to the takeover).",
            _P,
            buckets=(0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0),
            registry=r,
        ),
        partitions_finished=Gauge(
            "clockwork_partitions_finished",
            "Bounded input: partitions of the pipeline read to their end, on any replica "
            "(as the group's committed offsets say), at the last look.",
            _P,
            registry=r,
        ),
        prefetched_records=Counter(
            "clockwork_prefetched_records",
            "Records read and decoded while the group join was under way and processed "
            "after it (the consumer resumed after them).",
            _P,
            registry=r,
        ),
        shuffle_records_in=Counter(
            "clockwork_shuffle_records_in",
            "Records the keyed stage of a shuffled pipeline read from a shuffle partition "
            "(replays dropped not included).",
            _PP,
            registry=r,
        ),
        shuffle_records_routed=Counter(
            "clockwork_shuffle_records_routed",
            "Records the route stage of a shuffled pipeline wrote to the shuffle topic.",
            _P,
            registry=r,
        ),
        shuffle_markers=Counter(
            "clockwork_shuffle_markers",
            "Watermark markers the keyed stage of a shuffled pipeline received.",
            _P,
            registry=r,
        ),
        shuffle_replays=Counter(
            "clockwork_shuffle_replays_dropped",
            "Routed records dropped by the keyed stage because they were applied before "
            "(a restarted or zombie route stage wrote them again).",
            _P,
            registry=r,
        ),
        shuffle_frames=Counter(
            "clockwork_shuffle_frames",
            "Frames the keyed stage of a shuffled pipeline read from a shuffle partition "
            "(replayed ones included): frames per second, and with "
            "clockwork_shuffle_frame_rows_total rows per frame.",
            _PP,
            registry=r,
        ),
        shuffle_frame_rows=Counter(
            "clockwork_shuffle_frame_rows",
            "Rows in the frames the keyed stage of a shuffled pipeline read from a shuffle "
            "partition (replayed ones included).",
            _PP,
            registry=r,
        ),
        shuffle_trims=Counter(
            "clockwork_shuffle_trims",
            "Requests to delete the shuffle records the keyed stage has checkpointed past "
            "(DeleteRecords), by outcome: done, or refused by the broker.",
            ("pipeline", "outcome"),
            registry=r,
        ),
        key_partition_mismatches=Counter(
            "clockwork_key_partition_mismatches",
            "Records of a source declared partitioned by the key (key.partitioned) whose "
            "key Kafka's default partitioner puts in another partition: a broken promise.",
            _P,
            registry=r,
        ),
        pipeline_up=Gauge(
            "clockwork_pipeline_running",
            "1 while the pipeline's consumer loop runs, else 0.",
            _P,
            registry=r,
        ),
        pipeline_restarts=Counter(
            "clockwork_pipeline_restarts",
            "Times the consumer loop was restarted after an error.",
            _P,
            registry=r,
        ),
        broker_ready=Gauge(
            "clockwork_broker_ready", "1 when the broker answered the last check.", registry=r
        ),
    )


REGISTRY = CollectorRegistry(auto_describe=True)
"""The registry the API's ``/metrics`` endpoint serves."""

METRICS = build_metrics(REGISTRY)

METRIC_NAMES: tuple[str, ...] = (
    "clockwork_records_in_total",
    "clockwork_records_out_total",
    "clockwork_dead_lettered_records_total",
    "clockwork_late_records_total",
    "clockwork_bad_values_total",
    "clockwork_window_firings_total",
    "clockwork_batch_processing_seconds",
    "clockwork_timers_queued",
    "clockwork_processing_timer_wakeups_total",
    "clockwork_timers_registered_total",
    "clockwork_timers_fired_total",
    "clockwork_timers_deleted_total",
    "clockwork_processing_timer_lateness_seconds",
    "clockwork_partition_watermark_milliseconds",
    "clockwork_partition_watermark_lag_milliseconds",
    "clockwork_watermark_milliseconds",
    "clockwork_watermark_lag_milliseconds",
    "clockwork_idle_partitions",
    "clockwork_watermark_idle_advancing",
    "clockwork_partition_watermark_drift_milliseconds",
    "clockwork_partition_delivered_watermark_milliseconds",
    "clockwork_partitions_alignment_paused",
    "clockwork_alignment_held_records",
    "clockwork_alignment_records_held_total",
    "clockwork_partition_max_lead_milliseconds",
    "clockwork_alignment_pauses_total",
    "clockwork_alignment_resumes_total",
    "clockwork_windows_open",
    "clockwork_keys",
    "clockwork_join_state_rows",
    "clockwork_lookup_table_rows",
    "clockwork_lookup_table_loaded",
    "clockwork_consumer_lag_records",
    "clockwork_checkpoint_duration_seconds",
    "clockwork_checkpoint_entries_total",
    "clockwork_checkpoint_bytes_total",
    "clockwork_checkpoint_age_seconds",
    "clockwork_checkpoint_failures_total",
    "clockwork_restore_duration_seconds",
    "clockwork_partitions_restored_total",
    "clockwork_state_restored_total",
    "clockwork_standby_lag_records",
    "clockwork_partitions_taken_over_total",
    "clockwork_takeover_delay_seconds",
    "clockwork_partitions_finished",
    "clockwork_prefetched_records_total",
    "clockwork_shuffle_records_in_total",
    "clockwork_shuffle_records_routed_total",
    "clockwork_shuffle_markers_total",
    "clockwork_shuffle_replays_dropped_total",
    "clockwork_shuffle_frames_total",
    "clockwork_shuffle_frame_rows_total",
    "clockwork_shuffle_trims_total",
    "clockwork_key_partition_mismatches_total",
    "clockwork_pipeline_running",
    "clockwork_pipeline_restarts_total",
    "clockwork_broker_ready",
)
"""The exported metric names as they appear in the text format (histograms by base name)."""
