"""One ``/metrics`` for a replica of several workers: their expositions merged.

Each worker keeps its own registry (as with one process) and serves it on its loopback
socket; the API process fetches them all on a scrape and merges them into one
exposition. Every worker's sample gets a ``worker`` label (``"1"``..``"N"``), so no series
of two workers collides and none is summed away: ``sum by (pipeline)`` adds the workers
up, as ``sum`` over replicas does. A worker that does not answer in time is left out
of that scrape (a gap, as a replica that does not answer Prometheus is), and a restarted
worker's counters start again at zero (a counter reset, which ``rate`` handles).

Why not prometheus_client's multiprocess mode: it keeps a dead process's gauges (every
partition it held) until told otherwise, cannot drop a label set (the runtime removes a
revoked partition's series), and turns every metric update into an mmap write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

__all__ = ["fetch_metrics", "merged_exposition"]

WORKER_LABEL = "worker"


def merged_exposition(own: str, workers: Iterable[tuple[int, str]]) -> bytes:
    """The API process's own exposition (``own``, unlabelled) and each worker's
    (``(worker, text)``), as one exposition: one family per name, every worker's samples
    labelled with its number."""
    families: dict[str, Metric] = {}
    _add(families, text_string_to_metric_families(own), None)
    for worker, text in workers:
        _add(families, text_string_to_metric_families(text), str(worker))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(list(families.values())))
    return generate_latest(registry)


def _add(families: dict[str, Metric], found: Iterable[Metric], worker: str | None) -> None:
    for family in found:
        merged = families.get(family.name)
        if merged is None:
            merged = families[family.name] = Metric(family.name, family.documentation, family.type)
            merged.unit = family.unit
        for sample in family.samples:
            labels = sample.labels if worker is None else {**sample.labels, WORKER_LABEL: worker}
            merged.samples.append(
                Sample(sample.name, labels, sample.value, sample.timestamp, sample.exemplar)
            )


class _Fixed:
    """A collector of families already collected (the registry's interface)."""

    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


async def fetch_metrics(port: int, timeout_s: float = 2.0) -> str | None:
    """A worker's exposition from its loopback socket; None when it does not answer in
    ``timeout_s`` (restarting, or stuck: its series are missing from this scrape)."""
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(b"GET /metrics HTTP/1.0\r\nHost: worker\r\n\r\n")
                await writer.drain()
                raw = await reader.read()
            finally:
                writer.close()
                await writer.wait_closed()
    except (OSError, TimeoutError):
        return None
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
        return None
    return body.decode("utf-8", "replace")
