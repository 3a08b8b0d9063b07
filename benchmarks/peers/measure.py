"""Run a command as a child process and measure its wall time and peak memory.

Peak RSS is the peak of the sum of the resident sets of the child and all of its
descendants (PyFlink's Python process starts a JVM), sampled from ``/proc`` every
50 ms. Not ``ru_maxrss`` (``wait4`` or ``RUSAGE_CHILDREN``): a forked child counts
the parent's pages as resident until it execs, so every child would report at least
the harness's own size (~380 MB with 1M prepared records). Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class Measured:
    returncode: int
    wall_s: float
    peak_rss_bytes: int
    timed_out: bool
    log_tail: str


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # The command name (field 2) may hold spaces and parentheses: split after it.
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants, now."""
    tree = _children()
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo.extend(tree.get(p, ()))
        try:
            with open(f"/proc/{p}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * _PAGE
        except OSError:
            pass
    return total


def run_measured(
    cmd: list[str], log_path: Path, timeout_s: float, env: dict[str, str] | None = None
) -> Measured:
    """Run ``cmd`` (its own process group, output to ``log_path``) to the end."""
    with log_path.open("wb") as log:
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        peak, timed_out, status = 0, False, 0
        try:
            while True:
                pid, status = os.waitpid(proc.pid, os.WNOHANG)
                if pid:
                    wall = time.perf_counter() - start
                    break
                peak = max(peak, tree_rss(proc.pid))
                if time.perf_counter() - start > timeout_s:
                    timed_out = True
                    os.killpg(proc.pid, signal.SIGKILL)
                time.sleep(0.05)
        finally:
            # Whatever the child left behind in its own process group (a JVM, a worker),
            # and the child itself when we are interrupted.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.returncode = os.waitstatus_to_exitcode(status)
    tail = log_path.read_bytes()[-3000:].decode(errors="replace")
    return Measured(proc.returncode, wall, peak, timed_out, tail)
