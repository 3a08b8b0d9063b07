"""Latency, event to result: how long a result takes to become readable.

``python -m benchmarks.latency [--broker kafka|tansu | --bootstrap HOST:PORT]
[--pipeline window|stateless] [--shuffle] [--rates R,R,...] [--fractions F,F,...]
[--max-rate N] [--seconds S] [--watermark-interval-ms MS] [--workers W]``

**What is measured** (the same definition for every engine, issue #51):

- A producer process writes JSON ``{"user", "ts", "amount"}`` records at a fixed rate
  over 4 partitions, 100 users; ``ts`` is the record's produce wall time (epoch ms), and
  the pipeline's event time. Records leave in small batches every ``TICK_S`` (the rate
  spread evenly over time), each batch stamped when it is built.
- **Window results** (``--pipeline window``: tumbling 1 s count and sum per user, bound
  200 ms): a window ``[start, end)`` can close at the earliest when a record whose event
  time is at or past ``end + bound`` has been produced (the watermark is the event time
  minus the bound). The window's *close time* is the produce time of the first such
  record. A result's latency is the wall time at which a consumer of the result topic
  received it, minus its window's close time.
- **Per-record results** (``--pipeline stateless``: a ``map`` behind a filter): a
  result's latency is its arrival minus its record's produce time (``ts``).
- The consumer of the results runs in this process, fetching with a 5 ms wait; the
  producer in another, so neither steals the other's loop. Every clock is this host's
  ``time.time()``. The first ``WARMUP_S`` seconds of results are left out.

Reported per rate: p50, p99, p99.9 and the maximum, in milliseconds, and the number of
results. The rates are ``--rates`` (events/s) and ``--fractions`` of the maximum rate:
``--max-rate`` or, without it, the rate this pipeline reaches over input written
beforehand (bounded, from the partitions' assignment to ``finished``), measured first
in the same run.

Clockwork runs as users run it, ``python -m service`` with the spec POSTed; every
setting is the default unless an option says otherwise (``--watermark-interval-ms 0``
recomputes the watermark after every batch instead of every 200 ms: the low-latency
setting, docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from tempfile import TemporaryDirectory
from typing import Any

from benchmarks.peers.ours import call
from benchmarks.workload import create_topic
from service.runtime.kafka.embedded_broker import free_port

PARTITIONS = 4
USERS = 100
WINDOW_MS = 1_000
BOUND_MS = 200
TICK_S = 0.002
WARMUP_S = 3.0
POLL_S = 0.05


# -- the producer process ----------------------------------------------------------------
async def produce_at_rate(
    bootstrap: str,
    topic: str,
    rate: float,
    seconds: float,
    keyed_by_user: bool,
    limit: int | None = None,
) -> array[int]:
    """Write ``rate`` records per second for ``seconds`` (or ``limit`` records as fast as
    they go); returns every batch's produce time."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=0, acks=1, max_batch_size=1 << 20
    )
    await producer.start()
    stamps = array("q")
    sent = 0
    try:
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < seconds and (limit is None or sent < limit):
            due = min(int(rate * elapsed) - sent, 20_000)
            if limit is not None:
                due = min(limit - sent, 20_000)
            if due > 0:
                now_ms = int(time.time() * 1000)
                batches = [producer.create_batch() for _ in range(PARTITIONS)]
                for i in range(sent, sent + due):
                    user = b"u%d" % (i % USERS)
                    partition = i % USERS % PARTITIONS if keyed_by_user else i % PARTITIONS
                    value = b'{"user":"%s","ts":%d,"amount":%d}' % (user, now_ms, i % 7)
                    key = user if keyed_by_user else b"%d" % i
                    if batches[partition].append(key=key, value=value, timestamp=now_ms) is None:
                        batches[partition].close()
                        await producer.send_batch(batches[partition], topic, partition=partition)
                        batches[partition] = producer.create_batch()
                        batches[partition].append(key=key, value=value, timestamp=now_ms)
                for partition, batch in enumerate(batches):
                    if batch.record_count():
                        batch.close()
                        await producer.send_batch(batch, topic, partition=partition)
                stamps.append(now_ms)
                sent += due
            if limit is None:
                await asyncio.sleep(TICK_S)
        await producer.flush()
    finally:
        await producer.stop()
    return stamps


# -- this process: the service, the spec, the consumer of its results ---------------------
@dataclass
class Latencies:
    label: str
    rate: float
    samples: list[float] = field(default_factory=list)
    produced: int = 0

    def summary(self) -> dict[str, Any]:
        s = sorted(self.samples)
        if not s:
            return {"label": self.label, "rate": round(self.rate), "results": 0}

        def q(p: float) -> float:
            return s[min(len(s) - 1, int(p * len(s)))]

        return {
            "label": self.label,
            "rate": round(self.rate),
            "results": len(s),
            "p50_ms": round(q(0.50), 1),
            "p99_ms": round(q(0.99), 1),
            "p999_ms": round(q(0.999), 1),
            "max_ms": round(s[-1], 1),
            "mean_ms": round(statistics.fmean(s), 1),
        }


def spec(name: str, topic: str, args: argparse.Namespace, bounded: bool) -> dict[str, Any]:
    watermark: dict[str, Any] = {"max_out_of_orderness_ms": BOUND_MS}
    if args.watermark_interval_ms is not None:
        watermark["interval_ms"] = args.watermark_interval_ms
    body: dict[str, Any] = {
        "name": name,
        "source": {"topics": [topic], "bounded": bounded, "start_from": "earliest"},
        "key": {"field": "user", **({} if args.shuffle else {"partitioned": True})},
        "timestamp": {"field": "ts"},
        "watermark": watermark,
        "sink": {"topic": f"{name}.out"},
    }
    if args.pipeline == "window":
        body["operator"] = {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": WINDOW_MS},
            "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
        }
    else:
        body["steps"] = [{"filter": "amount < 6"}]
        body["operator"] = {"type": "map", "fields": ["user", "ts", "amount"]}
    return body


@contextmanager
def service(bootstrap: str, workers: int, root: str | None = None) -> Iterator[str]:
    """``python -m service`` on a free port (from the source tree ``root``, this one by
    default); yields its base URL, SIGTERM at the end."""
    port = free_port()
    tag = uuid.uuid4().hex[:6]
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SERVICE_HTTP_HOST": "127.0.0.1",
        "SERVICE_HTTP_PORT": str(port),
        "SERVICE_WORKERS": str(workers),
        "SERVICE_PIPELINES_TOPIC": f"bench.pipelines.{tag}",
        "SERVICE_MEMBERS_TOPIC": f"bench.members.{tag}",
        "SERVICE_STATUS_PUBLISH_INTERVAL_MS": "500",
        "SERVICE_LOG_LEVEL": "WARNING",
    }
    if root is not None:
        env["PYTHONPATH"] = root
    proc = subprocess.Popen([sys.executable, "-m", "service"], env=env, cwd=root)
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the service exited with {proc.returncode}")
            try:
                if call(f"{base}/readyz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(POLL_S)
        yield base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


def submit(base: str, body: dict[str, Any]) -> None:
    code, answer = call(f"{base}/pipelines", body)
    if code != 201:
        raise RuntimeError(f"POST /pipelines answered {code}: {answer}")


def wait_assigned(base: str, name: str) -> None:
    while True:
        _, status = call(f"{base}/pipelines/{name}/status")
        if status.get("partitions") and all(
            p.get("last_checkpoint_ms") is not None or p.get("offset") is not None
            for p in status["partitions"]
        ):
            return
        if status.get("state") == "failed":
            raise RuntimeError(f"the pipeline failed: {status.get('reason')}")
        time.sleep(POLL_S)


def max_rate(
    bootstrap: str, args: argparse.Namespace, events: int, root: str | None = None
) -> float:
    """Events/s of this pipeline over input written beforehand (bounded)."""
    topic = f"latency-max-{uuid.uuid4().hex[:6]}"
    asyncio.run(create_topic(bootstrap, topic, PARTITIONS))
    # as fast as the producer goes: the input exists before the pipeline starts
    asyncio.run(produce_at_rate(bootstrap, topic, 0, 3600, not args.shuffle, limit=events))
    produced = asyncio.run(_count(bootstrap, topic))
    name = f"lat-max-{uuid.uuid4().hex[:6]}"
    with service(bootstrap, args.workers, root) as base:
        submit(base, spec(name, topic, args, bounded=True))
        assigned = None
        while True:
            _, status = call(f"{base}/pipelines/{name}/status")
            now = time.monotonic()
            if assigned is None and status.get("partitions"):
                assigned = now
            if status.get("state") == "finished":
                break
            time.sleep(POLL_S)
    return produced / (now - (assigned or now))


async def _count(bootstrap: str, topic: str) -> int:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        ends = await consumer.end_offsets(tps)
        return sum(ends.values())
    finally:
        await consumer.stop()


async def consume_results(
    bootstrap: str, topic: str, stop: asyncio.Event, out: list[tuple[float, bytes]]
) -> None:
    """Every result with the wall time (ms) its fetch returned, until ``stop`` and idle."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=5,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await consumer.start()
    try:
        idle = 0
        while idle < 20 or not stop.is_set():
            batches = await consumer.getmany(timeout_ms=50)
            now = time.time() * 1000
            idle = idle + 1 if not batches else 0
            for records in batches.values():
                out.extend((now, r.value) for r in records if r.value is not None)
    finally:
        await consumer.stop()


def run_rate(
    bootstrap: str, args: argparse.Namespace, rate: float, label: str, root: str | None = None
) -> Latencies:
    name = f"lat-{uuid.uuid4().hex[:6]}"
    topic = f"{name}.in"
    asyncio.run(create_topic(bootstrap, topic, PARTITIONS))
    found = Latencies(label, rate)
    with service(bootstrap, args.workers, root) as base, TemporaryDirectory() as tmp:
        submit(base, spec(name, topic, args, bounded=False))
        wait_assigned(base, name)
        stamps_path = f"{tmp}/stamps"
        producer = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.latency",
                "produce",
                bootstrap,
                topic,
                str(rate),
                str(args.seconds),
                "user" if not args.shuffle else "order",
                stamps_path,
            ]
        )
        arrivals: list[tuple[float, bytes]] = []

        async def consume() -> None:
            stop = asyncio.Event()
            task = asyncio.ensure_future(consume_results(bootstrap, f"{name}.out", stop, arrivals))
            await asyncio.to_thread(producer.wait)
            await asyncio.sleep((WINDOW_MS + BOUND_MS) / 1000 + 1)
            stop.set()
            await task

        asyncio.run(consume())
        if producer.returncode != 0:
            raise RuntimeError(f"the producer exited with {producer.returncode}")
        stamps = array("q")
        with open(stamps_path, "rb") as f:
            stamps.frombytes(f.read())
    first, last = stamps[0], stamps[-1]
    found.produced = int(rate * args.seconds)
    warm = first + WARMUP_S * 1000
    for arrived, raw in arrivals:
        result = json.loads(raw)
        if args.pipeline == "window":
            end = result["window"]["end"]
            at = bisect.bisect_left(stamps, end + BOUND_MS)
            if at == len(stamps) or end < warm:
                continue  # closed by no produced record, or in the warm-up
            found.samples.append(arrived - stamps[at])
        else:
            produced = result["value"]["ts"]
            if produced >= warm and produced <= last:
                found.samples.append(arrived - produced)
    return found


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "produce":
        bootstrap, topic, rate, seconds, keyed, out = argv[1:7]
        stamps = asyncio.run(
            produce_at_rate(bootstrap, topic, float(rate), float(seconds), keyed == "user")
        )
        with open(out, "wb") as f:
            stamps.tofile(f)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--broker", choices=["tansu", "kafka"], default="kafka")
    parser.add_argument("--pipeline", choices=["window", "stateless"], default="window")
    parser.add_argument("--shuffle", action="store_true", help="keyed by order: the shuffle")
    parser.add_argument("--rates", default="20000", help="fixed rates, events/s")
    parser.add_argument("--fractions", default="0.1,0.3,0.6", help="of the maximum rate")
    parser.add_argument("--max-rate", type=float, default=None)
    parser.add_argument("--max-events", type=int, default=300_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--watermark-interval-ms", type=int, default=None)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--service-root",
        action="append",
        default=None,
        help="run the service from this source tree (another version); given twice or "
        "more, the runs alternate between the trees, rate by rate",
    )
    args = parser.parse_args(argv)

    def bench(bootstrap: str) -> dict[str, Any]:
        fractions = [float(f) for f in args.fractions.split(",") if f]
        roots: list[str | None] = list(args.service_root or [None])
        top = args.max_rate
        if fractions and top is None:  # the first tree's: every tree runs the same rates
            top = max_rate(bootstrap, args, args.max_events, roots[0])
        runs = [(float(r), f"{float(r):.0f}/s") for r in args.rates.split(",") if r]
        runs += [(f * (top or 0), f"{f:.0%} of max") for f in fractions]
        results = []
        for rate, label in runs:
            for root in roots:
                named = f"{label} ({root})" if root else label
                results.append(run_rate(bootstrap, args, rate, named, root).summary())
        return {
            "pipeline": args.pipeline,
            "shuffle": args.shuffle,
            "watermark_interval_ms": args.watermark_interval_ms,
            "workers": args.workers,
            "max_rate": round(top) if top else None,
            "runs": results,
        }

    if args.bootstrap:
        report = bench(args.bootstrap)
        report["broker"] = args.bootstrap
    else:
        from service.runtime.kafka.embedded_broker import EmbeddedBroker
        from tests.kafka.kafka_broker import KafkaBroker

        with EmbeddedBroker() if args.broker == "tansu" else KafkaBroker() as broker:
            report = bench(broker.bootstrap_servers)
        report["broker"] = args.broker
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
