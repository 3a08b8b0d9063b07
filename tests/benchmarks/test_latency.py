"""The latency benchmark's definitions: a result's latency, and what --check compares."""

from __future__ import annotations

import json
from array import array

from benchmarks.latency import BOUND_MS, COOLDOWN_MS, WINDOW_MS, latencies, result_digest


def window_result(key: str, start: int, n: int = 1, total: int = 0) -> bytes:
    return json.dumps(
        {
            "window": {"start": start, "end": start + WINDOW_MS},
            "key": key,
            "result": {"n": n, "total": total},
        }
    ).encode()


def test_a_window_waits_from_the_first_batch_at_or_past_its_end_plus_the_bound() -> None:
    stamps = array("q", range(0, 5_000, 2))  # a batch every 2 ms for 5 s
    end = 2_000
    arrived = end + BOUND_MS + 7.0
    assert latencies([(arrived, window_result("u1", end - WINDOW_MS))], stamps, "window", 0) == [
        7.0
    ]


def test_warm_up_windows_and_those_closed_in_the_cooldown_are_left_out() -> None:
    stamps = array("q", range(0, 5_000, 2))
    closed_late = stamps[-1] - COOLDOWN_MS + 2 - BOUND_MS  # closed inside the cooldown
    never_closed = stamps[-1]  # no record at or past its end plus the bound
    rows = [
        (9_999.0, window_result("u1", 0)),  # ends at 1000, before the warm-up's end
        (9_999.0, window_result("u1", closed_late - WINDOW_MS)),
        (9_999.0, window_result("u1", never_closed - WINDOW_MS)),
    ]
    assert latencies(rows, stamps, "window", warm=1_500) == []


def test_a_stateless_result_waits_from_its_own_produce_time() -> None:
    stamps = array("q", [1_000, 1_002, 1_004])
    row = json.dumps({"key": "u1", "value": {"user": "u1", "ts": 1_002, "amount": 3}}).encode()
    early = json.dumps({"key": "u1", "value": {"user": "u1", "ts": 999, "amount": 3}}).encode()
    assert latencies([(1_010.0, row), (1_010.0, early)], stamps, "stateless", 1_000) == [8.0]


def test_the_digest_holds_the_windows_a_record_closes_whatever_their_order() -> None:
    newest = 3_000
    rows = [window_result("u1", 0, 2, 5), window_result("u2", 1_000, 1, 1)]
    open_window = window_result("u1", 2_000, 1, 1)  # ends 3000: closed only at 3200
    digest = result_digest([*rows, open_window], "window", newest)
    assert digest == {("u1", 0): (2, 5), ("u2", 1_000): (1, 1)}
    assert result_digest(rows[::-1], "window", newest) == digest
    assert result_digest([window_result("u1", 0, 2, 6), rows[1]], "window", newest) != digest


def test_the_stateless_digest_counts_a_record_twice_if_written_twice() -> None:
    row = json.dumps({"key": "u1", "value": {"user": "u1", "ts": 5, "amount": 1}}).encode()
    assert result_digest([row], "stateless", 0) != result_digest([row, row], "stateless", 0)
