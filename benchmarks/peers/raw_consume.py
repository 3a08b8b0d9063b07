"""The raw-consume ceiling: aiokafka reading the input topic to its end, nothing else
(``--decode``: and ``orjson.loads`` of every value). Runs in the main venv.

No processing can be faster than reading its input, so this bounds every Kafka peer
and our service on this broker and machine. By default the partitions are assigned
(no consumer group, no join); ``--group-join`` subscribes in a consumer group as the
service and the group-consuming peers do, so its whole-process time includes the join
(on Tansu half the session timeout, ~1 s), the fair ceiling for that column.
"""

from __future__ import annotations

import asyncio
import sys
import time

from _common import (
    FETCH_MAX_WAIT_MS,
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    Report,
    parse_args,
)


async def consume(args, report: Report, decode: bool, group: bool = False) -> int:
    import orjson
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        max_partition_fetch_bytes=1 << 20,
        **(
            {
                "group_id": args.group,
                "session_timeout_ms": SESSION_TIMEOUT_MS,
                "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
            }
            if group
            else {}
        ),
    )
    await consumer.start()
    seen = 0
    try:
        if group:
            consumer.subscribe([args.input_topic])
        else:
            parts = await consumer._client._wait_on_metadata(args.input_topic)
            consumer.assign([TopicPartition(args.input_topic, p) for p in sorted(parts)])
        loads = orjson.loads
        while seen < args.records:
            batch = await consumer.getmany(timeout_ms=500, max_records=10_000)
            for records in batch.values():
                if seen == 0 and records:
                    report.first_record = time.time()
                if decode:
                    for r in records:
                        loads(r.value)
                seen += len(records)
    finally:
        await consumer.stop()
    return seen


def main() -> int:
    decode = "--decode" in sys.argv
    if decode:
        sys.argv.remove("--decode")
    group = "--group-join" in sys.argv
    if group:
        sys.argv.remove("--group-join")
    args = parse_args(__doc__ or "")
    import aiokafka

    name = "raw consume + orjson decode" if decode else "raw consume"
    report = Report(f"{name} (aiokafka)", aiokafka.__version__)
    report.records_in = asyncio.run(consume(args, report, decode, group))
    report.finished = time.time()
    report.write(args.report)
    return 0 if report.records_in == args.records else 1


if __name__ == "__main__":
    sys.exit(main())
