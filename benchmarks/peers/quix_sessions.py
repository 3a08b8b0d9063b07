"""Quix Streams runner for the state-at-scale benchmark (``benchmarks/state_scale.py``):
``session_window(gap, grace 0).agg(count, sum).final(closing_strategy="partition")``.

Event time comes from the payload's ``ts`` (``timestamp_extractor``); sessions are per
Kafka key (the producer keys each record by its session key). ``closing_strategy=
"partition"``: the newest timestamp of the partition closes the sessions of every key
in it, as Clockwork's watermark does (the workload's event times never close one, so
nothing is emitted). State: Quix's RocksDB (rocksdict) with its changelog topics, every
setting Quix's default. Stops once ``--records`` records went through the window.
"""

from __future__ import annotations

import sys
import tempfile
import time

from _common import (
    FETCH_MAX_WAIT_MS,
    FETCH_QUEUE_BACKOFF_MS,
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    Report,
    parse_args,
)

GAP_MS = 30 * 60 * 1000


def main() -> int:
    args = parse_args(__doc__ or "")
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
            # Stops after this record has gone through the window; the state is
            # flushed and the offsets committed on the way out.
            app.stop()

    sdf = app.dataframe(source)
    sdf = sdf.update(count_input)
    sdf = (
        sdf.session_window(inactivity_gap_ms=GAP_MS)
        .agg(count=Count(), sum=Sum("amount"))
        .final(closing_strategy="partition")
    )
    sdf.to_topic(sink)
    app.run()
    report.finished = time.time()
    report.records_in = seen
    report.write(args.report)
    return 0 if seen == expected_records else 1


if __name__ == "__main__":
    sys.exit(main())
