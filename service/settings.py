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
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from service.operators.udf import parse_allowed_modules

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

    api_token: str | None = None
    """``SERVICE_API_TOKEN``: when set, every POST, PUT and DELETE needs
    ``Authorization: Bearer <token>`` (401 otherwise). Reads stay open."""

    udf_modules: tuple[str, ...] = ()
    """``SERVICE_UDF_MODULES``: comma-separated module prefixes user functions
    (``package.module:Name``) may be loaded from. Empty: only built-ins."""

    max_body_bytes: int = 1024 * 1024
    """``SERVICE_MAX_BODY_BYTES``: request bodies larger than this get 413."""

    pipelines_topic: str = "clockwork.pipelines"
    """``SERVICE_PIPELINES_TOPIC``: the compacted topic holding the pipeline specs;
    created (1 partition, ``cleanup.policy=compact``) when missing."""

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

        values: dict[str, Any] = {
            "kafka_bootstrap_servers": read("KAFKA_BOOTSTRAP_SERVERS", _parse_bootstrap, None),
            "http_host": read("SERVICE_HTTP_HOST", str, "0.0.0.0"),
            "http_port": read("SERVICE_HTTP_PORT", _int_between(1, 65535), 8000),
            "api_token": read("SERVICE_API_TOKEN", str, None),
            "udf_modules": read("SERVICE_UDF_MODULES", _parse_modules, _NO_MODULES),
            "max_body_bytes": read(
                "SERVICE_MAX_BODY_BYTES", _int_between(1024, 1 << 30), 1024 * 1024
            ),
            "pipelines_topic": read("SERVICE_PIPELINES_TOPIC", _parse_topic, "clockwork.pipelines"),
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
        }
        instance_id = read("SERVICE_INSTANCE_ID", _parse_instance_id, None)
        if instance_id is not None:
            values["instance_id"] = instance_id
        if problems:
            raise SettingsError(problems)
        return cls(**values)

    def describe(self) -> dict[str, Any]:
        """The settings for the start-up log line, with the token masked."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.api_token is not None:
            out["api_token"] = "***"
        return out

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


def _parse_log_level(raw: str) -> str:
    level = raw.upper()
    if level not in _LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")
    return level


def _parse_instance_id(raw: str) -> str:
    if not re.match(r"^[A-Za-z0-9._-]{1,128}$", raw):
        raise ValueError("1-128 of A-Z a-z 0-9 . _ -")
    return raw
