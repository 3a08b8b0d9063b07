"""Quix Streams runner: ``tumbling_window(60 s, grace 2 s).agg(count, sum).final()``.

Event time comes from the payload's ``ts`` (``timestamp_extractor``). Windows close
per partition (``closing_strategy="partition"``): the newest timestamp seen in the
partition closes the windows of every key in it, which is Flink's behaviour for a
keyed stream whose keys never cross partitions, and lets the end marker close the last
windows. State is RocksDB with changelog topics, Quix's defaults.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from _common import (
    FETCH_MAX_WAIT_MS,
    FETCH_QUEUE_BACKOFF_MS,
    HEARTBEAT_INTERVAL_MS,
    OUT_OF_ORDERNESS_MS,
    SESSION_TIMEOUT_MS,
    WINDOW_MS,
    Report,
    parse_args,
    result_row,
)


def run(args: Any, windowed: Callable[[Any, Any, Any], Any]) -> int:
    """Read ``args.input_topic`` (JSON, event time from ``ts``) into ``windowed(sdf,
    Count, Sum)`` and its results into ``args.output_topic``, until ``args.records``
    records went through; then write the report. Also the sessions' runner's
    (``quix_sessions.py``)."""
    import quixstreams
    from quixstreams import Application
    from quixstreams.dataframe.windows import Count, Sum

    report = Report("Quix Streams", quixstreams.__version__)
    state_dir = args.state_dir or tempfile.mkdtemp(prefix="quix-state-")
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        state_dir=str(state_dir),
        loglevel="WARNING",
        consumer_extra_config={
            "fetch.wait.max.ms": FETCH_MAX_WAIT_MS,
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        },
    )
    source = app.topic(
        args.input_topic,
        value_deserializer="json",
        timestamp_extractor=lambda value, headers, ts, ts_type: value["ts"],
    )
    sink = app.topic(args.output_topic, value_serializer="json", key_serializer="bytes")
    expected_records = args.records
    seen = 0

    def count_input(value: dict) -> None:
        nonlocal seen
        if seen == 0:
            report.first_record = time.time()
        seen += 1

        if seen == expected_records:
            # Stops after this record has gone through the window; the producer is
            # flushed and the offsets committed on the way out.
            app.stop()

    sdf = app.dataframe(source)
    sdf = sdf.update(count_input)
    windowed(sdf, Count, Sum).to_topic(sink)
    app.run()
    report.finished = time.time()
    report.records_in = seen
    report.write(args.report)
    return 0 if seen == expected_records else 1


def main() -> int:
    def to_row(window: dict, key: bytes, timestamp: int, headers: object) -> dict:
        # .agg(count=..., sum=...) gives {"start", "end", "count", "sum"}.
        return result_row(key.decode(), window["start"], window["count"], window["sum"])

    def windowed(sdf: Any, count: Any, total: Any) -> Any:
        return (
            sdf.tumbling_window(duration_ms=WINDOW_MS, grace_ms=OUT_OF_ORDERNESS_MS)
            .agg(count=count(), sum=total("amount"))
            .final(closing_strategy="partition")
            .apply(to_row, metadata=True)
        )

    return run(parse_args(__doc__ or ""), windowed)


if __name__ == "__main__":
    sys.exit(main())
