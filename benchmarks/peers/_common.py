"""What every peer runner shares. Stdlib only: it runs inside each peer's own venv.

A runner is started as ``<peer venv>/bin/python benchmarks/peers/<runner>.py ARGS``.
It reads the input topic (or file), writes one JSON row per final window,
``{"user", "start", "end", "count", "sum"}``, to the output topic (or directory), and
writes a small JSON report (its version and its timings) to ``--report``.

Timing: ``started`` is taken when the runner starts (before importing the tool),
``first_record`` when the tool hands the runner's code its first record, ``finished``
once the last result is flushed. The harness derives events/s from
``finished - first_record`` (so tool start-up, consumer-group joins and JVM start are
left out of the rate) and reports the process's whole wall time beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

STARTED = time.time()

# Settings every Kafka-reading peer gets, because of the embedded broker (Tansu):
# a waiting fetch is answered only after the max wait, and group joins take
# session_timeout / 2 (see shared/design/embedded-broker.md): 2000 ms as it advises (~1 s
# joins), the value the service uses against a Tansu it did not start.
FETCH_MAX_WAIT_MS = 20
SESSION_TIMEOUT_MS = 2000
HEARTBEAT_INTERVAL_MS = 500
# librdkafka-based peers (Quix Streams, Bytewax): Tansu ignores the per-partition fetch
# limit and can return ~5 MB per partition, which overflows librdkafka's pre-fetch queue;
# librdkafka then waits fetch.queue.backoff.ms (default 1000 ms) before the next fetch.
# 10 ms against this broker (shared/design/embedded-broker.md; measured there: ~150k
# records/s without it against ~600k/s with it for a plain confluent-kafka consumer).
FETCH_QUEUE_BACKOFF_MS = int(os.environ.get("PEERS_FETCH_QUEUE_BACKOFF_MS", "10"))
"""``PEERS_FETCH_QUEUE_BACKOFF_MS`` overrides it, for the A/B in docs/performance.md."""
WINDOW_MS = 60_000
OUT_OF_ORDERNESS_MS = 2000


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers")
    parser.add_argument("--input-topic")
    parser.add_argument("--output-topic")
    parser.add_argument("--group", default="bench")
    parser.add_argument("--records", type=int, help="records in the input, end markers included")
    parser.add_argument("--input-file", type=Path, help="JSON lines input (file-source peers)")
    parser.add_argument("--output-dir", type=Path, help="where file-sink peers write results")
    parser.add_argument("--state-dir", type=Path, help="scratch directory for the tool's state")
    parser.add_argument("--report", type=Path, required=True)
    return parser.parse_args()


@dataclass
class Report:
    tool: str
    version: str
    started: float = STARTED
    first_record: float | None = None
    finished: float | None = None
    records_in: int = 0
    rows_out: int = 0
    notes: list[str] = field(default_factory=list)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))


def result_row(user: str, start: int, count: int, total: float) -> dict[str, object]:
    return {"user": user, "start": start, "end": start + WINDOW_MS, "count": count, "sum": total}
