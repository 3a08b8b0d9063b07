"""``python -m benchmarks.run`` (``make bench``): our service and the raw-consume
ceilings (aiokafka alone; aiokafka + orjson decode) on the standard workload, in the
same run and under the same conditions, each repeated; one table of medians, also
written as markdown (``benchmarks/peers/results/bench.md``).

The peers are ``python -m benchmarks.peers.run`` (``make bench-peers``); both use the
same harness (benchmarks/peers/harness.py): a fresh embedded broker per run, the
contender as its own process, its output checked against the expected windows.
``benchmarks/e2e.py`` is the runtime engineer's in-process variant (with ``--profile``).

Quick check: ``python -m benchmarks.run --events 20000 --repeat 1``.
"""

from __future__ import annotations

import sys

from benchmarks.peers.run import RESULTS
from benchmarks.peers.run import main as run_table


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return run_table(
        ["--peers", "", "--raw-decode", "--markdown", str(RESULTS / "bench.md"), *args]
    )


if __name__ == "__main__":
    sys.exit(main())
