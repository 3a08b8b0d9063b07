"""Workers per replica (issue 34): the W1 window pipeline through ``python -m service``
with 1 and with 2 worker processes, unshuffled and through the keyed shuffle.

``python -m benchmarks.workers [--events N] [--broker kafka|tansu | --bootstrap
HOST:PORT] [--repeat R] [--workers 1,2] [--join interval|window|temporal]``

``--join``: the orders and payments of ``benchmarks/e2e_join.py`` instead, W1 over both
topics with 1 worker as the reference rate, then the join (both inputs through the keyed
shuffle) with each worker count, every row checked; the issue-31 target is 0.5 of W1.

The standard workload (``benchmarks/workload.py``: JSON ``{"user","ts","amount"}``,
10k users, 4 partitions, up to 1.5 s out of order) is produced once keyed by user
(unshuffled: ``key.partitioned: true``) and once keyed by order id (every user on every
partition: the pipeline goes through the keyed shuffle, semantics.md section 8). Then,
round robin, each (input, workers) pair runs as a user runs it: the service process
started with ``SERVICE_WORKERS``, the spec POSTed (bounded, tumbling 60 s count + sum),
its whole-pipeline status polled until ``finished``, SIGTERM; every run's output is
checked against the expected windows. Reported per run:

- events/s from the process's start to ``finished`` and from the partitions'
  assignment to ``finished`` (steady);
- CPU seconds per 1M events of the service's whole process tree (the API process and
  its workers, from ``getrusage(RUSAGE_CHILDREN)``; the broker is not counted);
- each worker's RSS at the end (``process_resident_memory_bytes`` of ``/metrics``).

Every setting is the default but two, the same for every run: the members' status is
published every 500 ms (``finished`` is seen through the workers' reports; the default
2 s would add up to 2 s to a multi-worker run only), and a pipelines topic of its own
per run. Targets (issue 34): the shuffled pipeline with 2 workers at least 1.5x its rate
with 1, and at least the unshuffled pipeline's with 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from benchmarks.e2e import OPERATOR
from benchmarks.peers.measure import tree_rss
from benchmarks.peers.ours import call
from benchmarks.workload import (
    Workload,
    check_results,
    expected_results,
    kafka_records,
    keyed_by_order,
    normalise,
    produce,
    read_topic,
)
from service.runtime.kafka.embedded_broker import free_port

POLL_S = 0.05


@dataclass
class Run:
    kind: str
    """``unshuffled``, ``shuffled`` (W1), or a join's kind."""
    workers: int
    records: int = 0
    total_s: float = 0.0
    steady_s: float = 0.0
    cpu_s: float = 0.0
    rss_mb: tuple[float, ...] = ()
    """Each process's RSS at the end (the API process's first), from ``/metrics``."""
    peak_mb: float = 0.0
    """The service's process tree's RSS at its highest, sampled at every status poll
    (a shorter peak can be missed)."""
    check: str = ""
    ok: bool = False

    @property
    def label(self) -> str:
        return f"{self.kind}, {self.workers} worker(s)"


def _rss_by_worker(text: str) -> tuple[float, ...]:
    found = []
    for line in text.splitlines():
        if line.startswith("process_resident_memory_bytes{") and 'worker="' in line:
            found.append(float(line.rsplit(" ", 1)[1]) / 1e6)
        elif line.startswith("process_resident_memory_bytes ") and not found:
            own = float(line.rsplit(" ", 1)[1]) / 1e6
            found.append(own)
    return tuple(found)


def w1_spec(name: str, topic: str, workload: Workload, shuffled: bool) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [topic], "bounded": True, "start_from": "earliest"},
        "key": {"field": "user", **({} if shuffled else {"partitioned": True})},
        "timestamp": {"field": "ts"},
        "watermark": {"max_out_of_orderness_ms": workload.out_of_orderness_ms},
        "operator": OPERATOR,
        "sink": {"topic": f"{name}.out"},
    }


def check_w1(workload: Workload) -> Callable[[list[bytes]], tuple[bool, str]]:
    def check(values: list[bytes]) -> tuple[bool, str]:
        found = check_results(
            [normalise(json.loads(v)) for v in values], expected_results(workload)
        )
        return found.ok, found.summary()

    return check


@contextmanager
def running_service(
    bootstrap: str,
    workers: int,
    tag: str,
    root: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``python -m service`` with ``workers`` on a free port (from the source tree
    ``root``, this one by default), topics of its own named by ``tag``, ready; yields its
    base URL and process, SIGTERM at the end. Every setting the default but the members'
    status, published every 500 ms (``finished`` is seen through the workers' reports),
    and ``extra_env``'s."""
    port = free_port()
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
        **(extra_env or {}),
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
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


def run_service(
    bootstrap: str,
    workers: int,
    spec_of: Callable[[str], dict[str, Any]],
    check: Callable[[list[bytes]], tuple[bool, str]],
    run: Run,
) -> Run:
    """``spec_of(name)`` through ``python -m service`` with ``workers``, to ``finished``;
    its output checked by ``check``."""
    name = f"w{workers}-{run.kind.lower()}-{uuid.uuid4().hex[:6]}"
    spec = spec_of(name)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with running_service(bootstrap, workers, name) as (base, proc):
        code, answer = call(f"{base}/pipelines", spec)
        if code != 201:
            raise RuntimeError(f"POST /pipelines answered {code}: {answer}")
        assigned = None
        while True:
            _, status = call(f"{base}/pipelines/{name}/status")
            now = time.monotonic()
            run.peak_mb = max(run.peak_mb, tree_rss(proc.pid) / 2**20)
            if assigned is None and status.get("partitions"):
                assigned = now
            if status.get("state") == "finished":
                break
            if status.get("state") == "failed":
                raise RuntimeError(f"the pipeline failed: {status.get('reason')}")
            time.sleep(POLL_S)
        run.total_s = now - started
        run.steady_s = now - (assigned or started)
        run.records = int(status.get("records_in") or 0)
        with urllib.request.urlopen(f"{base}/metrics", timeout=30) as response:
            run.rss_mb = _rss_by_worker(response.read().decode())
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    run.cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    values = asyncio.run(read_topic(bootstrap, f"{name}.out"))
    try:
        run.ok, run.check = check(values)
    except AssertionError as exc:
        run.ok, run.check = False, str(exc)
    return run


def bench(args: argparse.Namespace, bootstrap: str) -> list[Run]:
    workload = Workload(events=args.events)
    records = kafka_records(workload)
    topics = {
        False: f"workers-user-{uuid.uuid4().hex[:6]}",
        True: f"workers-order-{uuid.uuid4().hex[:6]}",
    }
    asyncio.run(produce(records, bootstrap, topics[False], workload.partitions))
    by_order = keyed_by_order(records, workload.partitions)
    asyncio.run(produce(by_order, bootstrap, topics[True], workload.partitions))
    counts = [int(w) for w in args.workers.split(",")]
    runs: list[Run] = []
    for round_ in range(args.repeat):
        for shuffled in (False, True):
            for workers in counts:
                kind = "shuffled" if shuffled else "unshuffled"

                def spec_of(name: str, shuffled: bool = shuffled) -> dict[str, Any]:
                    return w1_spec(name, topics[shuffled], workload, shuffled)

                run = run_service(
                    bootstrap, workers, spec_of, check_w1(workload), Run(kind, workers)
                )
                print(f"round {round_ + 1}: {describe(run)}", file=sys.stderr, flush=True)
                runs.append(run)
    return runs


def bench_join(args: argparse.Namespace, bootstrap: str) -> list[Run]:
    """``--join KIND``: W1 over the orders and payments (unshuffled, 1 worker: the
    reference rate), then the join (both inputs through the shuffle) with each worker
    count; every join row checked against the generated pairs."""
    from benchmarks.e2e_join import OPERATORS, PARTITIONS, check, orders_and_payments

    workload = Workload(events=args.events)
    orders, payments, truth = orders_and_payments(workload)
    tag = uuid.uuid4().hex[:6]
    topics = {"orders": f"orders.{tag}", "payments": f"payments.{tag}"}
    asyncio.run(produce(orders, bootstrap, topics["orders"], PARTITIONS))
    asyncio.run(produce(payments, bootstrap, topics["payments"], PARTITIONS))
    total = len(orders) + len(payments)

    def w1(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "source": {"topics": list(topics.values()), "bounded": True},
            "key": {"field": "user", "partitioned": True},
            "timestamp": {"source": "kafka"},
            "watermark": {"max_out_of_orderness_ms": 2000},
            "operator": {**OPERATOR, "time": "event"},
            "sink": {"topic": f"{name}.out"},
        }

    def join(name: str) -> dict[str, Any]:
        def side(topic: str, ts: str) -> dict[str, Any]:
            return {
                "source": {"topics": [topic], "bounded": True},
                "key": {"field": "order"},
                "timestamp": {"field": ts},
                "watermark": {"max_out_of_orderness_ms": 2000},
            }

        return {
            "name": name,
            "inputs": {
                "orders": side(topics["orders"], "ts"),
                "payments": side(topics["payments"], "paid_at"),
            },
            "operator": {**OPERATORS[args.join], "left": "orders", "right": "payments"},
            "sink": {"topic": f"{name}.out"},
        }

    def check_join(values: list[bytes]) -> tuple[bool, str]:
        return True, check(args.join, [json.loads(v) for v in values], truth)

    def check_nothing(values: list[bytes]) -> tuple[bool, str]:
        return True, f"{len(values):,} windows (a rate reference, not checked)"

    runs: list[Run] = []
    for round_ in range(args.repeat):
        plan = [("W1", 1, w1, check_nothing)] + [
            (args.join, n, join, check_join) for n in (int(w) for w in args.workers.split(","))
        ]
        for kind, workers, spec_of, checker in plan:
            run = run_service(bootstrap, workers, spec_of, checker, Run(kind, workers))
            run.records = total  # every order and payment is read
            print(f"round {round_ + 1}: {describe(run)}", file=sys.stderr, flush=True)
            runs.append(run)
    return runs


def rate(run: Run, steady: bool = False) -> float:
    seconds = run.steady_s if steady else run.total_s
    return run.records / seconds if seconds else 0.0


def describe(run: Run) -> str:
    rss = ", ".join(f"{m:.0f}" for m in run.rss_mb)
    return (
        f"{run.label}: {rate(run) / 1000:.1f}k/s from start, {rate(run, True) / 1000:.1f}k/s "
        f"steady, {run.cpu_s / run.records * 1e6 if run.records else 0:.1f} CPU s per 1M, "
        f"RSS MB [{rss}], peak {run.peak_mb:,.0f} MB (the tree), "
        f"output {'exact' if run.ok else 'WRONG: ' + run.check}"
    )


def summary(runs: list[Run]) -> str:
    best: dict[tuple[str, int], Run] = {}
    for run in runs:
        key = (run.kind, run.workers)
        if key not in best or rate(run) > rate(best[key]):
            best[key] = run
    lines = ["best of the rounds (events/s from the process's start):"]
    lines += [describe(best[k]) for k in sorted(best)]
    reference = best.get(("W1", 1))
    if reference is not None:
        for (kind, workers), run in sorted(best.items()):
            if kind != "W1":
                lines.append(
                    f"{kind} join, {workers} worker(s) / W1 with 1: "
                    f"{rate(run) / rate(reference):.2f} (target 0.5)"
                )
    s1, s2 = best.get(("shuffled", 1)), best.get(("shuffled", 2))
    u1 = best.get(("unshuffled", 1))
    if s1 and s2:
        lines.append(f"shuffled, 2 workers / 1 worker: {rate(s2) / rate(s1):.2f}x (target 1.5x)")
    if s2 and u1:
        lines.append(
            f"shuffled with 2 workers / unshuffled with 1: {rate(s2) / rate(u1):.2f} (target 1.0)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=3_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--bootstrap", default=None, help="an existing broker (no --broker)")
    parser.add_argument("--broker", choices=("kafka", "tansu"), default="kafka")
    parser.add_argument(
        "--join",
        choices=("interval", "window", "temporal"),
        default=None,
        help="a join of orders and payments (benchmarks/e2e_join.py's) instead of W1's pairs",
    )
    args = parser.parse_args(argv)
    run_all = bench_join if args.join else bench
    if args.bootstrap:
        runs = run_all(args, args.bootstrap)
    else:
        from service.runtime.kafka.embedded_broker import EmbeddedBroker
        from tests.kafka.kafka_broker import KafkaBroker

        with EmbeddedBroker() if args.broker == "tansu" else KafkaBroker() as broker:
            runs = run_all(args, broker.bootstrap_servers)
    print(summary(runs))
    print(f"load average after: {os.getloadavg()}")
    return 0 if all(run.ok for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
