"""The latency benchmark's pipelines in Quix Streams (issue #51).

``<quix venv>/bin/python benchmarks/peers/quix_latency.py BOOTSTRAP IN OUT
default|low-latency window|stateless STATE_DIR [EXPECTED]``

Run by ``benchmarks/latency.py`` with the Quix Streams venv of the peers' table
(``benchmarks/peers/venvs.py``). Input: JSON ``{"user", "ts", "amount"}`` keyed by user,
event time from ``ts`` (``timestamp_extractor``).

- ``window``: ``tumbling_window(1 s, grace 200 ms).agg(n=Count(), total=Sum("amount"))
  .final()``: one result per window once the event time passes its end plus the grace,
  written as JSON ``{"window": {"start", "end"}, "key", "result": {"n", "total"}}``.
- ``stateless``: ``filter(amount < 6)`` then the record as ``{"key", "value"}``.

Prints ``{"running_ms"}`` when the application starts (before its consumer joins the
group: the benchmark's warm-up covers the join), and with ``EXPECTED``
``{"first_ms", "last_ms", "records"}`` once that many input records went through
(the maximum-rate measurement); keeps running until killed.

The settings (:func:`settings`): Quix's defaults, or with ``low-latency`` what its and
librdkafka's documentation give for latency; docs/performance.md cites them.
"""

from __future__ import annotations

import json
import sys
import time

WINDOW_MS = 1_000
BOUND_MS = 200


def settings(low_latency: bool) -> tuple[dict[str, object], str]:
    """(producer settings beyond Quix's, the windows' closing strategy)."""
    if not low_latency:
        return {}, "key"
    # librdkafka sends a batch after linger.ms (default 5 ms); 0 sends at once.
    # "partition": any record of the partition closes the windows of every key in it
    # (the default "key" waits for a newer record of the same key).
    return {"linger.ms": 0}, "partition"


def main(argv: list[str]) -> int:
    bootstrap, topic_in, topic_out, mode, pipeline, state_dir = argv[:6]
    expected = int(argv[6]) if len(argv) > 6 else 0
    from quixstreams import Application
    from quixstreams.dataframe.windows import Count, Sum

    producer_extra, closing = settings(mode == "low-latency")
    app = Application(
        broker_address=bootstrap,
        consumer_group=f"quix-{topic_in}",
        auto_offset_reset="earliest",
        state_dir=state_dir,
        loglevel="WARNING",
        producer_extra_config=producer_extra,
    )
    source = app.topic(
        topic_in,
        value_deserializer="json",
        timestamp_extractor=lambda value, headers, ts, ts_type: value["ts"],
    )
    sink = app.topic(topic_out, value_serializer="json", key_serializer="bytes")
    seen = {"n": 0, "first": 0}

    def count(value: dict) -> None:
        seen["n"] += 1
        if seen["n"] == 1:
            seen["first"] = int(time.time() * 1000)
        if seen["n"] == expected:
            last = int(time.time() * 1000)
            line = {"first_ms": seen["first"], "last_ms": last, "records": expected}
            print(json.dumps(line), flush=True)

    sdf = app.dataframe(source)
    if expected:
        sdf = sdf.update(count)
    if pipeline == "window":
        sdf = (
            sdf.tumbling_window(duration_ms=WINDOW_MS, grace_ms=BOUND_MS)
            .agg(n=Count(), total=Sum("amount"))
            .final(closing_strategy=closing)  # type: ignore[arg-type]
        )
        sdf = sdf.apply(
            lambda w, key, ts, headers: {
                "window": {"start": w["start"], "end": w["end"]},
                "key": key.decode(),
                "result": {"n": w["n"], "total": w["total"]},
            },
            metadata=True,
        )
    else:
        sdf = sdf.filter(lambda v: v["amount"] < 6)
        sdf = sdf.apply(
            lambda v, key, ts, headers: {"key": key.decode(), "value": v}, metadata=True
        )
    sdf.to_topic(sink)
    print(json.dumps({"running_ms": int(time.time() * 1000)}), flush=True)
    app.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
