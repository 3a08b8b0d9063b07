"""The latency benchmark's pipelines in Bytewax (issue #51).

``<bytewax venv>/bin/python benchmarks/peers/bytewax_latency.py BOOTSTRAP IN OUT
default|low-latency window|stateless [EXPECTED]``

Run by ``benchmarks/latency.py`` with the Bytewax venv of the peers' table
(``benchmarks/peers/venvs.py``). Input: ``KafkaSource`` over IN from its start (every
partition assigned, no consumer group), JSON ``{"user", "ts", "amount"}`` keyed by user.

- ``window``: ``windowing.fold_window`` with an ``EventClock`` on ``ts`` whose
  ``wait_for_system_duration`` is the 200 ms bound, and a ``TumblingWindower`` of 1 s
  aligned to the epoch; count and sum per user, one result per window when the clock's
  watermark passes its end, written as JSON
  ``{"window": {"start", "end"}, "key", "result": {"n", "total"}}``. The clock is
  Bytewax's default sense of time: the watermark is the newest ``ts`` minus the wait,
  moved on by the system time elapsed since, and the runtime wakes up to close windows
  when that reaches their end (with no newer record needed).
- ``stateless``: ``filter(amount < 6)`` then the record as ``{"key", "value"}``.

One worker. Prints ``{"running_ms"}`` when the dataflow starts, and with ``EXPECTED``
``{"first_ms", "last_ms", "records"}`` once that many input records were parsed (the
maximum-rate measurement); keeps running until killed.

The settings (:func:`settings`): Bytewax's defaults, or with ``low-latency`` what its and
librdkafka's documentation give for latency; docs/performance.md cites them.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC

WINDOW_MS = 1_000
BOUND_MS = 200


def settings(low_latency: bool) -> tuple[int, dict[str, str]]:
    """(the source's batch_size, producer settings beyond librdkafka's defaults)."""
    if not low_latency:
        return 1000, {}
    # KafkaSource's docstring: batch_size (1000) "can be tuned lower to potentially
    # decrease individual message processing latency"; librdkafka's linger.ms (5 ms) to 0.
    return 100, {"linger.ms": "0"}


def main(argv: list[str]) -> int:
    bootstrap, topic_in, topic_out, mode, pipeline = argv[:5]
    expected = int(argv[5]) if len(argv) > 5 else 0
    from datetime import datetime, timedelta

    import bytewax.operators as op
    from bytewax.connectors.kafka import KafkaSink, KafkaSinkMessage, KafkaSource
    from bytewax.dataflow import Dataflow
    from bytewax.operators import windowing as win
    from bytewax.run import cli_main

    batch_size, producer_extra = settings(mode == "low-latency")
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    seen = {"n": 0, "first": 0}

    def parse(msg):  # KafkaSourceMessage -> (user, event)
        if expected:
            seen["n"] += 1
            if seen["n"] == 1:
                seen["first"] = int(time.time() * 1000)
            if seen["n"] == expected:
                last = int(time.time() * 1000)
                line = {"first_ms": seen["first"], "last_ms": last, "records": expected}
                print(json.dumps(line), flush=True)
        return msg.key.decode(), json.loads(msg.value)

    flow = Dataflow("latency")
    source = KafkaSource([bootstrap], [topic_in], tail=True, batch_size=batch_size)
    keyed = op.map("parse", op.input("in", flow, source), parse)
    if pipeline == "window":
        clock = win.EventClock(
            ts_getter=lambda event: epoch + timedelta(milliseconds=event["ts"]),
            wait_for_system_duration=timedelta(milliseconds=BOUND_MS),
        )
        windower = win.TumblingWindower(length=timedelta(milliseconds=WINDOW_MS), align_to=epoch)

        def fold(acc: list, event: dict) -> list:
            acc[0] += 1
            acc[1] += event["amount"]
            return acc

        def to_message(item):  # (user, (window_id, [count, sum]))
            user, (window_id, (n, total)) = item
            start = window_id * WINDOW_MS
            row = {
                "window": {"start": start, "end": start + WINDOW_MS},
                "key": user,
                "result": {"n": n, "total": total},
            }
            return KafkaSinkMessage(user.encode(), json.dumps(row).encode())

        out = win.fold_window(
            "agg",
            keyed,
            clock,
            windower,
            builder=lambda: [0, 0],
            folder=fold,
            merger=lambda a, b: [a[0] + b[0], a[1] + b[1]],
            ordered=False,
        )
        results = op.map("row", out.down, to_message)
    else:
        kept = op.filter("filter", keyed, lambda item: item[1]["amount"] < 6)
        results = op.map(
            "row",
            kept,
            lambda item: KafkaSinkMessage(
                item[0].encode(), json.dumps({"key": item[0], "value": item[1]}).encode()
            ),
        )
    op.output("out", results, KafkaSink([bootstrap], topic_out, add_config=producer_extra))
    print(json.dumps({"running_ms": int(time.time() * 1000)}), flush=True)
    cli_main(flow, workers_per_process=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
