"""How many CPUs this process may use: the default number of workers.

``os.cpu_count()`` counts the host's; a container limited to 2 CPUs on a 64-core host
has 64 of them visible and may use 2. What limits a process: its CPU affinity (cpusets,
``taskset``) and its cgroup's CPU quota (``docker run --cpus``, Kubernetes' CPU limit),
which cgroup v2 states in ``cpu.max`` (``max 100000`` or ``200000 100000``) and v1 in
``cpu.cfs_quota_us``/``cpu.cfs_period_us``. A fractional quota rounds up: 1.5 CPUs run
two workers that share them, rather than one that leaves half a CPU idle.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["available_cpus", "quota_cpus"]

CGROUP = Path("/sys/fs/cgroup")


def quota_cpus(
    cpu_max: str | None, quota_us: str | None = None, period_us: str | None = None
) -> int | None:
    """The CPUs a cgroup quota allows (rounded up), or None when it sets none. Pure: the
    files' contents in, so that every form is tested without a cgroup."""
    if cpu_max is not None:
        parts = cpu_max.split()
        if len(parts) == 2 and parts[0] != "max":
            return _ratio(parts[0], parts[1])
        return None
    if quota_us is not None and period_us is not None:
        return _ratio(quota_us.strip(), period_us.strip())
    return None


def available_cpus(cgroup: Path = CGROUP) -> int:
    """The CPUs this process may use: its affinity, capped by its cgroup's quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    quota = quota_cpus(
        _read(cgroup / "cpu.max"),
        _read(cgroup / "cpu" / "cpu.cfs_quota_us"),
        _read(cgroup / "cpu" / "cpu.cfs_period_us"),
    )
    return max(1, min(cpus, quota) if quota is not None else cpus)


def _ratio(quota: str, period: str) -> int | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    if q <= 0 or p <= 0:  # -1: no quota (v1)
        return None
    return max(1, math.ceil(q / p))


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
