"""Latency, event to result: how long a result takes to become readable.

``python -m benchmarks.latency [--broker kafka|tansu | --bootstrap HOST:PORT]
[--pipeline window|stateless] [--shuffle] [--rates R,R,...] [--fractions F,F,...]
[--max-rate N] [--max-events N] [--seconds S] [--warmup S] [--watermark-interval-ms MS]
[--fetch-max-wait-ms MS] [--checkpoint-interval-ms MS] [--exactly-once] [--workers W]
[--engine clockwork,kstreams,flink,quix,bytewax] [--low-latency] [--check]``

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
  ``time.time()``. The first ``--warmup`` seconds of results are left out (default
  ``WARMUP_S``; a JVM peer needs longer: it starts cold and catches up on what arrived
  meanwhile), and so are windows closed in the producer's last ``COOLDOWN_MS``: in a
  stream that goes on, more records follow the one that closes a window, and an
  engine may wait for them (a batch to fill, a periodic timer, the minimum of every
  partition's watermark).

Reported per rate: p50, p99, p99.9 and the maximum, in milliseconds, and the number of
results. The rates are ``--rates`` (events/s) and ``--fractions`` of the maximum rate:
``--max-rate`` or, without it, the rate this pipeline reaches over input written
beforehand (``--max-events``, default ``MAX_EVENTS``), measured first in the same run:
for Clockwork a bounded pipeline, from the partitions' assignment to the broker's
append time of its last result (:func:`max_rate`).

Clockwork runs as users run it, ``python -m service`` with the spec POSTed; every
setting is the default unless an option says otherwise: ``--watermark-interval-ms 0``
recomputes the watermark after every batch instead of every 200 ms (the low-latency
setting, docs/performance.md); ``--fetch-max-wait-ms`` is the consumer's fetch wait
(``KAFKA_FETCH_MAX_WAIT_MS``); ``--exactly-once`` sets ``delivery: exactly_once``, so
results become readable at each checkpoint's commit, every
``--checkpoint-interval-ms`` (``SERVICE_CHECKPOINT_INTERVAL_MS``, default 5000).
Clockwork's producer has no linger to set: it sends what a loop turn appended at the
end of that turn (``linger_ms=0``).

**The peers** (``--engine``; both pipelines, keyed by user), on the same broker, input
and definition, each at the fractions of its own maximum (measured the same way, over
input written beforehand, ``PEER_MAX_EVENTS`` by default: :func:`peer_max_rate`):

- ``kstreams``: Kafka Streams, ``benchmarks/peers/kstreams/`` (``make kstreams``), the
  same windows (``TimeWindows.ofSizeAndGrace(1 s, 200 ms)``, ``suppress`` until the
  window closes), one stream thread;
- ``flink``: Flink SQL with Flink's Kafka connector, ``benchmarks/peers/flink_latency.py``
  (``make flink-kafka`` fetches the jar), parallelism 1;
- ``quix``: Quix Streams, ``benchmarks/peers/quix_latency.py`` in its venv of the
  peers' table (``benchmarks/peers/venvs.py``), ``tumbling_window(1 s, grace 200 ms)``
  ``.agg(...).final()``;
- ``bytewax``: Bytewax, ``benchmarks/peers/bytewax_latency.py`` in its venv,
  ``fold_window`` with an ``EventClock`` waiting 200 ms of system time, one worker.

``--check`` first runs every engine over one input written beforehand and compares
their results (:func:`check_agreement`).

``--low-latency`` gives every engine the setting its documentation advises for latency
(Clockwork: ``watermark.interval_ms`` 0; the peers: :func:`engine_settings`); without
it each runs with its defaults. docs/performance.md, "Latency, event to result", has
the settings, the documentation behind them and a run.
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
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from benchmarks.peers.ours import call
from benchmarks.workers import running_service
from benchmarks.workload import create_topic, read_topic

PARTITIONS = 4
USERS = 100
WINDOW_MS = 1_000
BOUND_MS = 200
TICK_S = 0.002
WARMUP_S = 3.0
COOLDOWN_MS = 500
POLL_S = 0.05
ENGINES = ("clockwork", "kstreams", "flink", "quix", "bytewax")
MAX_EVENTS = 2_000_000
"""Clockwork's maximum is timed over this many records by default: ~2 s at 1M/s."""
PEER_MAX_EVENTS = 300_000
"""The peers' maxima, over this many: 2-10 s at their 30k-170k events/s."""
CHECK_RATE = 5_000
CHECK_S = 4.0
"""``--check``: every engine reads the same input, this rate for this long."""
PEERS_DIR = Path(__file__).resolve().parent / "peers"
KSTREAMS_DIR = PEERS_DIR / "kstreams"
KSTREAMS_JAR = KSTREAMS_DIR / "target" / "kstreams-latency.jar"
KSTREAMS_CP = KSTREAMS_DIR / "target" / "classpath.txt"
CHECKPOINT_DEFAULT_MS = 5_000
"""The service's ``SERVICE_CHECKPOINT_INTERVAL_MS``: under exactly-once, results become
readable (``read_committed``) when their checkpoint's transaction commits."""
KSTREAMS_DEFAULT_COMMIT_MS = 30_000
"""Kafka Streams' commit.interval.ms without exactly-once: its record cache (on by
default) passes the windows' updates to suppress at a commit, so by default a result
can wait this long; the run waits as long for the last ones."""


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
    to_broker: list[float] = field(default_factory=list)
    """``--split``: each result's broker append time minus its window's close time (or
    its record's produce time): the engine's part, both broker hops included."""
    produced: int = 0
    produced_s: float = 0.0
    """From the first batch's produce time to the last's: the rate the producer reached
    is ``produced / produced_s``."""

    def achieved(self) -> int | None:
        return round(self.produced / self.produced_s) if self.produced_s else None

    def summary(self) -> dict[str, Any]:
        s = sorted(self.samples)
        if not s:
            return {
                "label": self.label,
                "rate": round(self.rate),
                "achieved_rate": self.achieved(),
                "results": 0,
            }

        return {
            "label": self.label,
            "rate": round(self.rate),
            "achieved_rate": self.achieved(),
            "results": len(s),
            "p50_ms": round(quantile(s, 0.50), 1),
            "p99_ms": round(quantile(s, 0.99), 1),
            "p999_ms": round(quantile(s, 0.999), 1),
            "max_ms": round(s[-1], 1),
            "mean_ms": round(statistics.fmean(s), 1),
            **self._split(),
        }

    def _split(self) -> dict[str, Any]:
        """``--split``: the same quantiles of the engine's part (to the broker's append
        of the result); the rest of each latency is the benchmark's consumer."""
        s = sorted(self.to_broker)
        if not s:
            return {}
        return {
            "to_broker_p50_ms": round(quantile(s, 0.50), 1),
            "to_broker_p99_ms": round(quantile(s, 0.99), 1),
            "to_broker_max_ms": round(s[-1], 1),
        }


def quantile(ordered: list[float], p: float) -> float:
    """The ``p`` quantile of ``ordered`` (sorted, not empty): the sample at ``p`` of its
    length, the last one at most."""
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


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
    if args.exactly_once:
        body["delivery"] = "exactly_once"
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


def service_env(args: argparse.Namespace) -> dict[str, str]:
    """The service's settings (environment) the options change from their defaults."""
    env: dict[str, str] = {}
    if args.fetch_max_wait_ms is not None:
        env["KAFKA_FETCH_MAX_WAIT_MS"] = str(args.fetch_max_wait_ms)
    if args.checkpoint_interval_ms is not None:
        env["SERVICE_CHECKPOINT_INTERVAL_MS"] = str(args.checkpoint_interval_ms)
    return env


@contextmanager
def service(
    bootstrap: str,
    args: argparse.Namespace,
    root: str | None = None,
    more_env: dict[str, str] | None = None,
) -> Iterator[str]:
    """``python -m service`` ready (:func:`benchmarks.workers.running_service`), with
    :func:`service_env`; yields its base URL."""
    env = {**service_env(args), **(more_env or {})}
    tag = uuid.uuid4().hex[:6]
    with running_service(bootstrap, args.workers, tag, root, env) as (base, _):
        yield base


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


# -- the peers: Kafka Streams and Flink SQL, each a process of its own --------------------
def peer_command(
    engine: str,
    bootstrap: str,
    topic_in: str,
    topic_out: str,
    args: argparse.Namespace,
    state_dir: str,
    expected: int | None = None,
) -> list[str]:
    mode = "low-latency" if args.low_latency else "default"
    more = [str(expected)] if expected is not None else []
    if engine == "kstreams":
        for built in (KSTREAMS_JAR, KSTREAMS_CP):
            if not built.exists():
                raise RuntimeError(f"no {built}: run `make kstreams`")
        classpath = f"{KSTREAMS_JAR}:{KSTREAMS_CP.read_text().strip()}"
        app_id = f"kstreams-{topic_in}-{uuid.uuid4().hex[:4]}"
        return [
            "java", "-cp", classpath, "dev.clockwork.bench.LatencyApp",
            bootstrap, topic_in, topic_out, app_id, state_dir, mode, args.pipeline, *more,
        ]  # fmt: skip
    if engine == "quix":
        return [
            str(peer_python("quix")), str(PEERS_DIR / "quix_latency.py"),
            bootstrap, topic_in, topic_out, mode, args.pipeline, state_dir, *more,
        ]  # fmt: skip
    if engine == "bytewax":
        return [
            str(peer_python("bytewax")), str(PEERS_DIR / "bytewax_latency.py"),
            bootstrap, topic_in, topic_out, mode, args.pipeline, *more,
        ]  # fmt: skip
    bounded = ["bounded"] if expected is not None else []
    return [
        sys.executable, "-m", "benchmarks.peers.flink_latency",
        bootstrap, topic_in, topic_out, mode, args.pipeline, *bounded,
    ]  # fmt: skip


def peer_python(name: str) -> Path:
    """The Python of the peer's venv (``benchmarks/peers/venvs.py``: made once, reused
    while its pins stay)."""
    from benchmarks.peers.harness import scratch_root
    from benchmarks.peers.venvs import BY_NAME, ensure_venv

    logs = scratch_root()
    logs.mkdir(parents=True, exist_ok=True)
    return ensure_venv(BY_NAME[name], logs)


def read_line(proc: subprocess.Popen[str], key: str) -> dict[str, Any]:
    """The first JSON line with ``key`` the peer prints (its other output is skipped)."""
    assert proc.stdout is not None
    while line := proc.stdout.readline():
        if line.startswith("{"):
            found: dict[str, Any] = json.loads(line)
            if key in found:
                return found
    raise RuntimeError(f"the peer exited with {proc.wait()} before printing {key}")


@contextmanager
def peer_process(
    engine: str,
    bootstrap: str,
    topic_in: str,
    topic_out: str,
    args: argparse.Namespace,
    expected: int | None = None,
) -> Iterator[subprocess.Popen[str]]:
    """The peer, in a session of its own (PyFlink's JVM is its child): all of it is
    stopped with SIGTERM at the end (SIGKILL after 30 s)."""
    asyncio.run(create_topic(bootstrap, topic_out, PARTITIONS))
    with TemporaryDirectory() as state_dir:
        command = peer_command(engine, bootstrap, topic_in, topic_out, args, state_dir, expected)
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, text=True, start_new_session=True,
            stderr=subprocess.DEVNULL if not args.peer_logs else None,
        )  # fmt: skip
        try:
            yield proc
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if proc.poll() is None:
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=30)
                    break
                except subprocess.TimeoutExpired:
                    continue


def peer_max_rate(engine: str, bootstrap: str, args: argparse.Namespace, events: int) -> float:
    """Events/s of the peer over input written beforehand. Kafka Streams: from its
    instance's RUNNING (or its first record, if earlier) to the aggregation of the last
    record. Flink: the job's net run time over a bounded source (``latest-offset``),
    which includes the job's deployment. Quix Streams and Bytewax: from the first
    record their code is handed to the last (they tell no earlier "running")."""
    topic = f"latency-max-{uuid.uuid4().hex[:6]}"
    asyncio.run(create_topic(bootstrap, topic, PARTITIONS))
    asyncio.run(produce_at_rate(bootstrap, topic, 0, 3600, True, limit=events))
    produced = asyncio.run(_count(bootstrap, topic))
    with peer_process(engine, bootstrap, topic, f"{topic}.out", args, produced) as proc:
        if engine == "kstreams":
            running = read_line(proc, "running_ms")["running_ms"]
            done = read_line(proc, "last_ms")
            return produced / ((done["last_ms"] - min(running, done["first_ms"])) / 1000)
        if engine in ("quix", "bytewax"):
            done = read_line(proc, "last_ms")
            return produced / ((done["last_ms"] - done["first_ms"]) / 1000)
        return produced / (read_line(proc, "net_ms")["net_ms"] / 1000)


def max_rate(
    bootstrap: str, args: argparse.Namespace, events: int, root: str | None = None
) -> float:
    """Events/s of this pipeline over input written beforehand (bounded): from the
    partitions' assignment (the status, published every 100 ms for this run and polled
    every 20 ms) to the broker's append time of the last result (the result topic is
    made with ``message.timestamp.type = LogAppendTime``): the end is exact, the start
    up to ~120 ms late."""
    topic = f"latency-max-{uuid.uuid4().hex[:6]}"
    asyncio.run(create_topic(bootstrap, topic, PARTITIONS))
    # as fast as the producer goes: the input exists before the pipeline starts
    asyncio.run(produce_at_rate(bootstrap, topic, 0, 3600, not args.shuffle, limit=events))
    produced = asyncio.run(_count(bootstrap, topic))
    name = f"lat-max-{uuid.uuid4().hex[:6]}"
    asyncio.run(create_log_append_topic(bootstrap, f"{name}.out"))
    fast = {"SERVICE_STATUS_PUBLISH_INTERVAL_MS": "100"}
    with service(bootstrap, args, root, fast) as base:
        submit(base, spec(name, topic, args, bounded=True))
        assigned = None
        while True:
            _, status = call(f"{base}/pipelines/{name}/status")
            now = time.time() * 1000
            if assigned is None and status.get("partitions"):
                assigned = now
            if status.get("state") == "finished":
                break
            if status.get("state") == "failed":
                raise RuntimeError(f"the pipeline failed: {status.get('reason')}")
            time.sleep(0.02)
    last = asyncio.run(last_append_ms(bootstrap, f"{name}.out"))
    return produced / ((last - (assigned or now)) / 1000)


async def create_log_append_topic(bootstrap: str, topic: str) -> None:
    """A result topic whose records carry the broker's append time as their timestamp."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        configs = {"message.timestamp.type": "LogAppendTime", "retention.ms": "-1"}
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1, topic_configs=configs)])
    finally:
        await admin.close()


async def last_append_ms(bootstrap: str, topic: str) -> float:
    """The newest record timestamp in ``topic`` (its last records per partition)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=20
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek(tp, max(0, ends[tp] - 1000))
        newest = 0
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                newest = max([newest, *(r.timestamp for r in records)])
        if not newest:
            raise RuntimeError(f"no result in {topic}")
        return float(newest)
    finally:
        await consumer.stop()


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
    bootstrap: str, topic: str, stop: asyncio.Event, out: list[tuple[float, bytes, int]]
) -> None:
    """Every result with the wall time (ms) its fetch returned and its record timestamp
    (with ``--split``, the broker's append time), until ``stop`` and idle."""
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
                out.extend((now, r.value, r.timestamp) for r in records if r.value is not None)
    finally:
        await consumer.stop()


@contextmanager
def running(
    engine: str,
    bootstrap: str,
    name: str,
    topic: str,
    args: argparse.Namespace,
    root: str | None,
) -> Iterator[str]:
    """The engine reading ``topic`` from its start; yields its result topic once the
    engine's consumer is assigned (Clockwork) or it says it is running (the peers)."""
    if engine == "clockwork":
        with service(bootstrap, args, root) as base:
            submit(base, spec(name, topic, args, bounded=False))
            wait_assigned(base, name)
            yield f"{name}.out"
        return
    with peer_process(engine, bootstrap, topic, f"{name}.out", args) as proc:
        read_line(proc, "running_ms")
        time.sleep(1)  # tasks deployed, partitions assigned: the warm-up covers the rest
        yield f"{name}.out"


def drain_s(engine: str, args: argparse.Namespace) -> float:
    """How long the consumer goes on after the producer's end: until the last windows
    could close and their results be out."""
    close = (WINDOW_MS + BOUND_MS) / 1000 + 1
    if engine == "kstreams" and not args.low_latency:
        return close + KSTREAMS_DEFAULT_COMMIT_MS / 1000
    if engine == "clockwork" and args.exactly_once:  # results are visible at a commit
        return close + (args.checkpoint_interval_ms or CHECKPOINT_DEFAULT_MS) / 1000
    return close


def run_rate(
    bootstrap: str,
    args: argparse.Namespace,
    rate: float,
    label: str,
    root: str | None = None,
    engine: str = "clockwork",
) -> Latencies:
    name = f"lat-{uuid.uuid4().hex[:6]}"
    topic = f"{name}.in"
    asyncio.run(create_topic(bootstrap, topic, PARTITIONS))
    if args.split:  # the results stamped with the broker's append time
        asyncio.run(create_log_append_topic(bootstrap, f"{name}.out"))
    found = Latencies(label, rate)
    with running(engine, bootstrap, name, topic, args, root) as out, TemporaryDirectory() as tmp:
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
        arrivals: list[tuple[float, bytes, int]] = []

        async def consume() -> None:
            stop = asyncio.Event()
            task = asyncio.ensure_future(consume_results(bootstrap, out, stop, arrivals))
            await asyncio.to_thread(producer.wait)
            await asyncio.sleep(drain_s(engine, args))
            stop.set()
            await task

        asyncio.run(consume())
        if producer.returncode != 0:
            raise RuntimeError(f"the producer exited with {producer.returncode}")
        stamps = array("q")
        with open(stamps_path, "rb") as f:
            stamps.frombytes(f.read())
    first, last = stamps[0], stamps[-1]
    found.produced = asyncio.run(_count(bootstrap, topic))
    found.produced_s = (last - first) / 1000
    warm = first + args.warmup * 1000
    received = [(arrived, raw) for arrived, raw, _ in arrivals]
    found.samples = latencies(received, stamps, args.pipeline, warm)
    if args.split:  # the same, to the broker's append time of each result
        appended = [(float(stamp), raw) for _, raw, stamp in arrivals]
        found.to_broker = latencies(appended, stamps, args.pipeline, warm)
    return found


def latencies(
    arrivals: list[tuple[float, bytes]], stamps: array[int], pipeline: str, warm: float
) -> list[float]:
    """Each result's latency (ms): its arrival minus, for a window, its close time (the
    produce time of the first batch at or past its end plus the bound), for a record
    its produce time. Left out: results of the warm-up (a window ending before ``warm``,
    a record produced before it), windows no produced record closes, and windows
    closed in the producer's last ``COOLDOWN_MS``."""
    last = stamps[-1]
    samples: list[float] = []
    for arrived, raw in arrivals:
        result = json.loads(raw)
        if pipeline == "window":
            end = result["window"]["end"]
            at = bisect.bisect_left(stamps, end + BOUND_MS)
            if at == len(stamps) or end < warm or stamps[at] > last - COOLDOWN_MS:
                continue  # closed by no produced record, in the warm-up or at the end
            samples.append(arrived - stamps[at])
        else:
            produced = result["value"]["ts"]
            if produced >= warm and produced <= last:
                samples.append(arrived - produced)
    return samples


# -- --check: the engines' results over one input agree ------------------------------------
def check_agreement(bootstrap: str, args: argparse.Namespace, engines: list[str]) -> dict[str, Any]:
    """Every engine over one input (``CHECK_RATE`` events/s for ``CHECK_S``, written
    beforehand), its results read back: the windows any engine must have closed (a
    record at or past their end plus the bound exists) by ``(key, start)`` with count
    and sum, or (stateless) every record kept. Each engine's are compared with the
    first engine's."""
    topic = f"latency-check-{uuid.uuid4().hex[:6]}"
    asyncio.run(create_topic(bootstrap, topic, PARTITIONS))
    stamps = asyncio.run(produce_at_rate(bootstrap, topic, CHECK_RATE, CHECK_S, True))
    produced = asyncio.run(_count(bootstrap, topic))
    found: dict[str, Any] = {}
    reference: dict[Any, Any] | None = None
    for engine in engines:
        out = f"{topic}-{engine}.out"
        if engine == "clockwork":
            name = f"{topic}-{engine}"  # its sink: {name}.out
            with service(bootstrap, args) as base:
                submit(base, spec(name, topic, args, bounded=True))
                while (state := call(f"{base}/pipelines/{name}/status")[1]).get(
                    "state"
                ) != "finished":
                    if state.get("state") == "failed":
                        raise RuntimeError(f"the pipeline failed: {state.get('reason')}")
                    time.sleep(POLL_S)
        else:
            with peer_process(engine, bootstrap, topic, out, args, produced) as proc:
                read_line(proc, "net_ms" if engine == "flink" else "last_ms")
                time.sleep(drain_s(engine, args))
        values = asyncio.run(read_topic(bootstrap, out, isolation_level="read_committed"))
        digest = result_digest(values, args.pipeline, stamps[-1])
        if reference is None:
            reference = digest
        found[engine] = {
            "results": len(digest) if args.pipeline == "window" else sum(digest.values()),
            "agrees": digest == reference,
        }
    return {"input": produced, "reference": engines[0], "engines": found}


def result_digest(values: list[bytes], pipeline: str, newest_ts: int) -> dict[Any, Any]:
    """Window results as ``{(key, start): (count, sum)}`` for the windows a record closes
    (their end plus the bound at most ``newest_ts``); stateless ones as a count per
    ``(key, ts, amount)``."""
    digest: dict[Any, Any] = {}
    for raw in values:
        row = json.loads(raw)
        if pipeline == "window":
            start, end = row["window"]["start"], row["window"]["end"]
            if end + BOUND_MS <= newest_ts:
                digest[(row["key"], start)] = (row["result"]["n"], row["result"]["total"])
        else:
            v = row["value"]
            record = (v["user"], v["ts"], v["amount"])
            digest[record] = digest.get(record, 0) + 1
    return digest


def engine_version(engine: str) -> str:
    from importlib.metadata import version

    if engine == "clockwork":
        return version("clockwork") if _installed("clockwork") else "this tree"
    if engine == "flink":
        jars = sorted((PEERS_DIR / "flink-kafka" / "jars").glob("*.jar"))
        return f"apache-flink {version('apache-flink')}, " + ", ".join(j.stem for j in jars)
    if engine in ("quix", "bytewax"):
        from benchmarks.peers.venvs import installed_version

        dist = "quixstreams" if engine == "quix" else "bytewax"
        return f"{dist} {installed_version(peer_python(engine), dist)}"
    for jar in KSTREAMS_CP.read_text().split(":") if KSTREAMS_CP.exists() else []:
        if "/kafka-streams-" in jar:
            return Path(jar).stem
    return "kafka-streams"


def _installed(dist: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(dist)
    except PackageNotFoundError:
        return False
    return True


def engine_settings(engine: str, args: argparse.Namespace) -> dict[str, Any]:
    """What the engine runs with beyond the pipeline: its defaults but these."""
    if engine == "clockwork":
        interval = args.watermark_interval_ms
        return {
            "watermark.interval_ms": 200 if interval is None else interval,
            "delivery": "exactly_once" if args.exactly_once else "at_least_once",
            **service_env(args),
        }
    if engine == "flink":
        from benchmarks.peers.flink_latency import settings

        conf, source, sink = settings(args.low_latency)
        return {"job": conf, "source": source, "sink": sink, "parallelism.default": 1}
    if engine == "quix":
        from benchmarks.peers import quix_latency

        producer, closing = quix_latency.settings(args.low_latency)
        return {"producer": producer, "final(closing_strategy)": closing}
    if engine == "bytewax":
        from benchmarks.peers import bytewax_latency

        batch_size, rdkafka = bytewax_latency.settings(args.low_latency)
        return {"KafkaSource.batch_size": batch_size, "producer": rdkafka, "workers": 1}
    return KSTREAMS_SETTINGS["low-latency" if args.low_latency else "default"]


KSTREAMS_SETTINGS: dict[str, dict[str, Any]] = {
    # LatencyApp.java sets these; num.stream.threads is Kafka Streams' default, 1
    "default": {},
    "low-latency": {
        "statestore.cache.max.bytes": 0,
        "commit.interval.ms": 10,
        "producer.linger.ms": 0,
    },
}


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
    parser.add_argument(
        "--max-events",
        type=int,
        default=None,
        help=f"records the maximum is timed over (default {MAX_EVENTS:,} for Clockwork, "
        f"{PEER_MAX_EVENTS:,} for a peer)",
    )
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--watermark-interval-ms", type=int, default=None)
    parser.add_argument(
        "--fetch-max-wait-ms",
        type=int,
        default=None,
        help="Clockwork: KAFKA_FETCH_MAX_WAIT_MS (default 20)",
    )
    parser.add_argument(
        "--checkpoint-interval-ms",
        type=int,
        default=None,
        help=f"Clockwork: SERVICE_CHECKPOINT_INTERVAL_MS (default {CHECKPOINT_DEFAULT_MS})",
    )
    parser.add_argument(
        "--exactly-once",
        action="store_true",
        help="Clockwork: delivery exactly_once (results readable at each checkpoint's "
        "commit; this consumer reads read_committed)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="first run every engine over one input written beforehand and compare "
        "their results (count and sum per user and window; the stateless records)",
    )
    parser.add_argument(
        "--split",
        action="store_true",
        help="result topics stamped with the broker's append time: also report the "
        "engine's part of each latency (to the broker's append), the rest being this "
        "benchmark's consumer",
    )
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--warmup", type=float, default=WARMUP_S, help="seconds left out")
    parser.add_argument(
        "--engine",
        default="clockwork",
        help=f"comma-separated, of {', '.join(ENGINES)}: each at the same fixed rates and "
        "at the fractions of its own maximum (--max-rate: the same one for all)",
    )
    parser.add_argument(
        "--low-latency",
        action="store_true",
        help="each engine's documented low-latency setting (Clockwork: watermark "
        "interval 0 unless --watermark-interval-ms says otherwise; the peers: "
        "ENGINE_SETTINGS)",
    )
    parser.add_argument("--peer-logs", action="store_true", help="the peers' stderr shown")
    parser.add_argument(
        "--service-root",
        action="append",
        default=None,
        help="run the service from this source tree (another version); given twice or "
        "more, the runs alternate between the trees, rate by rate",
    )
    args = parser.parse_args(argv)
    engines = [e for e in args.engine.split(",") if e]
    if unknown := set(engines) - set(ENGINES):
        parser.error(f"unknown engine(s): {', '.join(sorted(unknown))}")
    if set(engines) - {"clockwork"} and args.shuffle:
        parser.error("the peers read the input keyed by user (no --shuffle)")
    if args.low_latency and args.watermark_interval_ms is None:
        args.watermark_interval_ms = 0

    def bench_engine(bootstrap: str, engine: str) -> dict[str, Any]:
        fractions = [float(f) for f in args.fractions.split(",") if f]
        roots: list[str | None] = list(args.service_root or [None])
        if engine != "clockwork":
            roots = [None]
        top = args.max_rate
        if fractions and top is None:  # the first tree's: every tree runs the same rates
            if engine == "clockwork":
                top = max_rate(bootstrap, args, args.max_events or MAX_EVENTS, roots[0])
            else:
                events = args.max_events or PEER_MAX_EVENTS
                top = peer_max_rate(engine, bootstrap, args, events)
            print(f"{engine}: maximum {top:.0f} events/s", file=sys.stderr, flush=True)
        runs = [(float(r), f"{float(r):.0f}/s") for r in args.rates.split(",") if r]
        runs += [(f * (top or 0), f"{f:.0%} of max") for f in fractions]
        results = []
        for rate, label in runs:
            for root in roots:
                named = f"{label} ({root})" if root else label
                found = run_rate(bootstrap, args, rate, named, root, engine).summary()
                print(f"{engine}: {json.dumps(found)}", file=sys.stderr, flush=True)
                results.append(found)
        return {
            "engine": engine,
            "version": engine_version(engine),
            "settings": engine_settings(engine, args),
            "max_rate": round(top) if top else None,
            "runs": results,
        }

    def bench(bootstrap: str) -> dict[str, Any]:
        report: dict[str, Any] = {
            "pipeline": args.pipeline,
            "shuffle": args.shuffle,
            "low_latency": args.low_latency,
            "watermark_interval_ms": args.watermark_interval_ms,
            "workers": args.workers,
            "seconds": args.seconds,
        }
        if args.check:
            report["check"] = check_agreement(bootstrap, args, engines)
            print(f"check: {json.dumps(report['check'])}", file=sys.stderr, flush=True)
        report["engines"] = [bench_engine(bootstrap, engine) for engine in engines]
        return report

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
    print(table(report), file=sys.stderr)
    return 0


def table(report: dict[str, Any]) -> str:
    """The report as a Markdown table: one row per engine and rate."""
    setting = "low-latency" if report["low_latency"] else "default"
    lines = [
        "| engine | setting | rate | events/s (reached) | results | p50 ms | p99 ms | p99.9 ms"
        " | max ms |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for e in report["engines"]:
        for r in e["runs"]:
            cells = [r.get(k, "-") for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")]
            lines.append(
                f"| {e['engine']} | {setting} | {r['label']} | {r['rate']} ({r['achieved_rate']})"
                f" | {r['results']} | " + " | ".join(str(c) for c in cells) + " |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
