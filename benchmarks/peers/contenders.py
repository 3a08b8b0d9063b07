"""How each contender is started: the peers (each with its venv's Python), the
raw-consume ceiling, and our service (through ``benchmarks/e2e.py``, see ours.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.peers.harness import Contender, Paths, Prepared, RunResult, Summary
from benchmarks.peers.venvs import HERE, Peer


def runner_args(prep: Prepared, paths: Paths) -> list[str]:
    return [
        "--bootstrap", paths.bootstrap or "-",
        "--input-topic", "bench-input",
        "--output-topic", "bench-output",
        "--group", "bench",
        "--records", str(len(prep.records)),
        "--input-file", str(prep.jsonl),
        "--output-dir", str(paths.output_dir),
        "--state-dir", str(paths.workdir / "state"),
        "--report", str(paths.report),
    ]  # fmt: skip


def peer_contender(peer: Peer, python: Path) -> Contender:
    script = HERE / peer.runner

    def command(prep: Prepared, paths: Paths) -> list[str]:
        return [str(python), str(script), *runner_args(prep, paths)]

    return Contender(
        peer.name,
        peer.tool,
        command,
        reads=peer.reads,
        output="kafka" if peer.reads == "kafka" else "file",
        note=peer.note,
    )


KSTREAMS_DIR = HERE / "kstreams"
KSTREAMS_JAR = KSTREAMS_DIR / "target" / "kstreams-latency.jar"
KSTREAMS_CP = KSTREAMS_DIR / "target" / "classpath.txt"


def kstreams_contender() -> Contender | str:
    """Kafka Streams (``kstreams/``, ThroughputApp.java, built by ``make kstreams``), or
    why it cannot run."""
    for built in (KSTREAMS_JAR, KSTREAMS_CP):
        if not built.exists():
            return f"no {built}: run `make kstreams`"
    classpath = f"{KSTREAMS_JAR}:{KSTREAMS_CP.read_text().strip()}"

    def command(prep: Prepared, paths: Paths) -> list[str]:
        return [
            "java", "-cp", classpath, "dev.clockwork.bench.ThroughputApp",
            paths.bootstrap, "bench-input", "bench-output", "bench-kstreams",
            str(paths.workdir / "state"), str(len(prep.records)), str(paths.report),
        ]  # fmt: skip

    return Contender(
        "kstreams",
        "Kafka Streams",
        command,
        note="windowedBy(TimeWindows.ofSizeAndGrace(60s, 2s)).aggregate(count, sum)"
        ".suppress(untilWindowCloses); closed once every input record went through (a "
        "close commits: the cache and the producer are flushed); Streams' defaults "
        "(1 stream thread, 10 MB cache, commit 30 s); 1 process",
    )


def raw_consume(decode: bool = False, group: bool = False) -> Contender:
    script = HERE / "raw_consume.py"
    flags = [*(["--decode"] if decode else []), *(["--group-join"] if group else [])]

    def command(prep: Prepared, paths: Paths) -> list[str]:
        return [sys.executable, str(script), *flags, *runner_args(prep, paths)]

    if decode:
        return Contender(
            "raw-decode",
            "raw consume + orjson decode (aiokafka)",
            command,
            output="none",
            note="the ceiling for a Python consumer that looks at the JSON; no output",
        )
    if group:
        return Contender(
            "raw-group",
            "raw consume in a consumer group (aiokafka)",
            command,
            output="none",
            note="the ceiling with a group join, as the service and Quix pay it; no output",
        )
    return Contender(
        "raw",
        "raw consume (aiokafka)",
        command,
        output="none",
        note="the ceiling: partitions assigned (no group join), read every record, "
        "nothing else; no output",
    )


def failed(contender_key: str, tool: str, why: str, events: int) -> Summary:
    """A contender that could not be run at all (say, its install failed)."""
    contender = Contender(contender_key, tool, lambda prep, paths: [], note="")
    return Summary(contender, [RunResult(tool, checked=False, detail=why)], events)
