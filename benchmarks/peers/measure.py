"""Run a command as a child process and measure its wall time, CPU time and peak memory.

Peak RSS is the peak of the sum of the resident sets of the child and all of its
descendants (PyFlink's Python process starts a JVM), sampled from ``/proc`` every
50 ms. Not ``ru_maxrss`` (``wait4`` or ``RUSAGE_CHILDREN``): a forked child counts
the parent's pages as resident until it execs, so every child would report at least
the harness's own size (~380 MB with 1M prepared records).

CPU seconds are the user + system time of the child and its descendants: the larger of
the tree's total sampled from ``/proc/<pid>/stat`` (own and reaped children's times)
and the child's ``wait4`` resource usage at exit (which has everything the child reaped,
but not a grandchild left running, such as a JVM killed with the process group).
Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Measured:
    returncode: int
    wall_s: float
    peak_rss_bytes: int
    cpu_s: float
    started_epoch: float
    """``time.time()`` just before the child was started."""
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


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it, now."""
    tree = _children()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, ()))
    return out


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants, now."""
    return tree_usage(pid)[0]


def tree_usage(pid: int) -> tuple[int, float]:
    """(resident bytes, CPU seconds so far) of ``pid`` and its descendants, now; the
    CPU seconds include the children each of them has reaped."""
    rss, ticks = 0, 0
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/statm", "rb") as fh:
                rss += int(fh.read().split()[1]) * _PAGE
            with open(f"/proc/{p}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        # utime, stime, cutime, cstime: fields 14-17 of stat(5), 12-15 after the name.
        ticks += sum(int(f) for f in fields[11:15])
    return rss, ticks / _TICK


def run_measured(
    cmd: list[str],
    log_path: Path,
    timeout_s: float,
    env: dict[str, str] | None = None,
    driver: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> Measured:
    """Run ``cmd`` (its own process group, output to ``log_path``) to the end.

    ``driver``, if given, runs in a thread from the child's start on (say, to talk to a
    service over HTTP and stop it once its work is done); the child must still exit.
    """
    with log_path.open("wb") as log:
        started_epoch = time.time()
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        thread = None
        if driver is not None:
            thread = threading.Thread(target=driver, args=(proc,), daemon=True)
            thread.start()
        peak, cpu, timed_out, status = 0, 0.0, False, 0
        try:
            while True:
                pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    wall = time.perf_counter() - start
                    cpu = max(cpu, rusage.ru_utime + rusage.ru_stime)
                    break
                rss, cpu_now = tree_usage(proc.pid)
                peak, cpu = max(peak, rss), max(cpu, cpu_now)
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
        if thread is not None:
            thread.join(timeout=10)
    tail = log_path.read_bytes()[-3000:].decode(errors="replace")
    return Measured(proc.returncode, wall, peak, cpu, started_epoch, timed_out, tail)
