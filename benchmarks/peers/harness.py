"""Run one contender on the standard workload, measure it, and check its output.

Every Kafka run gets a fresh broker (the embedded Tansu, or with ``broker="kafka"`` an
Apache Kafka broker, ``tests/kafka/kafka_broker.py``): the input is produced, the output topic
created, the contender started as its own process, and after it exits its output is
read back to the high watermark and compared with the expected windows. A run whose
output does not match is kept, marked unchecked, and no rate is claimed from it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import signal
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from benchmarks.peers.measure import run_measured
from benchmarks.workload import (
    DATA_DIR,
    Expected,
    KafkaRecord,
    ResultRow,
    Workload,
    check_results,
    create_topic,
    expected_results,
    kafka_records,
    normalise,
    produce,
    read_result_file,
    read_topic,
    write_jsonl,
)
from service.runtime.kafka.embedded_broker import EmbeddedBroker

logger = logging.getLogger(__name__)

INPUT_TOPIC = "bench-input"
OUTPUT_TOPIC = "bench-output"


@dataclass(slots=True)
class Prepared:
    """The workload made once per harness run and reused by every contender and run."""

    workload: Workload
    records: list[KafkaRecord]
    expected: Expected
    jsonl: Path

    @classmethod
    def make(cls, workload: Workload) -> Prepared:
        records = kafka_records(workload)
        return cls(workload, records, expected_results(workload), write_jsonl(workload))


@dataclass(frozen=True, slots=True)
class Paths:
    bootstrap: str
    workdir: Path
    report: Path
    output_dir: Path


Driver = Callable[["subprocess.Popen[bytes]"], None]
"""Runs in a thread beside a contender that does not stop by itself (a service): talks to
it, writes the report, and stops it."""


@dataclass(frozen=True, slots=True)
class Launch:
    """How a service contender is started: its environment and its driver."""

    env: dict[str, str]
    driver: Driver


@dataclass(frozen=True, slots=True)
class Contender:
    key: str
    tool: str
    command: Callable[[Prepared, Paths], list[str]]
    reads: str = "kafka"
    """``kafka`` or ``file``."""
    output: str = "kafka"
    """Where results go: ``kafka`` (the output topic), ``file`` (a directory), ``none``."""
    note: str = ""
    timeout_s: float = 900.0
    launch: Callable[[Prepared, Paths], Launch] | None = None
    """For a service: its environment and the driver that feeds and stops it."""


@dataclass(slots=True)
class RunResult:
    tool: str
    version: str = "?"
    checked: bool | None = None
    """True: output matched; False: it did not (or the run failed); None: no output."""
    processing_s: float | None = None
    """From the first record to the last result (the steady rate's time)."""
    to_result_s: float | None = None
    """From the process's start to its last result flushed (the whole-process time:
    interpreter, imports, group join and restore included; the exit is not)."""
    wall_s: float | None = None
    """From the process's start to its exit."""
    cpu_s: float | None = None
    """User + system CPU seconds of the process and its children, start to exit."""
    peak_rss_bytes: int | None = None
    detail: str = ""
    notes: list[str] = field(default_factory=list)

    def events_per_s(self, events: int) -> float | None:
        """The steady rate: first record to last result."""
        if self.checked is False or not self.processing_s:
            return None
        return events / self.processing_s

    def whole_events_per_s(self, events: int) -> float | None:
        """The whole process's rate: its start to its last result."""
        if self.checked is False or not self.to_result_s:
            return None
        return events / self.to_result_s


def run_once(
    contender: Contender, prep: Prepared, workdir: Path, broker_kind: str = "tansu"
) -> RunResult:
    """One measured run in a fresh ``workdir`` (and, for Kafka, a fresh broker:
    ``broker_kind`` ``tansu`` or ``kafka``)."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    result = RunResult(contender.tool)
    if contender.reads == "kafka":
        log_path = str(workdir / "broker.log")
        if broker_kind == "kafka":
            from tests.kafka.kafka_broker import KafkaBroker

            started: EmbeddedBroker | KafkaBroker = KafkaBroker(log_path=log_path)
        else:
            started = EmbeddedBroker(log_path=log_path)
        with started as broker:
            bootstrap = broker.bootstrap_servers
            parts = prep.workload.partitions
            asyncio.run(produce(prep.records, bootstrap, INPUT_TOPIC, parts))
            if contender.output == "kafka":
                asyncio.run(create_topic(bootstrap, OUTPUT_TOPIC, parts))
            _execute(
                contender,
                prep,
                Paths(bootstrap, workdir, workdir / "report.json", workdir / "out"),
                result,
            )
            if contender.output == "kafka" and result.checked is None:
                values = asyncio.run(read_topic(bootstrap, OUTPUT_TOPIC))
                _check([normalise(orjson.loads(v)) for v in values], prep.expected, result)
    else:
        paths = Paths("", workdir, workdir / "report.json", workdir / "out")
        _execute(contender, prep, paths, result)
        if contender.output == "file" and result.checked is None:
            _check(read_result_file(paths.output_dir), prep.expected, result)
    return result


def _execute(contender: Contender, prep: Prepared, paths: Paths, result: RunResult) -> None:
    cmd = contender.command(prep, paths)
    launch = contender.launch(prep, paths) if contender.launch else None
    measured = run_measured(
        cmd,
        paths.workdir / "run.log",
        contender.timeout_s,
        env=launch.env if launch else None,
        driver=launch.driver if launch else None,
    )
    result.wall_s = measured.wall_s
    result.cpu_s = measured.cpu_s
    result.peak_rss_bytes = measured.peak_rss_bytes
    report = json.loads(paths.report.read_text()) if paths.report.exists() else {}
    result.version = report.get("version", result.version)
    result.notes = report.get("notes", [])
    if report.get("first_record") and report.get("finished"):
        result.processing_s = report["finished"] - report["first_record"]
    if report.get("finished"):
        result.to_result_s = report["finished"] - measured.started_epoch
    # A service stopped by the driver's SIGTERM may end by that signal once its graceful
    # shutdown is done (uvicorn re-raises the signal it caught): that is a clean exit.
    clean = (0, -signal.SIGTERM) if launch else (0,)
    if measured.timed_out or measured.returncode not in clean or not report:
        why = "timed out" if measured.timed_out else f"exit code {measured.returncode}"
        result.checked = False
        result.detail = f"{why}; log {paths.workdir / 'run.log'}: ...{measured.log_tail[-600:]}"
        return
    if contender.output == "none":
        if report.get("records_in") != len(prep.records):
            result.checked = False
            result.detail = f"read {report.get('records_in')} of {len(prep.records)} records"
        else:
            result.detail = f"read all {len(prep.records)} records"


def _check(rows: Iterable[ResultRow], expected: Expected, result: RunResult) -> None:
    check = check_results(rows, expected)
    result.checked = check.ok
    result.detail = check.summary()


@dataclass(slots=True)
class Summary:
    """The median of the repeated runs of one contender."""

    contender: Contender
    runs: list[RunResult]
    events: int

    @property
    def version(self) -> str:
        return next((r.version for r in self.runs if r.version != "?"), "?")

    @property
    def checked(self) -> bool | None:
        states = {r.checked for r in self.runs}
        if False in states:
            return False
        return True if True in states else None

    def _median(self, values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return statistics.median(present) if present else None

    @property
    def events_per_s(self) -> float | None:
        if self.checked is False:
            return None
        return self._median([r.events_per_s(self.events) for r in self.runs])

    @property
    def whole_events_per_s(self) -> float | None:
        if self.checked is False:
            return None
        return self._median([r.whole_events_per_s(self.events) for r in self.runs])

    @property
    def to_result_s(self) -> float | None:
        return self._median([r.to_result_s for r in self.runs])

    @property
    def wall_s(self) -> float | None:
        return self._median([r.wall_s for r in self.runs])

    @property
    def cpu_s_per_million(self) -> float | None:
        cpu = self._median([r.cpu_s for r in self.runs])
        return cpu * 1e6 / self.events if cpu is not None else None

    @property
    def peak_rss_bytes(self) -> float | None:
        return self._median([r.peak_rss_bytes for r in self.runs])


def run_round_robin(
    contenders: list[tuple[Contender, Prepared]],
    repeat: int,
    root: Path,
    broker_kind: str = "tansu",
) -> list[Summary]:
    """Every contender once per round, ``repeat`` rounds: each contender's runs are
    spread over the whole run, so a change in the machine's load falls on all of them."""
    runs: list[list[RunResult]] = [[] for _ in contenders]
    for i in range(repeat):
        for (contender, prep), done in zip(contenders, runs, strict=True):
            print(f"  {contender.tool}: run {i + 1}/{repeat} ...", file=sys.stderr, flush=True)
            res = run_once(contender, prep, root / contender.key / f"run{i + 1}", broker_kind)
            events = prep.workload.events
            steady, whole = res.events_per_s(events), res.whole_events_per_s(events)
            print(
                f"    checked={res.checked} steady={steady and round(steady)}/s "
                f"whole={whole and round(whole)}/s "
                f"to_result={res.to_result_s and round(res.to_result_s, 2)}s "
                f"wall={res.wall_s and round(res.wall_s, 1)}s "
                f"cpu={res.cpu_s and round(res.cpu_s, 1)}s {res.detail}"
                + "".join(f"; {note}" for note in res.notes),
                file=sys.stderr,
                flush=True,
            )
            done.append(res)
    return [
        Summary(contender, done, prep.workload.events)
        for (contender, prep), done in zip(contenders, runs, strict=True)
    ]


def scratch_root() -> Path:
    return DATA_DIR / "runs"
