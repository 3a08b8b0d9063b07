"""Worker processes as replicas of one pipeline, and the status each reports.

Each replica is ``python -m tests.integration.worker`` (see there for its options); it
writes its status to a file, the tests' view of it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


class Replica:
    """One worker process and the status it reports."""

    def __init__(
        self,
        bootstrap: str,
        name: str,
        topic: str,
        path: Path,
        root: Path = ROOT,
        **options: Any,
    ):
        """``root``: the source tree the worker runs from (another version's, for the
        upgrade test)."""
        self.path = path
        # The worker's log beside its status file: what a failing test looks at.
        log = path.with_suffix(".log").open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.worker",
                bootstrap,
                name,
                topic,
                json.dumps({"status": str(path), **options}),
            ],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()  # the worker has its own copy

    def status(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.path.read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            return {"partitions": [], "state": "starting"}

    def holds(self) -> set[int]:
        return {p["partition"] for p in self.status()["partitions"]}

    def checkpointed(self, count: int, processed: bool = True) -> bool:
        """Holds ``count`` partitions, each checkpointed at least once (and with
        ``processed``, each with records processed since its assignment).

        After a takeover or a handover, wait without ``processed``: a partition this
        replica had read to its end before the rebalance may come back restored from
        the changelog (not kept in memory), with nothing left to read."""
        parts = self.status()["partitions"]
        return len(parts) == count and all(
            (p["records_in"] > 0 or not processed) and p["last_checkpoint_ms"] is not None
            for p in parts
        )

    def stop(self, sig: int) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    @property
    def exited(self) -> bool:
        return self.process.poll() is not None


@contextmanager
def replicas(
    bootstrap: str, name: str, topic: str, tmp_path: Path, count: int, **options: Any
) -> Iterator[list[Replica]]:
    started: list[Replica] = []

    def start() -> Replica:
        replica = Replica(bootstrap, name, topic, tmp_path / f"r{len(started)}.json", **options)
        started.append(replica)
        return replica

    for _ in range(count):
        start()
    try:
        yield started
    finally:
        for replica in started:
            replica.stop(signal.SIGTERM)
