"""The benchmark workload is deterministic and its expected output is complete."""

from __future__ import annotations

from benchmarks.workload import (
    ResultRow,
    Workload,
    check_results,
    end_markers,
    expected_results,
    generate,
)


def test_same_seed_same_events_and_expected_totals_sum_to_n() -> None:
    workload = Workload(events=20_000, users=500)
    events = list(generate(workload))
    assert events == list(generate(workload))
    assert events != list(generate(Workload(events=20_000, users=500, seed=workload.seed + 1)))

    # No event is behind the running maximum by the declared bound: none is late.
    running_max = events[0].ts
    for ev in events:
        assert ev.ts > running_max - workload.out_of_orderness_ms
        running_max = max(running_max, ev.ts)
    assert all(m.ts > running_max + workload.window_ms for m in end_markers(workload))

    expected = expected_results(workload, events)
    assert expected.total_count == workload.events
    assert sum(c for _, c in expected.windows.values()) == sum(ev.cents for ev in events)

    rows = [ResultRow(u, s, c, cents / 100) for (u, s), (c, cents) in expected.windows.items()]
    assert check_results(rows, expected).ok
    assert not check_results(rows[1:], expected).ok
    assert not check_results([*rows, rows[0]], expected).ok
