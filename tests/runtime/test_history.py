"""The console's history: bounded, rates from consecutive samples, lag behind the wall
clock, pipelines that stop are forgotten. A stand-in runtime gives the statuses (the
sampler only reads ``pipelines``, ``status``, ``metrics`` and ``clock``); the counters
are real Prometheus counters in a registry of the test's own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from service.core.time import MAX_TIMESTAMP, ManualClock
from service.runtime.observability.history import History
from service.runtime.observability.metrics import RuntimeMetrics, build_metrics
from service.runtime.observability.status import (
    PartitionStatus,
    PipelineState,
    PipelineStatus,
    UnknownPipeline,
)


def partition(n: int, timers: int) -> PartitionStatus:
    return PartitionStatus(
        topic="t", partition=n, offset=0, end_offset=5, lag=5, watermark=None,
        delivered_watermark=None, idle=False, event_timers=timers, processing_timers=1,
        windows_open=2, keys=1, records_in=0, last_checkpoint_ms=None, finished=False,
    )  # fmt: skip


class StandInRuntime:
    def __init__(self, clock: ManualClock, metrics: RuntimeMetrics) -> None:
        self.clock = clock
        self.metrics = metrics
        self.watermarks: dict[str, int | None] = {}

    @property
    def pipelines(self) -> list[str]:
        return list(self.watermarks)

    def status(self, name: str) -> PipelineStatus:
        if name not in self.watermarks:
            raise UnknownPipeline(name)
        return PipelineStatus(
            name=name, state=PipelineState.RUNNING, reason=None,
            watermark=self.watermarks[name], partitions=(partition(0, 3), partition(1, 4)),
            records_in=0, restarts=0,
        )  # fmt: skip


def make(capacity: int = 300) -> tuple[History, StandInRuntime, ManualClock, RuntimeMetrics]:
    clock = ManualClock(1_000_000)
    metrics = build_metrics(CollectorRegistry())
    runtime = StandInRuntime(clock, metrics)
    return History.of_runtime(runtime, capacity=capacity), runtime, clock, metrics  # type: ignore[arg-type]


def test_rates_come_from_consecutive_samples() -> None:
    history, runtime, clock, metrics = make()
    runtime.watermarks["p"] = 999_000
    history.sample()
    metrics.records_in.labels("p", "t/0").inc(300)
    metrics.records_in.labels("p", "t/1").inc(100)
    metrics.records_out.labels("p", "result").inc(20)
    metrics.records_out.labels("p", "late").inc(7)
    clock.advance(2000)
    history.sample()
    first, second = history.series("p")
    assert first["records_in_per_s"] is None
    assert second["records_in_per_s"] == 200.0
    assert second["records_out_per_s"] == 10.0  # results only, not late records


def test_lag_timers_and_windows_are_summed_over_partitions() -> None:
    history, runtime, _, _ = make()
    runtime.watermarks["p"] = 990_000
    history.sample()
    (point,) = history.series("p")
    assert point["watermark_lag_ms"] == 10_000
    assert (point["event_timers"], point["processing_timers"]) == (7, 2)
    assert point["windows_open"] == 4
    assert point["consumer_lag"] == 10


def test_no_lag_before_the_first_watermark_nor_after_the_end_of_input() -> None:
    history, runtime, clock, _ = make()
    runtime.watermarks["p"] = None
    history.sample()
    runtime.watermarks["p"] = MAX_TIMESTAMP
    clock.advance(1000)
    history.sample()
    assert [p["watermark_lag_ms"] for p in history.series("p")] == [None, None]


def test_history_keeps_capacity_samples_and_since_filters() -> None:
    history, runtime, clock, _ = make(capacity=5)
    runtime.watermarks["p"] = 0
    for _ in range(12):
        history.sample()
        clock.advance(1000)
    points = history.series("p")
    assert len(points) == 5
    assert [p["at_ms"] for p in history.series("p", since_ms=points[2]["at_ms"])] == [
        points[3]["at_ms"],
        points[4]["at_ms"],
    ]


def test_a_pipeline_that_stops_is_forgotten() -> None:
    history, runtime, _, _ = make()
    runtime.watermarks["p"] = 0
    history.sample()
    del runtime.watermarks["p"]
    history.sample()
    assert history.pipelines() == []
    assert history.series("p") == []
