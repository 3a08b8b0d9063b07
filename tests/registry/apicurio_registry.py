"""A real schema registry for the tests and benchmarks: Apicurio Registry 2.6 from its
ready app on Maven Central (``tests/registry/pom.xml``; ``make registry``, part of
``make test``, unpacks it into ``tests/registry/apicurio/``). In-memory storage; the
Confluent-compatible API under ``/apis/ccompat/v7``, which confluent-kafka's client and
the service speak. No Docker: ``java -jar apicurio-registry-app-*-runner.jar`` on a free
loopback port.

:class:`ApicurioRegistry` starts it, waits until its Confluent API answers, and
:meth:`~ApicurioRegistry.stop` stops it; :meth:`~ApicurioRegistry.start` again serves on
the same port (with nothing registered: the storage is in memory).
"""

from __future__ import annotations

import logging
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from service.runtime.kafka.embedded_broker import BrokerStartError, _parent_death_signal, free_port
from tests.kafka.kafka_broker import java_binary

logger = logging.getLogger(__name__)

APP_DIR = Path(__file__).resolve().parent / "apicurio"
"""Where ``make registry`` unpacks the app (git-ignored)."""

JVM_OPTIONS = (
    # Starts in ~6 s this way; a test registry never needs the optimising compiler.
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Xms64m",
    "-Xmx384m",
    "-Djava.net.preferIPv4Stack=true",
)


class RegistryNotInstalledError(RuntimeError):
    """The app is not unpacked (``make registry``) or Java is missing."""


def runner_jar(app_dir: Path = APP_DIR) -> Path:
    found = sorted(app_dir.glob("**/*-runner.jar"))
    if not found:
        raise RegistryNotInstalledError(
            f"no Apicurio Registry in {app_dir}: run `make registry` (or `make test`)"
        )
    return found[0]


class ApicurioRegistry:
    """One Apicurio Registry process on ``127.0.0.1:<free port>``."""

    def __init__(self, port: int | None = None) -> None:
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self._process: subprocess.Popen[bytes] | None = None
        self._log = Path(tempfile.mkstemp(prefix="clockwork-apicurio-", suffix=".log")[1])

    @property
    def url(self) -> str:
        """The Confluent-compatible API, as ``SERVICE_SCHEMA_REGISTRY_URL`` takes it."""
        return f"http://{self.host}:{self.port}/apis/ccompat/v7"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=1.0) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def start(self, timeout_s: float = 90.0) -> ApicurioRegistry:
        if self.running:
            raise BrokerStartError(f"Apicurio Registry already running on {self.url}")
        jar = runner_jar()
        with open(self._log, "ab") as log:
            self._process = subprocess.Popen(
                [
                    java_binary(),
                    *JVM_OPTIONS,
                    f"-Dquarkus.http.port={self.port}",
                    f"-Dquarkus.http.host={self.host}",
                    "-jar",
                    str(jar),
                ],
                cwd=jar.parent,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_parent_death_signal(),
            )
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if self._process.poll() is not None:
                    raise BrokerStartError(
                        f"Apicurio Registry exited with code {self._process.returncode}: "
                        f"{self._log_tail()}"
                    )
                if self.answers():
                    logger.info("Apicurio Registry answering on %s", self.url)
                    return self
                time.sleep(0.1)
            raise BrokerStartError(
                f"Apicurio Registry did not answer on {self.url} within {timeout_s}s: "
                f"{self._log_tail()}"
            )
        except BaseException:
            self.stop()
            raise

    def _log_tail(self, size: int = 3000) -> str:
        try:
            return self._log.read_bytes()[-size:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM (SIGKILL after ``timeout_s``); safe to call twice."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a frozen one, too
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def freeze(self) -> None:
        """Stop the process where it is (SIGSTOP): connections are accepted by the
        kernel and never answered, as a registry that hangs or is cut off; its
        schemas stay (a stop and start would lose them, the storage is in memory)."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """Let a frozen registry go on (SIGCONT)."""
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.stop()
        self._log.unlink(missing_ok=True)

    def __enter__(self) -> ApicurioRegistry:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
