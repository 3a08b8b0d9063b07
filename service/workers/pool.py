"""The worker processes of one replica: started, watched, restarted, stopped.

Each worker is ``python -m service.worker``, a child of the API process, with the
replica's configuration and three more variables: its number
(``SERVICE_WORKER_INDEX``, 1..N), its member name (``SERVICE_INSTANCE_ID``:
``<replica>-w<n>``) and the descriptor of a loopback socket the pool opened for it
(``SERVICE_WORKER_FD``), on which it serves ``/metrics`` and the probes. The pool keeps
the socket across restarts: its port never changes, so the API process always knows
where each worker answers, and a scrape during a restart waits in the backlog or
times out instead of reaching another process.

A worker that exits unasked is started again after a backoff (1 s, doubling up to 30 s,
back to 1 s once a worker stayed up a minute). Meanwhile its partitions go to the other
workers and replicas through the consumer group, the replica-loss path as it is: the
group notices after the session timeout, or at once when the worker could leave it.
A worker dies with the API process (``PR_SET_PDEATHSIG``): a ``kill -9`` of the
replica leaves no orphan holding partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

__all__ = ["WorkerPool", "WorkerSlot"]

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_UP_LONG_ENOUGH_S = 60.0
_BACKOFF_MAX_S = 30.0


@dataclass(slots=True)
class WorkerSlot:
    """One worker's place: its number, its socket, its current process."""

    index: int
    sock: socket.socket
    process: asyncio.subprocess.Process | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff_s: float = 1.0
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    @property
    def pid(self) -> int | None:
        process = self.process
        return process.pid if process is not None and process.returncode is None else None


class WorkerPool:
    """``count`` workers with ``env`` (the replica's configuration) and their own parts."""

    def __init__(
        self, count: int, env: Mapping[str, str], replica: str, stop_timeout_s: float
    ) -> None:
        self.replica = replica
        self._env = dict(env)
        self._stop_timeout_s = stop_timeout_s
        self._stopping = False
        self.slots = [WorkerSlot(i, _listening_socket()) for i in range(1, count + 1)]
        self.registry = CollectorRegistry(auto_describe=False)
        """The pool's own metrics (workers running, restarts), for ``/metrics``."""
        self.registry.register(self)

    def collect(self) -> Iterator[Metric]:
        """The pool as Prometheus metrics (the registry's collector interface)."""
        running = GaugeMetricFamily(
            "clockwork_workers_running",
            "Worker processes of this replica alive now (SERVICE_WORKERS when all are).",
        )
        running.add_metric([], self.running)
        yield running
        restarts = CounterMetricFamily(
            "clockwork_worker_restarts",
            "Worker processes started again after they exited unasked.",
            labels=("worker",),
        )
        for slot in self.slots:
            restarts.add_metric([str(slot.index)], slot.restarts)
        yield restarts

    def member(self, index: int) -> str:
        """A worker's name in the group's reports and the store: ``<replica>-w<n>``."""
        return f"{self.replica}-w{index}"

    @property
    def running(self) -> int:
        """Workers alive now."""
        return sum(1 for slot in self.slots if slot.pid is not None)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for slot in self.slots:
            slot.task = loop.create_task(self._keep(slot), name=f"worker-{slot.index}")

    async def stop(self) -> None:
        """SIGTERM every worker (each checkpoints, commits and leaves its groups), wait
        for them within the shutdown timeout, then SIGKILL what is left."""
        self._stopping = True
        for slot in self.slots:
            if slot.pid is not None:
                assert slot.process is not None
                with contextlib.suppress(ProcessLookupError):
                    slot.process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(self._stop_timeout_s):
                await asyncio.gather(*(s.process.wait() for s in self.slots if s.process))
        except TimeoutError:
            for slot in self.slots:
                if slot.pid is not None:
                    assert slot.process is not None
                    logger.warning("worker %d did not stop in time: killing it", slot.index)
                    with contextlib.suppress(ProcessLookupError):
                        slot.process.kill()
                    await slot.process.wait()
        for slot in self.slots:
            if slot.task is not None:
                slot.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await slot.task
            slot.sock.close()

    async def _keep(self, slot: WorkerSlot) -> None:
        while not self._stopping:
            slot.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "service.worker",
                env={
                    **self._env,
                    "SERVICE_WORKER_INDEX": str(slot.index),
                    "SERVICE_WORKER_FD": str(slot.sock.fileno()),
                    "SERVICE_INSTANCE_ID": self.member(slot.index),
                    "SERVICE_REPLICA_ID": self.replica,
                    "SERVICE_WORKERS": "1",
                },
                stdin=asyncio.subprocess.DEVNULL,
                pass_fds=(slot.sock.fileno(),),
                preexec_fn=partial(_die_with_parent, os.getpid()),
                start_new_session=True,  # a terminal's Ctrl-C reaches the API process only
            )
            slot.started_at = time.monotonic()
            logger.info("worker %d started (pid %d)", slot.index, slot.process.pid)
            code = await slot.process.wait()
            if self._stopping:
                return
            up_s = time.monotonic() - slot.started_at
            if up_s >= _UP_LONG_ENOUGH_S:
                slot.backoff_s = 1.0
            slot.restarts += 1
            logger.error(
                "worker %d (pid %d) exited with %s after %.1f s: starting it again in %.0f s",
                slot.index,
                slot.process.pid,
                code,
                up_s,
                slot.backoff_s,
            )
            await asyncio.sleep(slot.backoff_s)
            slot.backoff_s = min(slot.backoff_s * 2, _BACKOFF_MAX_S)


def _listening_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.set_inheritable(True)
    return sock


def _die_with_parent(parent: int) -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux; elsewhere a
    no-op, and an orphan leaves the group after the session timeout)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
