"""Our service in the peers' table, two ways.

- ``ours``: as a user runs it. ``python -m service`` is started as its own process
  against the harness's broker (``KAFKA_BOOTSTRAP_SERVERS``, and
  ``KAFKA_SESSION_TIMEOUT_MS=2000`` as docs/configuration.md tells a user of a Tansu they
  started; every other setting its default, the join-time prefetch included); a driver
  thread in the harness waits for ``/readyz``, POSTs the pipeline spec, polls the
  pipeline's status until it is ``finished`` (read to the end, every window fired and
  flushed), then stops the service with SIGTERM, as a user would.
- ``ours-inprocess``: ours_runner.py, the same pipeline on the runtime in a process of
  its own, no REST API, prefetch off, timed from the partitions' assignment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib.metadata import version
from pathlib import Path
from typing import Any

from benchmarks.peers.contenders import runner_args
from benchmarks.peers.harness import Contender, Launch, Paths, Prepared
from benchmarks.peers.venvs import HERE
from service.runtime.kafka.embedded_broker import free_port

NAME = "bench"
STARTUP_POLL_S = 0.02
"""Status polls until the partitions are assigned (the steady rate's clock starts)."""
RUN_POLL_S = 0.05
"""Status polls after that, until ``finished``: 20 requests/s, ~1% of the service's CPU."""


def spec(prep: Prepared, output_topic: str, partitioned: bool) -> dict[str, Any]:
    """The standard task as a pipeline spec, the operator as benchmarks/e2e.py has it."""
    from benchmarks.e2e import OPERATOR

    return {
        "name": NAME,
        "source": {
            "topics": ["bench-input"],
            "format": "json",
            "start_from": "earliest",
            "bounded": True,
        },
        "key": {"field": "user", **({"partitioned": True} if partitioned else {})},
        "timestamp": {"field": "ts", "format": "epoch_millis"},
        "watermark": {
            "strategy": "bounded_out_of_orderness",
            "max_out_of_orderness_ms": prep.workload.out_of_orderness_ms,
        },
        "operator": OPERATOR,
        "sink": {"topic": output_topic},
    }


def call(url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """GET ``url``, or POST ``body`` as JSON: the status and the JSON answer (an error's
    body as text). Plain urllib: the driver runs in a thread beside the service."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if data:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _drive(
    proc: subprocess.Popen[bytes], base: str, body: dict[str, Any], report_path: Path
) -> None:
    started = time.time()  # within a millisecond of the harness's start of the process
    marks: dict[str, float] = {}
    report: dict[str, Any] = {
        "tool": "Clockwork (python -m service, REST)",
        "version": version("clockwork"),
        "first_record": None,
        "finished": None,
        "records_in": 0,
        "notes": [],
    }
    try:
        while True:  # the API answers and the service is ready
            if proc.poll() is not None:
                raise RuntimeError(f"the service exited with {proc.returncode}")
            try:
                if call(f"{base}/readyz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(STARTUP_POLL_S)
        marks["ready"] = time.time()
        status, answer = call(f"{base}/pipelines", body)
        if status != 201:
            raise RuntimeError(f"POST /pipelines answered {status}: {answer}")
        marks["created"] = time.time()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the service exited with {proc.returncode}")
            _, st = call(f"{base}/pipelines/{NAME}/status")
            now = time.time()
            if report["first_record"] is None and isinstance(st, dict) and st.get("partitions"):
                report["first_record"] = marks["assigned"] = now
            if isinstance(st, dict) and st.get("state") == "finished":
                report["finished"] = marks["finished"] = now
                report["records_in"] = st.get("records_in", 0)
                break
            if isinstance(st, dict) and st.get("state") == "failed":
                raise RuntimeError(f"the pipeline failed: {st.get('reason')}")
            time.sleep(STARTUP_POLL_S if report["first_record"] is None else RUN_POLL_S)
    except Exception as exc:  # reported in the table: the run fails
        report["notes"].append(f"driver: {exc}")
        report["finished"] = None
    finally:
        # Where the start-up went: /readyz answers, POST answered (the spec stored and
        # applied on this replica), partitions assigned (the group joined), finished.
        report["notes"].append(
            "s after start: " + ", ".join(f"{k} {v - started:.2f}" for k, v in marks.items())
        )
        report_path.write_text(json.dumps(report))
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # graceful: checkpoint, commit, leave


def ours_rest_contender(partitioned: bool = True) -> Contender:
    """Our service as a user starts it; ``partitioned=False``: the spec leaves the key's
    ``partitioned`` out, so the pipeline runs through the keyed shuffle."""

    def command(prep: Prepared, paths: Paths) -> list[str]:
        return [sys.executable, "-m", "service"]

    def launch(prep: Prepared, paths: Paths) -> Launch:
        port = free_port()
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": paths.bootstrap,
            "KAFKA_SESSION_TIMEOUT_MS": "2000",
            "SERVICE_HTTP_HOST": "127.0.0.1",
            "SERVICE_HTTP_PORT": str(port),
        }
        body = spec(prep, "bench-output", partitioned)
        base = f"http://127.0.0.1:{port}"

        def driver(proc: subprocess.Popen[bytes]) -> None:
            _drive(proc, base, body, paths.report)

        return Launch(env, driver)

    how = "key.partitioned: true (no shuffle)" if partitioned else "keyed shuffle (the default)"
    return Contender(
        "ours" if partitioned else "ours-shuffle",
        "Clockwork, python -m service + REST" + ("" if partitioned else ", shuffled"),
        command,
        note=f"as a user runs it: the service process, the spec POSTed, status polled to "
        f"finished, then SIGTERM; {how}; every setting its default",
        timeout_s=300.0,
        launch=launch,
    )


def ours_contender() -> Contender | str:
    """The in-process contender, or why it cannot run."""
    try:
        import benchmarks.e2e  # noqa: F401
        import service.runtime.lifecycle.manager  # noqa: F401
    except ImportError as exc:
        return f"our service cannot run yet: {exc}"

    def command(prep: Prepared, paths: Paths) -> list[str]:
        return [sys.executable, str(HERE / "ours_runner.py"), *runner_args(prep, paths)]

    return Contender(
        "ours-inprocess",
        "Clockwork, runtime in process (no REST)",
        command,
        note="bounded pipeline (tumbling 60s count+sum, watermark every 200 ms, "
        "checkpoint every 5 s) on the runtime, as benchmarks/e2e.py builds it; "
        "prefetch off; steady clock from the partitions' assignment; 1 process",
        timeout_s=300.0,  # ~25 s at 40k/s on a loaded machine: a run this long has hung
    )
