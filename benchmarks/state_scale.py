"""State at scale (issue 53's benchmark): sessions by the million, and a large partition's
restore, on one Apache Kafka broker started from the project's jars.

``python -m benchmarks.state_scale [--parts sessions,restore] [--sessions N]
[--contenders memory,rocksdb,quix] [--restore-keys M] [--restore-operator
aggregate|session] [--restore-ways local,changelog]`` (``make bench-state-scale``).

**Sessions.** ``--sessions`` distinct session keys (default 10M), ``--per-key`` records
each (default 1), JSON ``{"user", "ts", "amount"}`` keyed by the session key (Kafka's
default partitioner) in a ``--partitions``-partition topic (default 4), produced once.
Event times rise from the first record to the last over 10 minutes, so with a gap of
30 minutes no session closes during the run (nothing is emitted: the state only grows).
Then, one after another, each contender consumes all of it, a session window (gap
30 min) counting and summing ``amount`` per key:

- ``memory`` and ``rocksdb``: Clockwork as a user runs it, ``python -m service`` with
  the spec POSTed (``key.partitioned``, an unbounded source, ``state.backend`` the
  contender's; ``state.cache_bytes`` 64 MiB per partition, one 64 MiB RocksDB block
  cache per process with the memtables charged to it: the defaults). Two settings are
  not the defaults: one worker (``--workers``; with one per CPU a rocksdb partition that
  moves between the workers at start-up fails to open while the other holds it, and is
  retried), and a group session timeout of :data:`SESSION_TIMEOUT_MS` (at millions of
  keys the service's loop is held longer than the default 10 s, and the group would move
  its partitions). The driver polls the status until the partitions'
  offsets reach the topic's end (every record read), reads a sample of keys' sessions
  through the pull query (``GET /pipelines/{name}/state/{key}``: one session each, its
  count and sum exact), then stops it with SIGTERM (a last checkpoint).
- ``quix``: Quix Streams (the peers' venv, ``benchmarks/peers/venvs.py``), its own
  session window, ``peers/quix_sessions.py``, RocksDB state with changelog topics, Quix's
  defaults. It stops itself after the last record; what it read is counted (its state is
  not read back).

Each is one process tree, measured as the peers are (``peers/measure.py``: peak RSS of
the tree sampled every 50 ms, CPU seconds). Reported: the peak RSS, the records/s from
the first record (the partitions assigned; Quix: its first record) to the last read, the
state directory's bytes once the process has exited, and the bytes of the topics it
created on the broker (its changelog). A run that did not read every record, or whose
sample was wrong, is reported as failed and no number of it counts.

**Restore.** One partition holding ``--restore-keys`` keys (default 5M, one record
each) of a running aggregate (count and sum, no window; ``--restore-operator session``:
the session window above) with ``state.backend: rocksdb``. The service reads it all, is
stopped with SIGTERM after a checkpoint that follows the last record, then is started
again, once per way:

- ``local``: on the same state directory (the store and its checkpoint file kept: the
  changelog's tail is replayed);
- ``changelog``: on a fresh, empty state directory (the whole changelog read back).

Each restart is timed from the process's start to the partition running (listed in the
status at the topic's end, with its restore observed in
``clockwork_restore_duration_seconds``), and reports from ``/metrics`` the restore's
source (``clockwork_partitions_restored_total``), the changelog records read and the
keys found locally (``clockwork_state_restored_total``) and the restore's own duration.
A third way, ``standby`` (a second replica keeping a warm copy with
``state.standby_replicas``), fits :data:`RESTORE_WAYS` once standbys exist: a way
names the state directory the restarted service gets, and would start the standby
replica beside the first run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks.peers.measure import run_measured
from benchmarks.peers.ours import call
from benchmarks.workload import DATA_DIR, KafkaRecord, create_topic, kafka_partition

BASE_TS = 1_700_000_000_000
GAP_MS = 30 * 60 * 1000
SPAN_MS = 10 * 60 * 1000
"""The event times of the whole input: less than the gap, so no session closes."""
OUT_OF_ORDERNESS_MS = 2000
SESSIONS_TOPIC = "scale-sessions"
RESTORE_TOPIC = "scale-restore"
AGGREGATIONS = {"count": {"fn": "count"}, "sum": {"fn": "sum", "field": "amount"}}
SESSION_OPERATOR = {
    "type": "window",
    "assigner": {"type": "session", "gap_ms": GAP_MS},
    "time": "event",
    "trigger": {"type": "event_time"},
    "aggregations": AGGREGATIONS,
}
RUNNING_OPERATOR = {"type": "aggregate", "aggregations": AGGREGATIONS, "emit_interval_ms": 1000}
CONTENDERS = ("memory", "rocksdb", "quix")
RESTORE_WAYS = ("local", "changelog")
"""How a restarted service finds its state (``standby`` joins these once it exists)."""
RESTORE_WORKERS = 1
"""The restore's service runs the pipeline in one process: with a worker per CPU, the
second worker's join moves the partition once more at start-up (restored twice)."""
SESSION_TIMEOUT_MS = 120_000
"""The service's ``KAFKA_SESSION_TIMEOUT_MS`` here (its default: 10 s)."""
FAILED_FOR_S = 120.0
"""A pipeline ``failed`` this long (its retries failing too) fails the run."""
POLL_S = 0.25
"""Status polls while a contender reads (a few requests/s: nothing to its CPU)."""
START_POLL_S = 0.02
"""Status polls while a restarted service restores (the time to running is measured)."""


# --- the workloads (pure) -------------------------------------------------------------


def session_key(i: int) -> str:
    return f"s{i}"


def amount(i: int, j: int) -> int:
    """The ``amount`` of key ``i``'s ``j``-th record."""
    return (i * 31 + j * 7) % 100 + 1


def expected_sum(i: int, per_key: int) -> int:
    return sum(amount(i, j) for j in range(per_key))


def event_time(i: int, j: int, keys: int, per_key: int) -> int:
    """Record ``(i, j)``'s event time: rising over the input, within :data:`SPAN_MS`."""
    return BASE_TS + (j * keys + i) * SPAN_MS // (keys * per_key)


def session_records(keys: int, per_key: int, partitions: int) -> Iterator[KafkaRecord]:
    """Every key's first record, then every key's second, ...: ``(partition, key,
    value, timestamp)``, the key's partition Kafka's default partitioner's."""
    parts: list[int] = []
    for j in range(per_key):
        for i in range(keys):
            key = session_key(i).encode()
            if j == 0:
                parts.append(kafka_partition(key, partitions))
            ts = event_time(i, j, keys, per_key)
            value = orjson.dumps({"user": session_key(i), "ts": ts, "amount": amount(i, j)})
            yield parts[i], key, value, ts


def restore_records(keys: int) -> Iterator[KafkaRecord]:
    """One record per key, all in partition 0."""
    for i in range(keys):
        key = f"r{i}"
        ts = event_time(i, 0, keys, 1)
        yield 0, key.encode(), orjson.dumps({"user": key, "ts": ts, "amount": amount(i, 0)}), ts


def sample_indices(keys: int, count: int) -> list[int]:
    """``count`` keys spread over the whole range, the first and the last included."""
    if keys <= 0 or count <= 0:
        return []
    if count == 1:
        return [keys - 1]
    return sorted({k * (keys - 1) // (count - 1) for k in range(count)})


def session_problem(answer: Any, per_key: int, total: int) -> str | None:
    """What is wrong with a pull query's answer for a key that holds one open session
    of ``per_key`` records summing to ``total`` (None: nothing)."""
    if not isinstance(answer, dict) or not answer.get("found"):
        return f"not found: {answer!r}"[:300]
    windows = (answer.get("state") or {}).get("windows") or []
    if len(windows) != 1:
        return f"{len(windows)} sessions, not 1: {windows!r}"[:300]
    window = windows[0]
    result = window.get("result") or {}
    if result.get("count") != per_key or result.get("sum") != total or window.get("fires"):
        return f"expected count {per_key}, sum {total}, not fired: {window!r}"[:300]
    return None


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` (Prometheus text) whose labels include
    ``labels`` (every worker's, where the service merges them with a ``worker`` label)."""
    total = 0.0
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match.group(1) != name:
            continue
        found = dict(_LABEL.findall(match.group(3) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(4))
    return total


def dir_bytes(path: Path) -> int:
    """The bytes the files under ``path`` take on disk (0 if it does not exist): their
    blocks, as ``du`` counts, not their sizes (Kafka's index files are preallocated
    sparse files of 10 MiB)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def gb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e9:.2f} GB"


# --- the broker and the producer -------------------------------------------------------


async def produce_stream(
    bootstrap: str, topic: str, partitions: int, records: Iterable[KafkaRecord]
) -> int:
    """Create ``topic`` and produce ``records`` as they come (the peers' batches by hand:
    ``benchmarks.workload.produce``, without holding the records in a list)."""
    from aiokafka import AIOKafkaProducer

    await create_topic(bootstrap, topic, partitions)
    batch_bytes = 1 << 20
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        max_batch_size=batch_bytes,
        max_request_size=batch_bytes * 2,
        acks=1,
        linger_ms=5,
    )
    await producer.start()
    pending: list[asyncio.Future[Any]] = []
    count = 0
    try:
        batches = [producer.create_batch() for _ in range(partitions)]
        for p, key, value, ts in records:
            count += 1
            if batches[p].append(key=key, value=value, timestamp=ts) is None:
                pending.append(await producer.send_batch(batches[p], topic, partition=p))
                batches[p] = producer.create_batch()
                batches[p].append(key=key, value=value, timestamp=ts)
                if len(pending) > 256:  # bound what waits for its answer
                    await asyncio.gather(*pending)
                    pending.clear()
        for p in range(partitions):
            if batches[p].record_count():
                pending.append(await producer.send_batch(batches[p], topic, partition=p))
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return count


def topic_dirs(data_dir: Path) -> set[str]:
    try:
        return {e.name for e in os.scandir(data_dir) if e.is_dir()}
    except OSError:
        return set()


def new_topics_bytes(data_dir: Path, before: set[str]) -> int:
    """The bytes of the topic partitions created since ``before`` (the consumer offsets'
    and the service's own metadata topics left out)."""
    new = topic_dirs(data_dir) - before
    return sum(
        dir_bytes(data_dir / name)
        for name in new
        if not name.startswith(("__", "clockwork.pipelines", "clockwork.members"))
    )


# --- Clockwork as a service ------------------------------------------------------------


@dataclass(slots=True)
class Run:
    """One measured process: the driver's marks and checks, and the measure's figures."""

    contender: str
    ok: bool = False
    detail: str = ""
    records: int = 0
    first_s: float | None = None
    """Seconds from the process's start to its first record (partitions assigned)."""
    done_s: float | None = None
    """Seconds from the process's start to the last record read (or: to running)."""
    peak_rss: int | None = None
    cpu_s: float | None = None
    wall_s: float | None = None
    state_bytes: int | None = None
    topics_bytes: int | None = None
    load: str = ""
    started_epoch: float = 0.0
    """``time.time()`` when the process was started."""
    failed_since: float | None = None
    """Since when the status has said ``failed`` (None: it does not)."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float | None:
        if not self.ok or not self.records or self.first_s is None or self.done_s is None:
            return None
        return self.records / max(self.done_s - self.first_s, 1e-9)


def load_average() -> str:
    with open("/proc/loadavg") as fh:
        return fh.read().split()[0]


def service_env(
    bootstrap: str, port: int, state_dir: Path, store: str, workers: int | None = None
) -> dict[str, str]:
    """The service's environment; ``workers`` None: its default (one per CPU)."""
    return {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        # Longer than the loop is held at these key counts (a checkpoint of a million
        # dirty keys): with the default 10 s the group expires the member while it
        # works, and moves its partitions (restored, again and again).
        "KAFKA_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
        "SERVICE_HTTP_HOST": "127.0.0.1",
        "SERVICE_HTTP_PORT": str(port),
        "SERVICE_STATE_DIR": str(state_dir),
        # Each run's own pipeline store: a later run does not start an earlier one's
        # pipeline; a restart on the same one resumes its pipeline.
        "SERVICE_PIPELINES_TOPIC": f"clockwork.pipelines.{store}",
        "SERVICE_MEMBERS_TOPIC": f"clockwork.members.{store}",
        **({"SERVICE_WORKERS": str(workers)} if workers else {}),
    }


def pipeline_spec(
    name: str, topic: str, operator: dict[str, Any], backend: str, out: str
) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [topic], "format": "json", "start_from": "earliest"},
        "key": {"field": "user", "partitioned": True},
        "timestamp": {"field": "ts", "format": "epoch_millis"},
        "watermark": {
            "strategy": "bounded_out_of_orderness",
            "max_out_of_orderness_ms": OUT_OF_ORDERNESS_MS,
        },
        "operator": operator,
        "sink": {"topic": out},
        "state": {"backend": backend},
    }


def wait_ready(proc: subprocess.Popen[bytes], base: str) -> None:
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited with {proc.returncode}")
        try:
            if call(f"{base}/readyz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(START_POLL_S)


def keyed_partitions(base: str, name: str, run: Run) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The status's keyed partitions of ``name``, and the status. A ``failed`` state is
    noted in ``run`` (the service retries a failed pipeline after its backoff); one that
    lasts :data:`FAILED_FOR_S` fails the run."""
    asked = time.perf_counter()
    try:
        _status, st = call(f"{base}/pipelines/{name}/status")
    except OSError:  # no answer within the client's 30 s: the service's loop is held
        st = None
    took = time.perf_counter() - asked
    run.extra["slowest status answer s"] = round(
        max(took, run.extra.get("slowest status answer s", 0.0)), 1
    )
    if not isinstance(st, dict):
        return [], {}
    if st.get("state") == "failed":
        now = time.time()
        reason = str(st.get("reason"))[:400]
        failures: list[str] = run.extra.setdefault("failures seen", [])
        if reason not in failures:
            failures.append(reason)
        if run.failed_since is None:
            run.failed_since = now
        elif now - run.failed_since > FAILED_FOR_S:
            raise RuntimeError(f"the pipeline failed for {FAILED_FOR_S:.0f} s: {reason}")
        return [], st
    run.failed_since = None
    return [p for p in st.get("partitions") or () if p.get("stage", "keyed") == "keyed"], st


def read_offsets(parts: list[dict[str, Any]]) -> int:
    return sum(int(p.get("offset") or 0) for p in parts)


def state_query(base: str, name: str, key: str) -> Any:
    """A key's pull query, retried while it is a 503 (a partition moving)."""
    url = f"{base}/pipelines/{name}/state/{urllib.parse.quote(key, safe='')}"
    answer: Any = None
    for _ in range(100):
        try:
            status, answer = call(url)
        except OSError as exc:  # no answer in time: asked again
            answer = f"no answer: {exc}"
            continue
        if status != 503:
            return answer
        time.sleep(0.1)
    return answer


def run_service(
    run: Run,
    workdir: Path,
    env: dict[str, str],
    base: str,
    drive: Callable[[subprocess.Popen[bytes]], None],
    timeout_s: float,
) -> None:
    """``python -m service`` measured, ``drive`` talking to it in a thread; it stops it."""

    def driver(proc: subprocess.Popen[bytes]) -> None:
        try:
            wait_ready(proc, base)
            drive(proc)
        except Exception as exc:  # the run fails, with the reason
            run.ok = False
            run.detail = f"driver: {exc}"
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    measured = run_measured(
        [sys.executable, "-m", "service"], workdir / "run.log", timeout_s, env, driver
    )
    run.peak_rss, run.cpu_s, run.wall_s = measured.peak_rss_bytes, measured.cpu_s, measured.wall_s
    if measured.timed_out or measured.returncode not in (0, -signal.SIGTERM):
        run.ok = False
        why = "timed out" if measured.timed_out else f"exit code {measured.returncode}"
        run.detail = f"{run.detail}; {why}; ...{measured.log_tail[-400:]}"
    run.started_epoch = measured.started_epoch


# --- part 1: sessions ------------------------------------------------------------------


def settings(workers: int) -> tuple[str, ...]:
    """What each contender runs with, printed with its numbers."""
    how = f"{workers} worker(s)" if workers else "a worker per CPU (the default)"
    return (
        f"Clockwork: python -m service, {how}, checkpoints every 5 s (the default), "
        f"KAFKA_SESSION_TIMEOUT_MS {SESSION_TIMEOUT_MS}; rocksdb: "
        "state.cache_bytes 64 MiB per "
        "partition (the default), one 64 MiB RocksDB block cache per process with the "
        "memtables charged to it (write buffer manager 32 MiB; 2 x 4 MiB per store)",
        "Quix Streams: RocksDBOptions' defaults (a 1 GiB block cache per process, "
        "memtables 3 x 64 MiB per store, lz4), changelog topics on, commit every 5 s",
    )


@dataclass(frozen=True, slots=True)
class SessionsRun:
    bootstrap: str
    data_dir: Path
    keys: int
    per_key: int
    partitions: int
    samples: int
    timeout_s: float
    workers: int

    @property
    def records(self) -> int:
        return self.keys * self.per_key


def clockwork_sessions(cfg: SessionsRun, backend: str, workdir: Path) -> Run:
    from service.runtime.kafka.embedded_broker import free_port

    run = Run(backend, records=cfg.records)
    name = f"scale-{backend}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    state_dir = workdir / "state"
    env = service_env(cfg.bootstrap, port, state_dir, name, cfg.workers or None)
    spec = pipeline_spec(name, SESSIONS_TOPIC, SESSION_OPERATOR, backend, f"{name}-out")
    marks: dict[str, float] = {}

    def drive(proc: subprocess.Popen[bytes]) -> None:
        status, answer = call(f"{base}/pipelines", spec)
        if status != 201:
            raise RuntimeError(f"POST /pipelines answered {status}: {answer}")
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the service exited with {proc.returncode}")
            parts, _ = keyed_partitions(base, name, run)
            now = time.time()
            if parts and "first" not in marks:
                marks["first"] = now
            if len(parts) == cfg.partitions and read_offsets(parts) >= cfg.records:
                marks["done"] = now
                break
            time.sleep(START_POLL_S if "first" not in marks else POLL_S)
        problems = []
        for i in sample_indices(cfg.keys, cfg.samples):
            answer = state_query(base, name, session_key(i))
            problem = session_problem(answer, cfg.per_key, expected_sum(i, cfg.per_key))
            if problem:
                problems.append(f"{session_key(i)}: {problem}")
        run.extra["sampled"] = len(sample_indices(cfg.keys, cfg.samples))
        if problems:
            raise RuntimeError(f"{len(problems)} wrong sessions: {problems[:3]}")
        run.ok = True
        run.detail = f"read {cfg.records} records; {run.extra['sampled']} sampled sessions exact"
        run.load = load_average()

    before = topic_dirs(cfg.data_dir)
    run_service(run, workdir, env, base, drive, cfg.timeout_s)
    started = run.started_epoch
    if "first" in marks:
        run.first_s = marks["first"] - started
    if "done" in marks:
        run.done_s = marks["done"] - started
    run.state_bytes = dir_bytes(state_dir)
    run.topics_bytes = new_topics_bytes(cfg.data_dir, before)
    shutil.rmtree(state_dir, ignore_errors=True)
    return run


def quix_sessions(cfg: SessionsRun, workdir: Path) -> Run:
    from benchmarks.peers.harness import scratch_root
    from benchmarks.peers.venvs import BY_NAME, HERE, ensure_venv

    run = Run("quix", records=cfg.records)
    logs = scratch_root()
    logs.mkdir(parents=True, exist_ok=True)
    python = ensure_venv(BY_NAME["quix"], logs)
    out = "scale-quix-out"
    asyncio.run(create_topic(cfg.bootstrap, out, cfg.partitions))
    state_dir, report = workdir / "state", workdir / "report.json"
    command = [str(python), str(HERE / "quix_sessions.py"), "--bootstrap", cfg.bootstrap]
    command += ["--input-topic", SESSIONS_TOPIC, "--output-topic", out, "--group", "scale-quix"]
    command += ["--records", str(cfg.records), "--state-dir", str(state_dir)]
    command += ["--report", str(report)]
    before = topic_dirs(cfg.data_dir)
    measured = run_measured(command, workdir / "run.log", cfg.timeout_s)
    run.load = load_average()
    run.peak_rss, run.cpu_s, run.wall_s = measured.peak_rss_bytes, measured.cpu_s, measured.wall_s
    done = json.loads(report.read_text()) if report.exists() else {}
    run.extra["version"] = done.get("version")
    if done.get("first_record") and done.get("finished"):
        run.first_s = done["first_record"] - measured.started_epoch
        run.done_s = done["finished"] - measured.started_epoch
    if measured.returncode == 0 and done.get("records_in") == cfg.records:
        run.ok = True
        run.detail = f"read {cfg.records} records (its state not read back)"
    else:
        why = "timed out" if measured.timed_out else f"exit code {measured.returncode}"
        run.detail = (
            f"read {done.get('records_in')} of {cfg.records}; {why}; ...{measured.log_tail[-400:]}"
        )
    run.state_bytes = dir_bytes(state_dir)
    run.topics_bytes = new_topics_bytes(cfg.data_dir, before) - dir_bytes_of_topic(
        cfg.data_dir, out
    )
    shutil.rmtree(state_dir, ignore_errors=True)
    return run


def dir_bytes_of_topic(data_dir: Path, topic: str) -> int:
    """The bytes of ``topic``'s partitions (the output topic we made for Quix)."""
    pattern = re.compile(re.escape(topic) + r"-\d+$")
    return sum(dir_bytes(data_dir / n) for n in topic_dirs(data_dir) if pattern.match(n))


def print_run(run: Run) -> None:
    rate = run.rate
    first = f"{run.first_s:.1f}" if run.first_s is not None else "-"
    done = f"{run.done_s:.1f}" if run.done_s is not None else "-"
    cpu = f"{run.cpu_s:.0f}" if run.cpu_s is not None else "-"
    print(
        f"{run.contender}: {'ok' if run.ok else 'FAILED'}; peak RSS {gb(run.peak_rss)}; "
        f"{f'{rate:,.0f} records/s' if rate else '- records/s'} (first record {first} s, "
        f"last {done} s after start); CPU {cpu} s; state dir {gb(run.state_bytes)}; "
        f"its topics on the broker {gb(run.topics_bytes)}; load {run.load}; {run.detail}"
        + "".join(f"; {k} {v}" for k, v in run.extra.items()),
        flush=True,
    )


def sessions_part(args: argparse.Namespace, root: Path) -> list[Run]:
    from tests.kafka.kafka_broker import KafkaBroker

    runs: list[Run] = []
    with KafkaBroker(log_path=str(root / "broker-sessions.log")) as broker:
        assert broker._dir is not None
        cfg = SessionsRun(
            broker.bootstrap_servers,
            broker._dir / "data",
            args.sessions,
            args.per_key,
            args.partitions,
            args.samples,
            args.timeout_s,
            args.workers,
        )
        started = time.perf_counter()
        records = session_records(cfg.keys, cfg.per_key, cfg.partitions)
        n = asyncio.run(produce_stream(cfg.bootstrap, SESSIONS_TOPIC, cfg.partitions, records))
        print(
            f"sessions: {n:,} records ({cfg.keys:,} keys x {cfg.per_key}) in "
            f"{cfg.partitions} partitions produced in {time.perf_counter() - started:.0f} s; "
            f"input on the broker {gb(dir_bytes(cfg.data_dir))}",
            flush=True,
        )
        for line in settings(args.workers):
            print(f"  {line}", flush=True)
        for contender in args.contenders.split(","):
            workdir = root / f"sessions-{contender}"
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir(parents=True)
            print(f"  {contender} ... (load {load_average()})", flush=True)
            if contender == "quix":
                run = quix_sessions(cfg, workdir)
            else:
                run = clockwork_sessions(cfg, contender, workdir)
            print_run(run)
            runs.append(run)
    return runs


# --- part 2: restore -------------------------------------------------------------------


def restore_part(args: argparse.Namespace, root: Path) -> list[Run]:
    from service.runtime.kafka.embedded_broker import free_port
    from tests.kafka.kafka_broker import KafkaBroker

    keys = args.restore_keys
    operator = RUNNING_OPERATOR if args.restore_operator == "aggregate" else SESSION_OPERATOR
    name = f"restore-{args.restore_operator}"
    runs: list[Run] = []
    with KafkaBroker(log_path=str(root / "broker-restore.log")) as broker:
        bootstrap = broker.bootstrap_servers
        started = time.perf_counter()
        n = asyncio.run(produce_stream(bootstrap, RESTORE_TOPIC, 1, restore_records(keys)))
        print(
            f"restore: {n:,} keys of a {args.restore_operator} in one partition produced in "
            f"{time.perf_counter() - started:.0f} s",
            flush=True,
        )
        workdir = root / f"restore-{args.restore_operator}"
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        state_dir = workdir / "state"
        spec = pipeline_spec(name, RESTORE_TOPIC, operator, "rocksdb", f"{name}-out")

        # The first run: everything read, a checkpoint after the last record, SIGTERM.
        load = Run(f"{args.restore_operator}: first run", records=keys)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        marks: dict[str, float] = {}

        def first(proc: subprocess.Popen[bytes]) -> None:
            status, answer = call(f"{base}/pipelines", spec)
            if status != 201:
                raise RuntimeError(f"POST /pipelines answered {status}: {answer}")
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"the service exited with {proc.returncode}")
                parts, _ = keyed_partitions(base, name, load)
                now = time.time()
                if parts and "first" not in marks:
                    marks["first"] = now
                if parts and read_offsets(parts) >= keys:
                    if "done" not in marks:
                        marks["done"] = now
                    checkpoint = parts[0].get("last_checkpoint_ms") or 0
                    if checkpoint / 1000 > marks["done"]:
                        break
                time.sleep(POLL_S)
            load.ok = True
            load.detail = f"read {keys} records; checkpointed after the last; SIGTERM"
            load.load = load_average()

        env = service_env(bootstrap, port, state_dir, name, RESTORE_WORKERS)
        (workdir / "first").mkdir()
        run_service(load, workdir / "first", env, base, first, args.timeout_s)
        if "first" in marks:
            load.first_s = marks["first"] - load.started_epoch
        if "done" in marks:
            load.done_s = marks["done"] - load.started_epoch
        load.state_bytes = dir_bytes(state_dir)
        print_run(load)
        runs.append(load)
        if not load.ok:
            return runs

        for way in args.restore_ways.split(","):
            if way == "changelog":
                state_dir = workdir / "state-fresh"
                shutil.rmtree(state_dir, ignore_errors=True)
            run = restart(way, bootstrap, state_dir, name, keys, workdir / way, args.timeout_s)
            print_run(run)
            runs.append(run)
    return runs


def restart(
    way: str, bootstrap: str, state_dir: Path, name: str, keys: int, workdir: Path, timeout: float
) -> Run:
    """The service started again on ``state_dir``: the time to the partition running,
    and the restore's figures from ``/metrics``."""
    from service.runtime.kafka.embedded_broker import free_port

    workdir.mkdir(parents=True)
    run = Run(f"restart, {way}")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    marks: dict[str, float] = {}

    def drive(proc: subprocess.Popen[bytes]) -> None:
        label = {"pipeline": name}
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the service exited with {proc.returncode}")
            parts, st = keyed_partitions(base, name, run)
            if parts and read_offsets(parts) >= keys and st.get("state") == "running":
                _, text = call_text(f"{base}/metrics")
                if metric_sum(text, "clockwork_restore_duration_seconds_count", **label) >= 1:
                    marks["running"] = time.time()
                    break
            time.sleep(START_POLL_S)
        _, text = call_text(f"{base}/metrics")
        for source in ("local", "changelog", "memory"):
            partitions = metric_sum(
                text, "clockwork_partitions_restored_total", source=source, **label
            )
            if partitions:
                run.extra[f"partitions restored from {source}"] = int(partitions)
        for source in ("local", "changelog"):
            count = metric_sum(text, "clockwork_state_restored_total", source=source, **label)
            what = "keys found locally" if source == "local" else "changelog records read"
            run.extra[what] = int(count)
        seconds = metric_sum(text, "clockwork_restore_duration_seconds_sum", **label)
        run.extra["restore_duration_seconds"] = round(seconds, 2)
        parts, _ = keyed_partitions(base, name, run)
        run.extra["keys in the status"] = sum(int(p.get("keys") or 0) for p in parts)
        run.ok = True
        run.detail = "running at the topic's end"
        run.load = load_average()

    env = service_env(bootstrap, port, state_dir, name, RESTORE_WORKERS)
    run_service(run, workdir, env, base, drive, timeout)
    if "running" in marks:
        run.first_s = 0.0
        run.done_s = marks["running"] - run.started_epoch
        run.extra["s from start to running"] = round(run.done_s, 2)
    run.state_bytes = dir_bytes(state_dir)
    steps = restore_steps(workdir / "run.log")
    if steps:
        run.extra["restore steps"] = steps
    return run


def restore_steps(log: Path) -> str | None:
    """The last restore's steps as the service logged them (``restored in ... s (...)``)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    found = re.findall(r"restored in ([0-9.]+ s \([^)]*\))", text)
    return found[-1] if found else None


def call_text(url: str) -> tuple[int, str]:
    import urllib.request

    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.status, resp.read().decode()


# --- main ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--parts", default="sessions,restore")
    parser.add_argument("--sessions", type=int, default=10_000_000, help="session keys")
    parser.add_argument("--per-key", type=int, default=1, help="records per session key")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--samples", type=int, default=20, help="keys read back per run")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="the sessions' SERVICE_WORKERS (0: the service's default, one per CPU; with "
        "two, a rocksdb partition moved between workers at start-up fails to open while "
        "the other still holds it, and is retried)",
    )
    parser.add_argument("--restore-keys", type=int, default=5_000_000)
    parser.add_argument("--restore-operator", choices=("aggregate", "session"), default="aggregate")
    parser.add_argument("--restore-ways", default=",".join(RESTORE_WAYS))
    parser.add_argument("--timeout-s", type=float, default=3 * 3600.0)
    parser.add_argument("--workdir", type=Path, default=DATA_DIR / "state-scale")
    args = parser.parse_args(argv)
    for contender in args.contenders.split(","):
        if contender not in CONTENDERS:
            parser.error(f"unknown contender {contender!r}: {', '.join(CONTENDERS)}")
    for way in args.restore_ways.split(","):
        if way not in RESTORE_WAYS:
            parser.error(f"unknown restore way {way!r}: {', '.join(RESTORE_WAYS)}")
    root = args.workdir
    root.mkdir(parents=True, exist_ok=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load {load_average()}", flush=True)
    if "sessions" in args.parts.split(","):
        sessions_part(args, root)
    if "restore" in args.parts.split(","):
        restore_part(args, root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
