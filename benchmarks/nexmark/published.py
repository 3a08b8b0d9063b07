"""Flink's own Nexmark figures, as the Nexmark project publishes them: the third column
of :mod:`benchmarks.nexmark.bench`'s table, beside the two engines measured here.

Source: ``GUIDE_V1.md`` of github.com/nexmark/nexmark at commit
``6b3646c3baec701f1fa74baf938d235f742e5d3c`` (2025-12-26), "Nexmark Benchmark Result",
given there as "an example of result table" (the README links it; the README itself
held the same table until commit ``e115ef9``, 2025-03-02, which moved it there).
Its setup: a standalone cluster (its stated minimum: 3 workers of 8 cores), 8
TaskManagers of one slot, parallelism 8, RocksDB with incremental checkpoints,
exactly-once checkpoints every 3 minutes, MiniBatch on (2 s, 50,000 rows), Flink 1.13 to
2.0; 100 million events from nexmark-flink's in-job generator (bid 92 %, auction 6 %,
person 2 %), one stream that each query's view filters by type.

``Throughput/Cores`` is events generated / (cores x seconds), ``cores`` the CPU in use
averaged over the run as its collector measured it on every worker: events per CPU
second, every generated event counted whichever the query reads.
"""

from __future__ import annotations

SOURCE = "github.com/nexmark/nexmark GUIDE_V1.md @ 6b3646c3baec701f1fa74baf938d235f742e5d3c"

PER_CORE = {
    "q0": 155_020,
    "q1": 157_940,
    "q2": 175_210,
    "q3": 152_120,
    "q4": 34_330,
    "q5": 22_140,
    "q7": 12_330,
    "q8": 146_140,
    "q11": 39_700,
}
"""Events generated per CPU second, per query, as published (its ``K/s`` times 1,000)."""
