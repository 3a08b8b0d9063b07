"""The peers, pinned, each in its own virtual environment under ``.venvs/``.

A venv is created with ``python3.11 -m venv`` and the pinned requirements are
installed with pip; a stamp file records what was installed, so a second run
reuses it and a changed pin rebuilds it. PyFlink and the others cannot share one venv
(PyFlink pins old versions of numpy, pandas, pyarrow, protobuf...).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENVS = HERE / ".venvs"


@dataclass(frozen=True, slots=True)
class Peer:
    name: str
    """Short name, used on the command line and for the venv's directory."""
    tool: str
    """The name shown in the table."""
    runner: str
    """The runner script in this directory, run with the venv's Python."""
    requirements: tuple[str, ...]
    python: str = "python3.11"
    reads: str = "kafka"
    """``kafka`` (the input topic on the embedded broker) or ``file`` (JSON lines)."""
    note: str = ""
    venv_name: str = ""
    """The venv's directory when another peer's is shared (the same pins); else ``name``."""

    @property
    def venv(self) -> Path:
        return VENVS / (self.venv_name or self.name)

    @property
    def venv_python(self) -> Path:
        return self.venv / "bin" / "python"


PEERS: tuple[Peer, ...] = (
    Peer(
        "quix",
        "Quix Streams",
        "quix.py",
        ("quixstreams==3.28.1", "orjson"),
        note="tumbling_window(60s, grace 2s).agg(count, sum).final(closing_strategy="
        "'partition'); RocksDB state with changelog topics (defaults); 1 process",
    ),
    Peer(
        "bytewax",
        "Bytewax",
        "bytewax_runner.py",
        ("bytewax[kafka]==0.21.1", "orjson"),
        note="KafkaSource (tail=False) -> windowing.fold_window with EventClock (wait 2s, "
        "system time frozen: pure event time) and TumblingWindower(60s) -> KafkaSink; "
        "1 worker",
    ),
    Peer(
        "faust",
        "Faust (faust-streaming)",
        "faust_runner.py",
        ("faust-streaming==0.15.3", "orjson"),
        note="windowed table tumbling(60s) relative to the event's ts, memory store; "
        "every window emitted once from the table at end of input (Faust's "
        "on_window_close follows the wall clock, not a watermark); 1 worker",
    ),
    Peer(
        "flink",
        "Flink SQL (PyFlink)",
        "flink.py",
        ("apache-flink==2.3.0",),
        reads="file",
        note="TUMBLE(60s) with WATERMARK ts - 2s, filesystem JSON source and sink "
        "(no Kafka client work: flink-kafka is the same on Kafka); parallelism 1",
    ),
    Peer(
        "flink-kafka",
        "Flink SQL (PyFlink), Kafka connector",
        "flink_kafka.py",
        ("apache-flink==2.3.0",),
        note="TUMBLE(60s) with WATERMARK ts - 2s, Kafka source (earliest to latest-offset) "
        "and sink tables, flink-sql-connector-kafka 5.0.0-2.2 (make flink-kafka); "
        "defaults otherwise; parallelism 1",
        venv_name="flink",
    ),
)
BY_NAME = {p.name: p for p in PEERS}


class VenvError(RuntimeError):
    """A peer's virtual environment could not be created or installed."""


def ensure_venv(peer: Peer, log_dir: Path) -> Path:
    """The peer's venv Python, creating or updating the venv when its pins changed."""
    stamp = peer.venv / ".installed"
    wanted = "\n".join(peer.requirements)
    if stamp.exists() and stamp.read_text() == wanted and peer.venv_python.exists():
        return peer.venv_python
    python = shutil.which(peer.python)
    if python is None:
        raise VenvError(f"{peer.python} not found on PATH")
    log = log_dir / f"venv-{peer.name}.log"
    with log.open("wb") as fh:
        steps = [
            [python, "-m", "venv", "--clear", str(peer.venv)],
            [str(peer.venv_python), "-m", "pip", "install", "--quiet", *peer.requirements],
        ]
        for step in steps:
            if subprocess.run(step, stdout=fh, stderr=subprocess.STDOUT).returncode:
                raise VenvError(f"`{' '.join(step)}` failed; see {log}")
    stamp.write_text(wanted)
    return peer.venv_python


def installed_version(python: Path, distribution: str) -> str:
    out = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({distribution!r}))"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() or "?"
