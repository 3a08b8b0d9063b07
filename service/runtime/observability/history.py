"""A short, bounded history of every pipeline, for charts.

Why in the service and not in Prometheus: the console must show throughput, watermark
lag and timers over the last minutes with nothing else deployed. So once per interval a
task takes one sample per pipeline from what already exists (statuses, and counters
read through ``collect()``), and keeps the last ``capacity`` of them per pipeline in a
deque. Nothing is added to the per-record path: the cost is one status snapshot per
pipeline per interval, whatever the record rate. What a sample is of is the sampler's
choice: a runtime's pipelines (:meth:`History.of_runtime`), or the service's whole
pipelines over every member's reports (``service.api.whole_history``).

Rates are the sampler's when it measured them, else derived when read from consecutive
samples (a rate is only ever a difference of the same counter). A pipeline that is gone
loses its history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from prometheus_client import Counter

from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP, Clock
from service.runtime.observability.metrics import RuntimeMetrics
from service.runtime.observability.status import PipelineStatus, UnknownPipeline

__all__ = ["History", "Sample", "output_totals", "status_sample"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sample:
    """One pipeline at one moment: totals as counted since the process started."""

    at_ms: int
    state: str
    records_in: float
    records_out: float
    late_records: float
    dead_letters: float
    watermark: int | None
    event_timers: int
    processing_timers: int
    windows_open: int
    consumer_lag: int
    rate_in: float | None = None
    """Records in per second as measured where the counters are (each member's own
    reports, summed), when the sampler knows it; else derived from the previous sample."""
    rate_out: float | None = None


class SampledRuntime(Protocol):
    """What the history reads of the runtime (``lifecycle.manager.Runtime``)."""

    clock: Clock
    metrics: RuntimeMetrics

    @property
    def pipelines(self) -> list[str]: ...

    def status(self, name: str) -> PipelineStatus: ...


SampleAll = Callable[[int], Mapping[str, Sample]]
"""One sample of every pipeline there is, taken at the given time (epoch ms)."""


class History:
    """Samples every pipeline every ``interval_s``; keeps ``capacity`` samples each.

    :meth:`of_runtime` samples the pipelines a runtime runs; the service samples whole
    pipelines from every member's reports (``service.api.whole_history``)."""

    def __init__(
        self,
        sample_all: SampleAll,
        clock: Clock,
        interval_s: float = 1.0,
        capacity: int = 300,
    ) -> None:
        self._sample_all = sample_all
        self.interval_s = interval_s
        self.capacity = capacity
        self._clock = clock
        self._samples: dict[str, deque[Sample]] = {}
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def of_runtime(
        cls,
        runtime: SampledRuntime,
        interval_s: float = 1.0,
        capacity: int = 300,
        clock: Clock | None = None,
    ) -> History:
        return cls(partial(_runtime_samples, runtime), clock or runtime.clock, interval_s, capacity)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="clockwork-history"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # a chart gap, never a dead sampler
                logger.warning("taking the history sample failed", exc_info=True)
            await asyncio.sleep(self.interval_s)

    # -- sampling --------------------------------------------------------------------
    def sample(self) -> None:
        """Take one sample of every pipeline; forget the ones that are gone."""
        now = self._clock.now_ms()
        taken = self._sample_all(now)
        for gone in self._samples.keys() - set(taken):
            del self._samples[gone]
        for name, sample in taken.items():
            samples = self._samples.get(name)
            if samples is None:
                samples = self._samples[name] = deque(maxlen=self.capacity)
            samples.append(sample)

    # -- reading ---------------------------------------------------------------------
    def pipelines(self) -> list[str]:
        return sorted(self._samples)

    def series(self, name: str, since_ms: int | None = None) -> list[dict[str, Any]]:
        """The samples of ``name`` taken after ``since_ms`` (all without it), oldest first,
        with per-second rates and the watermark's lag behind the sample's wall clock."""
        samples = list(self._samples.get(name, ()))
        out: list[dict[str, Any]] = []
        for i, sample in enumerate(samples):
            if since_ms is not None and sample.at_ms <= since_ms:
                continue
            previous = samples[i - 1] if i > 0 else None
            out.append(_point(sample, previous))
        return out


def _runtime_samples(runtime: SampledRuntime, now: int) -> dict[str, Sample]:
    metrics = runtime.metrics
    records_in = _totals(metrics.records_in)
    records_out = _totals(metrics.records_out, lambda labels: labels["output"] == "result")
    late = _totals(metrics.late_records)
    dead = _totals(metrics.dead_lettered)
    taken: dict[str, Sample] = {}
    for name in runtime.pipelines:
        try:
            status = runtime.status(name)
        except UnknownPipeline:  # stopped between the two calls
            continue
        taken[name] = _sample(
            now,
            status,
            records_in.get(name, 0.0),
            records_out.get(name, 0.0),
            late.get(name, 0.0),
            dead.get(name, 0.0),
        )
    return taken


def status_sample(now: int, status: Mapping[str, Any]) -> Sample:
    """A sample of a status dict (a whole pipeline's: counters summed over members)."""
    partitions = status.get("partitions", ())
    return Sample(
        at_ms=now,
        state=str(status.get("state")),
        records_in=float(status.get("records_in") or 0),
        records_out=float(status.get("records_out") or 0),
        late_records=float(status.get("late_records") or 0),
        dead_letters=float(status.get("dead_letters") or 0),
        watermark=status.get("watermark"),
        event_timers=_sum(int(p.get("event_timers") or 0) for p in partitions),
        processing_timers=_sum(int(p.get("processing_timers") or 0) for p in partitions),
        windows_open=_sum(int(p.get("windows_open") or 0) for p in partitions),
        consumer_lag=_sum(int(p.get("lag") or 0) for p in partitions),
    )


def output_totals(metrics: RuntimeMetrics, pipeline: str) -> dict[str, int]:
    """What ``pipeline`` wrote in this process (results, late records, dead letters),
    from the runtime's counters: what a member reports beside its status."""
    return {
        "records_out": int(
            _totals(metrics.records_out, lambda labels: labels["output"] == "result").get(
                pipeline, 0.0
            )
        ),
        "late_records": int(_totals(metrics.late_records).get(pipeline, 0.0)),
        "dead_letters": int(_totals(metrics.dead_lettered).get(pipeline, 0.0)),
    }


def _totals(
    counter: Counter, keep: Callable[[dict[str, str]], bool] | None = None
) -> dict[str, float]:
    """A labelled counter's ``_total`` samples summed per pipeline."""
    found: dict[str, float] = {}
    for metric in counter.collect():
        for sample in metric.samples:
            if not sample.name.endswith("_total") or (keep and not keep(sample.labels)):
                continue
            pipeline = sample.labels["pipeline"]
            found[pipeline] = found.get(pipeline, 0.0) + sample.value
    return found


def _sample(
    now: int, status: PipelineStatus, records_in: float, out: float, late: float, dead: float
) -> Sample:
    partitions = status.partitions
    return Sample(
        at_ms=now,
        state=status.state.value,
        records_in=records_in,
        records_out=out,
        late_records=late,
        dead_letters=dead,
        watermark=status.watermark,
        event_timers=_sum(p.event_timers for p in partitions),
        processing_timers=_sum(p.processing_timers for p in partitions),
        windows_open=_sum(p.windows_open for p in partitions),
        consumer_lag=_sum(p.lag or 0 for p in partitions),
    )


def _sum(values: Iterable[int]) -> int:
    return sum(values, 0)


def _rate(now: float, before: float, seconds: float) -> float:
    # A counter never goes back; a smaller total is another runtime's restart: no rate.
    return max(now - before, 0.0) / seconds


def _point(sample: Sample, previous: Sample | None) -> dict[str, Any]:
    rate_in, rate_out = sample.rate_in, sample.rate_out
    if rate_in is None and previous is not None and sample.at_ms > previous.at_ms:
        seconds = (sample.at_ms - previous.at_ms) / 1000
        rate_in = _rate(sample.records_in, previous.records_in, seconds)
        rate_out = _rate(sample.records_out, previous.records_out, seconds)
    watermark = sample.watermark
    if watermark is not None and watermark <= MIN_TIMESTAMP:
        watermark = None  # a partition that has seen nothing
    finished = watermark is not None and watermark >= MAX_TIMESTAMP
    return {
        "at_ms": sample.at_ms,
        "state": sample.state,
        "records_in_per_s": rate_in,
        "records_out_per_s": rate_out,
        "records_in": sample.records_in,
        "records_out": sample.records_out,
        "late_records": sample.late_records,
        "dead_letters": sample.dead_letters,
        "watermark": watermark,
        "watermark_lag_ms": None if watermark is None or finished else sample.at_ms - watermark,
        "event_timers": sample.event_timers,
        "processing_timers": sample.processing_timers,
        "windows_open": sample.windows_open,
        "consumer_lag": sample.consumer_lag,
    }
