"""The console's history of whole pipelines: one sample per pipeline per interval,
from every member's reports (this process's own live, the others' as last published).

Totals and gauges are the whole-pipeline status's. Rates are not differences of those
totals: another member's counters move only when it publishes (every
``SERVICE_STATUS_PUBLISH_INTERVAL_MS``), out of phase with the sampler, so a difference
per sample would swing between nothing and double. Each member's rate is measured
between two of its own reports, with its own publish times, and the pipeline's rate is
the sum of its live members' latest rates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from service.api.members import MemberBoard
from service.api.pipeline_view import MemberReport, whole_pipeline_status
from service.runtime.observability.history import Sample, status_sample

__all__ = ["MemberRates", "whole_samples"]


@dataclass(frozen=True, slots=True)
class _Seen:
    published_ms: int
    records_in: float
    records_out: float
    rate_in: float | None = None
    rate_out: float | None = None


class MemberRates:
    """Each member's rates of each pipeline, from its consecutive reports. Pure."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], _Seen] = {}

    def update(
        self, pipeline: str, reports: Iterable[MemberReport]
    ) -> tuple[float | None, float | None]:
        """Take the live members' newest reports of ``pipeline``; the summed rates (in,
        out) of the members whose rate is known (None while none is)."""
        total_in = total_out = 0.0
        known = False
        current: set[tuple[str, str]] = set()
        for report in reports:
            if report.status is None:
                continue
            key = (pipeline, report.member)
            current.add(key)
            seen = self._measure(self._seen.get(key), report)
            self._seen[key] = seen
            if seen.rate_in is not None and seen.rate_out is not None:
                known = True
                total_in += seen.rate_in
                total_out += seen.rate_out
        for gone in [k for k in self._seen if k[0] == pipeline and k not in current]:
            del self._seen[gone]
        return (total_in, total_out) if known else (None, None)

    def forget(self, keep: set[str]) -> None:
        """Drop the pipelines not in ``keep``."""
        self._seen = {k: v for k, v in self._seen.items() if k[0] in keep}

    @staticmethod
    def _measure(before: _Seen | None, report: MemberReport) -> _Seen:
        status = report.status or {}
        now = _Seen(
            report.published_ms,
            float(status.get("records_in") or 0),
            float(status.get("records_out") or 0),
        )
        if before is None:
            return now
        if now.published_ms <= before.published_ms:
            return before  # no new report: its rate stands
        seconds = (now.published_ms - before.published_ms) / 1000
        if now.records_in < before.records_in or now.records_out < before.records_out:
            return now  # the member restarted: its counters began again, no rate yet
        return replace(
            now,
            rate_in=(now.records_in - before.records_in) / seconds,
            rate_out=(now.records_out - before.records_out) / seconds,
        )


def whole_samples(
    board: MemberBoard, pipelines: Callable[[], list[str]], lost_after_ms: int
) -> Callable[[int], dict[str, Sample]]:
    """The history's sampler: every stored pipeline's whole status at ``now``."""
    rates = MemberRates()

    def sample_all(now: int) -> dict[str, Sample]:
        names = pipelines()
        rates.forget(set(names))
        taken: dict[str, Sample] = {}
        for name in names:
            reports = board.view_of(name, now)
            whole = whole_pipeline_status(name, reports, now, lost_after_ms)
            if whole is None:
                continue  # no member runs it yet
            live = [r for r in reports if now - r.published_ms <= lost_after_ms]
            rate_in, rate_out = rates.update(name, live)
            taken[name] = replace(status_sample(now, whole), rate_in=rate_in, rate_out=rate_out)
        return taken

    return sample_all
