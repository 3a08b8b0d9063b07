"""The floor benchmark's trimmed timer view still answers like the real one.

``benchmarks.process_floor`` bounds what trimming the timer view could save by running a
view with the checks and counters taken out; the bound means something only while that
view does the same queue work, so its outputs must stay the real view's.
"""

from __future__ import annotations

from benchmarks.inprocess import make_records
from benchmarks.process import plan, run
from benchmarks.process_floor import VARIANTS


def test_the_view_without_checks_fires_what_the_real_view_fires() -> None:
    records = make_records(20_000)
    rounds = plan(records, 1)

    _, _, real = run(VARIANTS["real"], rounds, 1)
    _, _, trimmed = run(VARIANTS["no checks"], rounds, 1)

    assert len(real) == len({r[0] for r in records})  # one alert per key
    assert sorted(trimmed) == sorted(real)
    assert sum(real) == len(records)
