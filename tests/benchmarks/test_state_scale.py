"""The state-at-scale benchmark's pure parts: its workload, its checks, its parsing."""

from __future__ import annotations

from pathlib import Path

import orjson

from benchmarks.state_scale import (
    BASE_TS,
    GAP_MS,
    SPAN_MS,
    dir_bytes,
    expected_sum,
    metric_sum,
    restore_records,
    sample_indices,
    session_problem,
    session_records,
)
from benchmarks.workload import kafka_partition


def test_session_records_give_every_key_per_key_records_in_its_kafka_partition() -> None:
    records = list(session_records(keys=50, per_key=3, partitions=4))
    assert len(records) == 150
    by_key: dict[bytes, list[dict[str, int]]] = {}
    for partition, key, value, ts in records:
        assert partition == kafka_partition(key, 4)
        event = orjson.loads(value)
        assert event["user"] == key.decode() and event["ts"] == ts
        by_key.setdefault(key, []).append(event)
    assert len(by_key) == 50
    for i in range(50):
        events = by_key[f"s{i}".encode()]
        assert sum(e["amount"] for e in events) == expected_sum(i, 3)


def test_session_event_times_rise_within_less_than_one_gap() -> None:
    times = [ts for _, _, _, ts in session_records(keys=1000, per_key=2, partitions=4)]
    assert times == sorted(times)
    assert times[0] >= BASE_TS and times[-1] < BASE_TS + SPAN_MS < BASE_TS + GAP_MS


def test_restore_records_put_one_record_per_key_in_partition_zero() -> None:
    records = list(restore_records(100))
    assert {p for p, _, _, _ in records} == {0}
    assert len({k for _, k, _, _ in records}) == 100


def test_sample_indices_spread_over_the_keys_first_and_last_included() -> None:
    assert sample_indices(1000, 5) == [0, 249, 499, 749, 999]
    assert sample_indices(3, 10) == [0, 1, 2]
    assert sample_indices(10, 1) == [9]
    assert sample_indices(0, 5) == []


def test_session_problem_accepts_one_open_session_with_the_count_and_sum() -> None:
    window = {"start": 1, "end": 2, "result": {"count": 2, "sum": 7}, "fires": 0}
    answer = {"found": True, "state": {"windows": [window]}}
    assert session_problem(answer, 2, 7) is None
    assert session_problem({**answer, "found": False}, 2, 7) is not None
    assert session_problem({"found": True, "state": {"windows": [window, window]}}, 2, 7)
    assert session_problem(answer, 2, 8) is not None
    fired = {"found": True, "state": {"windows": [{**window, "fires": 1}]}}
    assert session_problem(fired, 2, 7) is not None


def test_metric_sum_adds_the_samples_whose_labels_match() -> None:
    text = "\n".join(
        [
            "# HELP clockwork_state_restored_total The restores.",
            'clockwork_state_restored_total{pipeline="p",source="local",worker="0"} 3.0',
            'clockwork_state_restored_total{pipeline="p",source="local",worker="1"} 4.0',
            'clockwork_state_restored_total{pipeline="p",source="changelog",worker="0"} 9.0',
            'clockwork_state_restored_total{pipeline="q",source="local",worker="0"} 100.0',
            'clockwork_state_restored_created{pipeline="p",source="local"} 1.7e9',
            "clockwork_up 1.0",
        ]
    )
    name = "clockwork_state_restored_total"
    assert metric_sum(text, name, pipeline="p", source="local") == 7.0
    assert metric_sum(text, name, pipeline="p") == 16.0
    assert metric_sum(text, name, pipeline="none") == 0.0
    assert metric_sum(text, "clockwork_up") == 1.0


def test_dir_bytes_counts_the_blocks_of_every_file_below(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * 10_000)
    (tmp_path / "g").write_bytes(b"y" * 5000)
    assert dir_bytes(tmp_path) >= 15_000
    assert dir_bytes(tmp_path / "missing") == 0
