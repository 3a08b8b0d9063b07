"""The workers' pure parts: how many CPUs a cgroup allows, and one exposition merged
from several workers'."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service.workers.cpus import available_cpus, quota_cpus
from service.workers.exposition import merged_exposition


def test_a_cgroup_v2_quota_gives_its_cpus_rounded_up() -> None:
    assert quota_cpus("200000 100000\n") == 2
    assert quota_cpus("150000 100000") == 2
    assert quota_cpus("50000 100000") == 1


def test_no_quota_limits_nothing() -> None:
    assert quota_cpus("max 100000") is None
    assert quota_cpus(None, "-1", "100000") is None
    assert quota_cpus(None) is None


def test_a_cgroup_v1_quota_gives_its_cpus() -> None:
    assert quota_cpus(None, "300000\n", "100000\n") == 3


def test_the_available_cpus_are_the_affinity_capped_by_the_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("100000 100000\n")
    assert available_cpus(tmp_path) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert available_cpus(tmp_path) >= 1


def exposition(records: int, memory: float) -> str:
    registry = CollectorRegistry()
    Counter("clockwork_records_in", "in", ("pipeline",), registry=registry).labels("p").inc(records)
    Histogram("clockwork_batch", "b", ("pipeline",), buckets=(1.0,), registry=registry).labels(
        "p"
    ).observe(0.5)
    Gauge("process_resident_memory_bytes", "rss", registry=registry).set(memory)
    return generate_latest(registry).decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_every_worker_s_series_is_kept_with_its_worker_label() -> None:
    merged = merged_exposition(
        exposition(0, 10.0), [(1, exposition(3, 20.0)), (2, exposition(4, 30.0))]
    ).decode()
    found = samples(merged)
    total = "clockwork_records_in_total"
    assert found[(total, (("pipeline", "p"), ("worker", "1")))] == 3
    assert found[(total, (("pipeline", "p"), ("worker", "2")))] == 4
    assert found[(total, (("pipeline", "p"),))] == 0  # the API process's own
    rss = "process_resident_memory_bytes"
    assert [
        found[(rss, ())],
        found[(rss, (("worker", "1"),))],
        found[(rss, (("worker", "2"),))],
    ] == [
        10.0,
        20.0,
        30.0,
    ]
    assert found[("clockwork_batch_count", (("pipeline", "p"), ("worker", "2")))] == 1


def test_each_family_is_declared_once() -> None:
    merged = merged_exposition(
        exposition(1, 1.0), [(1, exposition(1, 1.0)), (2, exposition(1, 1.0))]
    ).decode()
    types = [line for line in merged.splitlines() if line.startswith("# TYPE")]
    assert len(types) == len(set(types))
    assert "# TYPE clockwork_records_in_total counter" in types
