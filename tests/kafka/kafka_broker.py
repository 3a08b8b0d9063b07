"""A real Apache Kafka broker for the tests and benchmarks: one KRaft node from its jars.

The embedded broker (Tansu, ``embedded_broker.py``) differs from Apache Kafka in ways
that matter (see ``shared/design/embedded-broker.md``): the tests run against both, and
this module starts the second one. The jars come from Maven Central through
``tests/kafka/pom.xml``; ``make kafka`` (part of ``make test``) resolves them into
``~/.m2`` and writes their classpath to ``tests/kafka/classpath.txt``. No Kafka
distribution, no Docker: ``java -cp <classpath> kafka.Kafka server.properties``.

:class:`KafkaBroker` formats a fresh KRaft storage directory (``kafka.tools.StorageTool``),
starts one combined controller + broker on two free loopback ports, waits until it
answers an ApiVersions request (the broker answers only once it is unfenced and has
its metadata), and on :meth:`~KafkaBroker.stop` stops it and removes its directory.
The settings (:data:`BROKER_SETTINGS`) keep the start quick and the group joins as
fast as the tests' 2 s session timeouts allow; ``docker-compose.yml`` uses the same
ones that matter for the service (checked by ``tests/deploy``).
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

from service.runtime.kafka.embedded_broker import BrokerStartError, _parent_death_signal, free_port

logger = logging.getLogger(__name__)

CLASSPATH_ENV = "CLOCKWORK_KAFKA_CLASSPATH"
"""A file holding the broker's Java classpath; default :data:`DEFAULT_CLASSPATH_FILE`."""

DEFAULT_CLASSPATH_FILE = Path(__file__).resolve().parent / "classpath.txt"

DIR_PREFIX = "clockwork-kafka-"

BROKER_SETTINGS: dict[str, str] = {
    # No auto-creation (Tansu auto-creates): the tests prove that the service creates
    # every topic it writes, as a production cluster that disables it needs.
    "auto.create.topics.enable": "false",
    "num.partitions": "4",
    # One node: every internal topic has one replica, and transactions need their state
    # log to be writable with one in-sync replica.
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "min.insync.replicas": "1",
    # Fewer internal partitions than the default 50: created at the first group or
    # transaction, each one is a log to open.
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
    # A group's first join is answered at once, not after 3 s.
    "group.initial.rebalance.delay.ms": "0",
    # The tests use 2000 ms session timeouts (the default minimum is 6000 ms).
    "group.min.session.timeout.ms": "500",
    # The log cleaner looks for compactable logs every 200 ms (default 15 s), so a test
    # can see a compacted topic being compacted (with its own segment.ms and ratios).
    "log.cleaner.backoff.ms": "200",
    # No time retention by default: the tests' records carry event times from 2023 as
    # their timestamps, and Kafka's first retention check (30 s after start, then every
    # 5 min) deleted every such record of every topic created with the defaults (7 days)
    # while the suite ran: a test reading its input or results after a check found
    # nothing (measured: a compaction run read 0 of 3 records). Topics the service
    # creates with a retention of their own are still held to it.
    "log.retention.ms": "-1",
    # Few threads on a small machine.
    "num.network.threads": "2",
    "num.io.threads": "4",
    "num.recovery.threads.per.data.dir": "1",
    "background.threads": "4",
}
"""Settings of the test broker beyond the listeners and the storage directory."""

DEPLOYED_SETTINGS = (
    "auto.create.topics.enable",
    "num.partitions",
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
    "min.insync.replicas",
    "group.initial.rebalance.delay.ms",
)
"""The settings of :data:`BROKER_SETTINGS` that ``docker-compose.yml``'s broker has too
(checked by ``tests/deploy``); the rest only make the tests quick (internal topics'
partitions, the cleaner's backoff, the lowest session timeout, retention, threads)."""

HEAP_OPTIONS = ("-Xms128m", "-Xmx768m")
JVM_OPTIONS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-Djava.awt.headless=true",
    # No DNS lookup of the machine's own name on a machine without a network.
    "-Djava.net.preferIPv4Stack=true",
)
TOOL_JVM_OPTIONS = ("-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""The storage formatter runs for a second: no optimising compiler, one GC thread."""

_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
"""


class KafkaNotInstalledError(RuntimeError):
    """Java or the broker's jars are missing (``make kafka`` resolves the jars)."""


def read_classpath(path: str | os.PathLike[str] | None = None) -> str:
    """The broker's classpath from ``path`` (or $CLOCKWORK_KAFKA_CLASSPATH, or the
    default file), checked: every jar must exist, or the cache was emptied since."""
    source = Path(path or os.environ.get(CLASSPATH_ENV) or DEFAULT_CLASSPATH_FILE)
    try:
        text = source.read_text().strip()
    except OSError as exc:
        raise KafkaNotInstalledError(
            f"no Apache Kafka classpath at {source}: run `make kafka` (or `make test`)"
        ) from exc
    jars = [j for j in text.split(os.pathsep) if j]
    missing = [j for j in jars if not Path(j).is_file()]
    if not jars or missing:
        raise KafkaNotInstalledError(
            f"{source} names {len(missing)} missing jar(s) (e.g. {missing[:1]}): "
            "run `make kafka` again"
        )
    return os.pathsep.join(jars)


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` if set, else ``java`` on the PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").is_file():
        return str(Path(home, "bin", "java"))
    found = shutil.which("java")
    if found is None:
        raise KafkaNotInstalledError("no java on the PATH (Apache Kafka needs Java 17+)")
    return found


def random_cluster_id() -> str:
    """A cluster id as ``kafka-storage.sh random-uuid`` makes one, without a JVM start:
    16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


def answers_api_versions(
    host: str, port: int, timeout_s: float = 1.0, ssl_context: ssl.SSLContext | None = None
) -> bool:
    """Whether a Kafka broker at ``host:port`` answers ApiVersions v0 without error.

    A KRaft broker enables request processing only once it is unfenced and has caught up
    with the metadata, so an answer means clients can use it; a bound port alone does not
    (the kernel accepts connections before Kafka reads them). ``ssl_context``: a TLS
    listener (SSL or SASL_SSL; a SASL listener answers ApiVersions before authentication).
    """
    client_id = b"clockwork-probe"
    # Request header v1 (api_key 18 = ApiVersions, version 0, correlation id 7, client
    # id) and an empty v0 body.
    request = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as raw:
            sock = raw
            if ssl_context is not None:
                sock = ssl_context.wrap_socket(raw, server_hostname=host)
            with sock:
                sock.settimeout(timeout_s)
                sock.sendall(struct.pack(">i", len(request)) + request)
                (size,) = struct.unpack(">i", _recv_exact(sock, 4))
                answer = _recv_exact(sock, size)
    except (OSError, ConnectionError, struct.error):
        return False
    correlation_id, error_code = struct.unpack(">ih", answer[:6])
    return bool(correlation_id == 7 and error_code == 0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_dirs(parent: Path) -> None:
    """Remove the directories of brokers whose starting process is gone (killed before
    it could clean up: the broker died with it, see ``_parent_death_signal``) once the
    broker's own process has exited too."""
    for path in parent.glob(f"{DIR_PREFIX}*"):
        try:
            starter = int(path.name[len(DIR_PREFIX) :].split("-", 1)[0])
        except ValueError:
            continue
        if starter == os.getpid() or _alive(starter):
            continue
        try:
            broker = int((path / "broker.pid").read_text())
        except (OSError, ValueError):
            broker = None
        if broker is None or not _alive(broker):
            shutil.rmtree(path, ignore_errors=True)


class KafkaBroker:
    """One Apache Kafka node (KRaft, controller and broker in one process) on loopback.

    Usable as a context manager. Its data and log live in a temporary directory that
    :meth:`stop` removes; ``log_path`` keeps the broker's log elsewhere (and keeps it).
    ``settings`` override or extend :data:`BROKER_SETTINGS`.

    ``protocol``: the security protocol of its one client listener (also the
    inter-broker listener; the controller's stays PLAINTEXT on loopback). Anything but
    PLAINTEXT needs its TLS and SASL properties in ``settings`` and, for the start-up
    probe, ``probe_ssl_context`` (a TLS listener). ``scram_users`` (name -> password)
    are created with both SCRAM mechanisms when the storage is formatted, as
    ``kafka-storage format --add-scram`` does.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int | None = None,
        *,
        settings: Mapping[str, str] | None = None,
        classpath: str | None = None,
        log_path: str | None = None,
        log_level: str = "WARN",
        protocol: str = "PLAINTEXT",
        scram_users: Mapping[str, str] | None = None,
        probe_ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.controller_port = free_port(host)
        while self.controller_port == self.port:
            self.controller_port = free_port(host)
        self.settings = {**BROKER_SETTINGS, **(settings or {})}
        self._classpath = classpath
        self._log_path = log_path
        self._log_level = log_level
        self._dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.protocol = protocol
        self._scram_users = dict(scram_users or {})
        self._probe_ssl_context = probe_ssl_context

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def log_file(self) -> Path | None:
        """Where the broker writes its log (WARN and above unless ``log_level`` says)."""
        if self._log_path:
            return Path(self._log_path)
        return self._dir / "broker.log" if self._dir else None

    def server_properties(self, data_dir: Path) -> dict[str, str]:
        """The node's full configuration: listeners, KRaft quorum, storage, settings."""
        host, port, cport, name = self.host, self.port, self.controller_port, self.protocol
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{host}:{cport}",
            "listeners": f"{name}://{host}:{port},CONTROLLER://{host}:{cport}",
            "advertised.listeners": f"{name}://{host}:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": name,
            "listener.security.protocol.map": f"CONTROLLER:PLAINTEXT,{name}:{name}",
            "log.dirs": str(data_dir),
            **self.settings,
        }

    def start(self, timeout_s: float = 90.0) -> KafkaBroker:
        """Format the storage, start the node, return once it answers; raises
        :class:`BrokerStartError` (with the log's tail) if it does not within
        ``timeout_s``, and :class:`KafkaNotInstalledError` without Java or the jars.

        After ``stop(keep_data=True)`` it starts again on the same ports with the same
        data (topics, records, groups and their offsets survive, as on a real restart).
        """
        if self.running:
            raise BrokerStartError(f"already running on {self.bootstrap_servers}")
        classpath = self._classpath or read_classpath()
        java = java_binary()
        if self._dir is None:
            parent = Path(tempfile.gettempdir())
            _remove_stale_dirs(parent)
            self._dir = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-", dir=parent))
            properties = self.server_properties(self._dir / "data")
            (self._dir / "server.properties").write_text(
                "".join(f"{k}={v}\n" for k, v in properties.items())
            )
            (self._dir / "log4j2.properties").write_text(_LOG4J2.format(level=self._log_level))
        config = self._dir / "server.properties"
        log4j = self._dir / "log4j2.properties"
        log_file = self.log_file
        assert log_file is not None
        java_args = ["-cp", classpath, f"-Dlog4j2.configurationFile={log4j}"]
        deadline = time.monotonic() + timeout_s
        try:
            with open(log_file, "ab") as log:
                if not (self._dir / "data" / "meta.properties").exists():
                    self._format(java, java_args, config, log, timeout_s)
                self._process = subprocess.Popen(
                    [java, *HEAP_OPTIONS, *JVM_OPTIONS, *java_args, "kafka.Kafka", str(config)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    # Its own process group: a Ctrl-C in the terminal reaches us, not it.
                    start_new_session=True,
                    preexec_fn=_parent_death_signal(),
                )
            (self._dir / "broker.pid").write_text(str(self._process.pid))
            while time.monotonic() < deadline:
                if self._process.poll() is not None:
                    raise BrokerStartError(
                        f"Apache Kafka exited with code {self._process.returncode}: "
                        f"{self._log_tail()}"
                    )
                if answers_api_versions(
                    self.host, self.port, timeout_s=1.0, ssl_context=self._probe_ssl_context
                ):
                    logger.info("Apache Kafka (KRaft) answering on %s", self.bootstrap_servers)
                    return self
                time.sleep(0.05)
            raise BrokerStartError(
                f"Apache Kafka did not answer on {self.bootstrap_servers} within "
                f"{timeout_s}s: {self._log_tail()}"
            )
        except BaseException:
            self.stop()
            raise

    def _format(
        self, java: str, java_args: list[str], config: Path, log: IO[bytes], timeout_s: float
    ) -> None:
        """Format the KRaft storage named in ``config`` (a new cluster id)."""
        formatted = subprocess.run(
            [
                java,
                *TOOL_JVM_OPTIONS,
                *java_args,
                "kafka.tools.StorageTool",
                "format",
                "--cluster-id",
                random_cluster_id(),
                "--config",
                str(config),
                "--ignore-formatted",
                *(
                    arg
                    for name, password in self._scram_users.items()
                    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
                    for arg in ("--add-scram", f"{mechanism}=[name={name},password={password}]")
                ),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            timeout=timeout_s,
            check=False,
            preexec_fn=_parent_death_signal(),
        )
        if formatted.returncode != 0:
            raise BrokerStartError(
                f"formatting the Kafka storage failed ({formatted.returncode}): {self._log_tail()}"
            )

    def _log_tail(self, size: int = 3000) -> str:
        log = self.log_file
        try:
            return log.read_bytes()[-size:].decode(errors="replace") if log else ""
        except OSError:
            return ""

    def stop(self, timeout_s: float = 30.0, *, keep_data: bool = False) -> None:
        """Stop the node (SIGTERM: a clean shutdown; SIGKILL after ``timeout_s``) and
        remove its directory, unless ``keep_data`` (for a :meth:`start` again). Safe to
        call twice."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if keep_data:
            return
        directory, self._dir = self._dir, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def discard(self) -> None:
        """Kill the node and remove its directory: for a broker whose data nothing reads
        again (a test session's end). A clean shutdown flushes and checkpoints every
        partition's log first: 13 s for 10,000 partitions, a suite's worth."""
        self.stop(timeout_s=0)

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
