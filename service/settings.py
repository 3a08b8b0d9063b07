"""The service's configuration: every knob is an environment variable, read once at start.

One frozen dataclass, so the values cannot drift while the service runs and tests can
build a :class:`Settings` directly. :meth:`Settings.from_env` checks every variable and
reports all invalid ones at once (:class:`SettingsError`), so a misconfigured deployment
fails at start with a message naming the variables, not later on first use.

``docs/configuration.md`` lists the same variables; keep the two in step.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import ssl
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from service.contract.kafka_security import (
    SASL_MECHANISMS,
    SECURITY_PROTOCOLS,
    parse_bool,
    read_secret_file,
)
from service.operators.udf import parse_allowed_modules
from service.runtime.security import PLAINTEXT, KafkaSecurity
from service.runtime.settings import SchemaRegistrySettings
from service.workers.cpus import available_cpus

__all__ = ["Settings", "SettingsError"]

_T = TypeVar("_T")

_NO_MODULES: tuple[str, ...] = ()
_LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

DEFAULT_SESSION_TIMEOUT_MS = 10_000
"""The group session timeout against a configured broker."""
EMBEDDED_SESSION_TIMEOUT_MS = 2_000
"""Against the embedded broker, which answers a group join after half of it."""


class SettingsError(ValueError):
    """One or more environment variables have invalid values; the message names each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))


def _default_instance_id() -> str:
    """Host name plus a short random suffix: unique per process, readable in logs."""
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class Settings:
    """All configuration of one service process. Field docstrings double as documentation."""

    kafka_bootstrap_servers: str | None = None
    """``KAFKA_BOOTSTRAP_SERVERS``: ``host:port[,host:port...]``. Unset: the service starts
    an embedded local broker (Tansu, in memory) and logs its address."""

    http_host: str = "0.0.0.0"
    """``SERVICE_HTTP_HOST``: the address the REST API listens on."""

    http_port: int = 8000
    """``SERVICE_HTTP_PORT``: the port the REST API listens on (1-65535)."""

    query_address: str | None = None
    """``SERVICE_QUERY_ADDRESS``: the base URL other replicas send the pull queries this
    replica owns to (``http[s]://host:port``), published in its member reports. Unset:
    its own listening host and port (the host name when it listens on every address)."""

    schema_registry: SchemaRegistrySettings | None = None
    """``SERVICE_SCHEMA_REGISTRY_URL`` (unset: no registry; pipelines whose source is in
    Confluent's wire format wait for one, failed), with
    ``SERVICE_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO`` (``user:password``, or ``..._FILE``),
    ``SERVICE_SCHEMA_REGISTRY_SSL_CA_LOCATION``,
    ``SERVICE_SCHEMA_REGISTRY_SSL_CERTIFICATE_LOCATION`` and
    ``SERVICE_SCHEMA_REGISTRY_SSL_KEY_LOCATION`` (PEM files), as Confluent's clients name
    them."""

    kafka_security: KafkaSecurity = PLAINTEXT
    """``KAFKA_SECURITY_PROTOCOL`` and the ``KAFKA_SASL_*`` and ``KAFKA_SSL_*`` variables:
    TLS and SASL for every Kafka client (see :func:`_kafka_security`). Its repr and
    :meth:`describe` leave the secrets out."""

    api_token: str | None = field(default=None, repr=False)
    """``SERVICE_API_TOKEN``: when set, every POST, PUT and DELETE needs
    ``Authorization: Bearer <token>`` (401 otherwise), and so do the data reads (the
    pipelines' specs, history and tail) unless ``SERVICE_API_READ_OPEN``."""

    api_read_open: bool = False
    """``SERVICE_API_READ_OPEN``: ``true`` keeps the data reads open with a token set
    (the behaviour before it covered them). Probes and ``/metrics`` are always open."""

    http_tls_cert_file: str | None = None
    """``SERVICE_HTTP_TLS_CERT_FILE``: PEM certificate (chain) the REST API serves HTTPS
    with; with ``SERVICE_HTTP_TLS_KEY_FILE``. Unset: plain HTTP."""

    http_tls_key_file: str | None = None
    """``SERVICE_HTTP_TLS_KEY_FILE``: the PEM private key of ``SERVICE_HTTP_TLS_CERT_FILE``."""

    udf_modules: tuple[str, ...] = ()
    """``SERVICE_UDF_MODULES``: comma-separated module prefixes user functions
    (``package.module:Name``) may be loaded from. Empty: only built-ins."""

    max_body_bytes: int = 1024 * 1024
    """``SERVICE_MAX_BODY_BYTES``: request bodies larger than this get 413."""

    pipelines_topic: str = "clockwork.pipelines"
    """``SERVICE_PIPELINES_TOPIC``: the compacted topic holding the pipeline specs;
    created (1 partition, ``cleanup.policy=compact``) when missing."""

    members_topic: str = "clockwork.members"
    """``SERVICE_MEMBERS_TOPIC``: the compacted topic where every replica publishes what it
    runs, so that any replica shows the whole pipeline (created like the pipelines
    topic)."""

    status_publish_interval_ms: int = 2000
    """``SERVICE_STATUS_PUBLISH_INTERVAL_MS``: how often each replica publishes its status
    to the members topic (how fresh another replica's view of it is)."""

    topic_replication: int = 1
    """``SERVICE_TOPIC_REPLICATION``: replication factor of the topics the service creates
    (the pipelines topic, changelogs, result topics); use 3 on a production cluster."""

    checkpoint_interval_ms: int = 5000
    """``SERVICE_CHECKPOINT_INTERVAL_MS``: how often each partition checkpoints its state."""

    prefetch_max_records: int = 250_000
    """``SERVICE_PREFETCH_MAX_RECORDS``: records a pipeline reads and decodes while it
    joins its consumer group, to process first once it has partitions (an even share
    per partition; ~0.7 KB each until processed: ~175 MB at the default, for the second
    or so after the join). 0 turns it off."""

    kafka_session_timeout_ms: int | None = None
    """``KAFKA_SESSION_TIMEOUT_MS``: the pipelines' consumer group session timeout; a
    replica that stops heartbeating loses its partitions after this long. Unset: 10000
    against a configured broker, :data:`EMBEDDED_SESSION_TIMEOUT_MS` against the embedded
    one (see :meth:`session_timeout_ms`)."""

    kafka_fetch_max_wait_ms: int = 20
    """``KAFKA_FETCH_MAX_WAIT_MS``: how long the broker may hold a fetch. Keep it short:
    the embedded broker always waits this long before answering."""

    store_apply_timeout_ms: int = 15000
    """``SERVICE_STORE_APPLY_TIMEOUT_MS``: how long a write to the pipeline store waits
    for this replica to apply it before answering 504."""

    shutdown_timeout_ms: int = 20000
    """``SERVICE_SHUTDOWN_TIMEOUT_MS``: how long a graceful shutdown (SIGTERM) may take to
    checkpoint and stop the pipelines."""

    log_level: str = "INFO"
    """``SERVICE_LOG_LEVEL``: CRITICAL, ERROR, WARNING, INFO or DEBUG."""

    workers: int = 1
    """``SERVICE_WORKERS``: processes that run the pipelines (each a member of every
    pipeline's consumer group). 1: this process runs them, as well as the API. Above 1:
    this process serves the API and supervises that many workers, restarting any that
    dies. Unset: the CPUs this process may use (its affinity and its cgroup's CPU quota:
    a container limited to 2 CPUs starts 2), so a replica uses every core it is given."""

    state_backend: str = "memory"
    """``SERVICE_STATE_BACKEND``: ``memory`` or ``rocksdb``: where keyed state lives for a
    pipeline whose spec names no ``state.backend`` (rocksdb only for the operators that
    support it; the others stay in memory). docs/operations.md, "State backends"."""

    state_dir: str = ""
    """``SERVICE_STATE_DIR``: the directory of the rocksdb backend's stores (one RocksDB per
    owned partition and stage). Keep it across restarts for local restores; replicas
    (and workers of different replicas) on one host each need their own. Default (empty):
    ``clockwork-state`` in the system's temporary directory, found only when a rocksdb
    store first opens, so a service that keeps its state in memory needs no writable
    temporary directory (the image runs read-only)."""

    standby_replicas: int = 0
    """``SERVICE_STANDBY_REPLICAS``: for a rocksdb pipeline whose spec names no
    ``state.standby_replicas``, the replicas keeping a warm copy of each partition besides
    its owner (0 to 8). docs/operations.md, "Standby replicas"."""

    instance_id: str = field(default_factory=_default_instance_id)
    """``SERVICE_INSTANCE_ID``: this replica's name in logs, store records and metrics.
    Default: host name plus a random suffix."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every variable from ``environ`` (default ``os.environ``).

        Raises :class:`SettingsError` listing every invalid variable.
        """
        env = os.environ if environ is None else environ
        problems: list[str] = []

        def read(name: str, parse: Callable[[str], _T], default: _T) -> _T:
            raw = env.get(name)
            if raw is None or raw.strip() == "":
                return default
            try:
                return parse(raw.strip())
            except ValueError as exc:
                problems.append(f"{name}={raw!r}: {exc}")
                return default

        def read_secret(name: str) -> str | None:
            """``NAME`` or the contents of the file ``NAME_FILE`` (a mounted container
            secret; one trailing newline dropped), never both. Problems never show the
            value."""
            direct = env.get(name, "")
            path = env.get(f"{name}_FILE", "").strip()
            if direct.strip() and path:
                problems.append(f"{name} and {name}_FILE: set one, not both")
                return None
            if not path:
                return direct.strip() or None
            try:
                text = read_secret_file(path)
            except (OSError, UnicodeDecodeError) as exc:
                problems.append(f"{name}_FILE={path!r}: cannot read it ({type(exc).__name__})")
                return None
            if not text:
                problems.append(f"{name}_FILE={path!r}: the file is empty")
                return None
            return text

        values: dict[str, Any] = {
            "kafka_bootstrap_servers": read("KAFKA_BOOTSTRAP_SERVERS", _parse_bootstrap, None),
            "http_host": read("SERVICE_HTTP_HOST", str, "0.0.0.0"),
            "http_port": read("SERVICE_HTTP_PORT", _int_between(1, 65535), 8000),
            "query_address": read("SERVICE_QUERY_ADDRESS", _parse_base_url, None),
            "api_token": read_secret("SERVICE_API_TOKEN"),
            "api_read_open": read("SERVICE_API_READ_OPEN", parse_bool, False),
            "http_tls_cert_file": read("SERVICE_HTTP_TLS_CERT_FILE", _parse_file, None),
            "http_tls_key_file": read("SERVICE_HTTP_TLS_KEY_FILE", _parse_file, None),
            "udf_modules": read("SERVICE_UDF_MODULES", _parse_modules, _NO_MODULES),
            "max_body_bytes": read(
                "SERVICE_MAX_BODY_BYTES", _int_between(1024, 1 << 30), 1024 * 1024
            ),
            "pipelines_topic": read("SERVICE_PIPELINES_TOPIC", _parse_topic, "clockwork.pipelines"),
            "members_topic": read("SERVICE_MEMBERS_TOPIC", _parse_topic, "clockwork.members"),
            "status_publish_interval_ms": read(
                "SERVICE_STATUS_PUBLISH_INTERVAL_MS", _int_between(100, 600_000), 2000
            ),
            "topic_replication": read("SERVICE_TOPIC_REPLICATION", _int_between(1, 32), 1),
            "checkpoint_interval_ms": read(
                "SERVICE_CHECKPOINT_INTERVAL_MS", _int_between(10, 3_600_000), 5000
            ),
            "prefetch_max_records": read(
                "SERVICE_PREFETCH_MAX_RECORDS", _int_between(0, 10_000_000), 250_000
            ),
            "kafka_session_timeout_ms": read(
                "KAFKA_SESSION_TIMEOUT_MS", _int_between(1000, 600_000), None
            ),
            "kafka_fetch_max_wait_ms": read("KAFKA_FETCH_MAX_WAIT_MS", _int_between(1, 10_000), 20),
            "store_apply_timeout_ms": read(
                "SERVICE_STORE_APPLY_TIMEOUT_MS", _int_between(100, 600_000), 15000
            ),
            "shutdown_timeout_ms": read(
                "SERVICE_SHUTDOWN_TIMEOUT_MS", _int_between(100, 600_000), 20000
            ),
            "log_level": read("SERVICE_LOG_LEVEL", _parse_log_level, "INFO"),
            "workers": read("SERVICE_WORKERS", _int_between(1, 256), None),
            "state_backend": read("SERVICE_STATE_BACKEND", _parse_state_backend, "memory"),
            "state_dir": read("SERVICE_STATE_DIR", _parse_directory, ""),
            "standby_replicas": read("SERVICE_STANDBY_REPLICAS", _int_between(0, 8), 0),
        }
        if values["workers"] is None:
            values["workers"] = available_cpus()
        instance_id = read("SERVICE_INSTANCE_ID", _parse_instance_id, None)
        if instance_id is not None:
            values["instance_id"] = instance_id
        if (values["http_tls_cert_file"] is None) != (values["http_tls_key_file"] is None):
            problems.append(
                "SERVICE_HTTP_TLS_CERT_FILE and SERVICE_HTTP_TLS_KEY_FILE: set both or neither"
            )
        values["schema_registry"] = _schema_registry(read, read_secret)
        values["kafka_security"] = _kafka_security(
            read, read_secret, problems, embedded=values["kafka_bootstrap_servers"] is None
        )
        if problems:
            raise SettingsError(problems)
        return cls(**values)

    def describe(self) -> dict[str, Any]:
        """The settings for the start-up log line, with the token and secrets masked."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.api_token is not None:
            out["api_token"] = "***"
        out["kafka_security"] = self.kafka_security.describe()
        return out

    def advertised_query_address(self) -> str:
        """:attr:`query_address`, or this process's own listening address."""
        if self.query_address is not None:
            return self.query_address
        scheme = "https" if self.http_tls_cert_file is not None else "http"
        host = self.http_host
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        return f"{scheme}://{host}:{self.http_port}"

    def session_timeout_ms(self, embedded_broker: bool) -> int:
        """The group session timeout to use: the configured one, else the default for the
        kind of broker (the embedded broker answers a group join only after half the
        session timeout, so its default is short: a 1 s join instead of 5 s)."""
        if self.kafka_session_timeout_ms is not None:
            return self.kafka_session_timeout_ms
        return EMBEDDED_SESSION_TIMEOUT_MS if embedded_broker else DEFAULT_SESSION_TIMEOUT_MS

    @property
    def log_level_number(self) -> int:
        return int(logging.getLevelName(self.log_level))


def _parse_base_url(text: str) -> str:
    url = text.strip().rstrip("/")
    scheme, sep, rest = url.partition("://")
    if scheme not in ("http", "https") or not sep or not rest or "/" in rest:
        raise ValueError(f"{text!r} is not http://host:port or https://host:port")
    return url


def _int_between(low: int, high: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError("not an integer") from None
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return parse


_KAFKA_SASL_VARS = ("KAFKA_SASL_MECHANISM", "KAFKA_SASL_USERNAME")
_KAFKA_SSL_VARS = (
    "KAFKA_SSL_CA_FILE",
    "KAFKA_SSL_CERT_FILE",
    "KAFKA_SSL_KEY_FILE",
    "KAFKA_SSL_CHECK_HOSTNAME",
)


def _schema_registry(
    read: Callable[[str, Callable[[str], Any], Any], Any],
    read_secret: Callable[[str], str | None],
) -> SchemaRegistrySettings | None:
    """The registry from ``SERVICE_SCHEMA_REGISTRY_*``; None without its URL."""
    url = read("SERVICE_SCHEMA_REGISTRY_URL", _parse_urls, None)
    user_info = read_secret("SERVICE_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO")
    files = {
        name: read(f"SERVICE_SCHEMA_REGISTRY_SSL_{name.upper()}", _parse_file, None)
        for name in ("ca_location", "certificate_location", "key_location")
    }
    if url is None:
        return None
    return SchemaRegistrySettings(
        url=url,
        basic_auth_user_info=user_info,
        ssl_ca_location=files["ca_location"],
        ssl_certificate_location=files["certificate_location"],
        ssl_key_location=files["key_location"],
    )


def _parse_urls(raw: str) -> str:
    urls = [u.strip() for u in raw.split(",") if u.strip()]
    if not urls or not all(u.startswith(("http://", "https://")) for u in urls):
        raise ValueError("not http(s) URLs")
    return ",".join(urls)


def _kafka_security(
    read: Callable[[str, Callable[[str], Any], Any], Any],
    read_secret: Callable[[str], str | None],
    problems: list[str],
    *,
    embedded: bool,
) -> KafkaSecurity:
    """The Kafka client security from ``KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SASL_*`` and
    ``KAFKA_SSL_*``; every inconsistency is added to ``problems`` (a variable that the
    protocol would ignore is one: a setting silently unused is a surprise in production).
    """
    protocol: str = read("KAFKA_SECURITY_PROTOCOL", _parse_protocol, "PLAINTEXT")
    mechanism: str | None = read("KAFKA_SASL_MECHANISM", _parse_mechanism, None)
    username: str | None = read("KAFKA_SASL_USERNAME", str, None)
    password = read_secret("KAFKA_SASL_PASSWORD")
    # A password from a file is read again at every connection (rotated in place).
    password_file = read("KAFKA_SASL_PASSWORD_FILE", str, None)
    ca_file: str | None = read("KAFKA_SSL_CA_FILE", _parse_file, None)
    cert_file: str | None = read("KAFKA_SSL_CERT_FILE", _parse_file, None)
    key_file: str | None = read("KAFKA_SSL_KEY_FILE", _parse_file, None)
    key_password = read_secret("KAFKA_SSL_KEY_PASSWORD")
    key_password_file = read("KAFKA_SSL_KEY_PASSWORD_FILE", str, None)
    check_hostname: bool = read("KAFKA_SSL_CHECK_HOSTNAME", parse_bool, True)
    security = KafkaSecurity(
        protocol=protocol,
        sasl_mechanism=mechanism,
        sasl_username=username,
        sasl_password=None if password_file else password,
        sasl_password_file=password_file if password is not None else None,
        ssl_ca_file=ca_file,
        ssl_cert_file=cert_file,
        ssl_key_file=key_file,
        ssl_key_password=None if key_password_file else key_password,
        ssl_key_password_file=key_password_file if key_password is not None else None,
        ssl_check_hostname=check_hostname,
    )
    given = {name for name in (*_KAFKA_SASL_VARS, *_KAFKA_SSL_VARS) if read(name, str, None)}
    if password is not None:
        given.add("KAFKA_SASL_PASSWORD")
    if key_password is not None:
        given.add("KAFKA_SSL_KEY_PASSWORD")
    if embedded and protocol != "PLAINTEXT":
        problems.append(
            f"KAFKA_SECURITY_PROTOCOL={protocol}: needs KAFKA_BOOTSTRAP_SERVERS "
            "(the embedded broker speaks PLAINTEXT only)"
        )
    if security.uses_sasl:
        for name, value in (
            ("KAFKA_SASL_MECHANISM", mechanism),
            ("KAFKA_SASL_USERNAME", username),
            ("KAFKA_SASL_PASSWORD", password),
        ):
            if value is None and not any(p.startswith(name) for p in problems):
                problems.append(f"{name}: required with KAFKA_SECURITY_PROTOCOL={protocol}")
    else:
        unused = sorted(given & {*_KAFKA_SASL_VARS, "KAFKA_SASL_PASSWORD"})
        if unused:
            problems.append(
                f"{', '.join(unused)}: only used with KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT "
                f"or SASL_SSL, not {protocol}"
            )
    if security.uses_ssl:
        if (cert_file is None) != (key_file is None):
            problems.append("KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE: set both or neither")
        elif key_password is not None and key_file is None:
            problems.append("KAFKA_SSL_KEY_PASSWORD: only used with KAFKA_SSL_KEY_FILE")
        elif not any(p.startswith(("KAFKA_SSL", "KAFKA_SECURITY")) for p in problems):
            try:
                security.ssl_context()
            except (OSError, ssl.SSLError) as exc:
                # ssl's messages name the failing step (e.g. a wrong key password:
                # "bad decrypt"), never a password.
                problems.append(f"KAFKA_SSL_*: the files do not make a TLS context: {exc}")
    else:
        unused = sorted(given & {*_KAFKA_SSL_VARS, "KAFKA_SSL_KEY_PASSWORD"})
        if unused:
            problems.append(
                f"{', '.join(unused)}: only used with KAFKA_SECURITY_PROTOCOL=SSL or "
                f"SASL_SSL, not {protocol}"
            )
    return security


def _parse_protocol(raw: str) -> str:
    protocol = raw.upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(f"must be one of {', '.join(SECURITY_PROTOCOLS)}")
    return protocol


def _parse_mechanism(raw: str) -> str:
    mechanism = raw.upper()
    if mechanism == "OAUTHBEARER":
        raise ValueError(
            "OAUTHBEARER is not supported (see docs/configuration.md); "
            f"use one of {', '.join(SASL_MECHANISMS)}"
        )
    if mechanism not in SASL_MECHANISMS:
        raise ValueError(f"must be one of {', '.join(SASL_MECHANISMS)}")
    return mechanism


def _parse_file(raw: str) -> str:
    if not os.path.isfile(raw):
        raise ValueError("no such file")
    if not os.access(raw, os.R_OK):
        raise ValueError("not readable")
    return raw


def _parse_bootstrap(raw: str) -> str:
    for server in raw.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"{server.strip()!r} is not host:port")
    return ",".join(s.strip() for s in raw.split(","))


def _parse_modules(raw: str) -> tuple[str, ...]:
    # The loader's own parser, so the service and the loader agree on what is allowed.
    return parse_allowed_modules(raw)


def _parse_topic(raw: str) -> str:
    if not _TOPIC_RE.match(raw) or raw in (".", ".."):
        raise ValueError("not a valid Kafka topic name")
    return raw


def _parse_state_backend(raw: str) -> str:
    value = raw.strip().lower()
    if value not in ("memory", "rocksdb"):
        raise ValueError("expected memory or rocksdb")
    return value


def _parse_directory(raw: str) -> str:
    value = raw.strip()
    if not value:
        raise ValueError("expected a directory")
    return value


def _parse_log_level(raw: str) -> str:
    level = raw.upper()
    if level not in _LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")
    return level


def _parse_instance_id(raw: str) -> str:
    if not re.match(r"^[A-Za-z0-9._-]{1,128}$", raw):
        raise ValueError("1-128 of A-Z a-z 0-9 . _ -")
    return raw
