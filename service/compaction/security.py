"""The compaction job's Kafka security, from the service's variables.

The job reads ``KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SASL_*`` and ``KAFKA_SSL_*`` as the
service does (docs/configuration.md) and turns them into the two clients' properties:
librdkafka's (the driver's plan and the Python data source) and the Java client's
(Spark's Kafka source, ``kafka.``-prefixed options). It stands alone like the rest of
the job (no import of the runtime or the API): what the variables may say (protocols,
mechanisms, which protocol uses TLS or SASL, a boolean, a secret file) is
:mod:`service.contract.kafka_security`, which the service reads too; the checks here
are the service's in short: a protocol that uses TLS or SASL gets exactly its
variables, with the secrets from ``..._FILE`` when set (read once: a run is short).

The secrets end up in the Spark options of the read (the executors need them):
:data:`REDACTED_OPTIONS` is added to Spark's redaction patterns by
:func:`~service.compaction.cli.build_session`, so plans and the UI show them redacted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from service.compaction.errors import CompactionError
from service.contract.kafka_security import (
    SASL_MECHANISMS,
    SASL_PROTOCOLS,
    SECURITY_PROTOCOLS,
    TLS_PROTOCOLS,
    parse_bool,
    read_secret_file,
)

__all__ = ["REDACTED_OPTIONS", "ClientSecurity", "SecurityConfigError"]

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
REDACTED_OPTIONS = r"sasl[.]jaas[.]config|sasl[.]password|ssl[.]keystore[.]key|ssl[.]key[.]password"
"""Option names whose values are secrets (Spark's default patterns catch ``password``
but not a JAAS line or a PEM key)."""


class SecurityConfigError(CompactionError):
    """The security variables are inconsistent; the message names each problem."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """TLS and SASL for the job's Kafka clients; the default is PLAINTEXT."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca_file: str | None = None
    ssl_cert_file: str | None = None
    ssl_key_file: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ClientSecurity:
        """The security the variables say; :class:`SecurityConfigError` with every
        problem (never a secret's value)."""
        problems: list[str] = []

        def get(name: str) -> str | None:
            value = environ.get(name, "").strip()
            return value or None

        def secret(name: str) -> str | None:
            value, path = environ.get(name, "").strip(), get(f"{name}_FILE")
            if value and path:
                problems.append(f"{name} and {name}_FILE: set one, not both")
            if path is None:
                return value or None
            try:
                return read_secret_file(path) or None
            except (OSError, UnicodeDecodeError) as exc:
                problems.append(f"{name}_FILE={path!r}: cannot read it ({type(exc).__name__})")
                return None

        protocol = (get("KAFKA_SECURITY_PROTOCOL") or "PLAINTEXT").upper()
        if protocol not in SECURITY_PROTOCOLS:
            problems.append(
                f"KAFKA_SECURITY_PROTOCOL={protocol!r}: one of {', '.join(SECURITY_PROTOCOLS)}"
            )
            protocol = "PLAINTEXT"
        mechanism = get("KAFKA_SASL_MECHANISM")
        mechanism = mechanism.upper() if mechanism else None
        hostname = (get("KAFKA_SSL_CHECK_HOSTNAME") or "true").lower()
        try:
            check_hostname = parse_bool(hostname)
        except ValueError as exc:
            problems.append(f"KAFKA_SSL_CHECK_HOSTNAME={hostname!r}: {exc}")
            check_hostname = False
        security = cls(
            protocol=protocol,
            sasl_mechanism=mechanism,
            sasl_username=get("KAFKA_SASL_USERNAME"),
            sasl_password=secret("KAFKA_SASL_PASSWORD"),
            ssl_ca_file=get("KAFKA_SSL_CA_FILE"),
            ssl_cert_file=get("KAFKA_SSL_CERT_FILE"),
            ssl_key_file=get("KAFKA_SSL_KEY_FILE"),
            ssl_key_password=secret("KAFKA_SSL_KEY_PASSWORD"),
            ssl_check_hostname=check_hostname,
        )
        if security.uses_sasl:
            if mechanism not in SASL_MECHANISMS:
                problems.append(
                    f"KAFKA_SASL_MECHANISM={mechanism!r}: one of {', '.join(SASL_MECHANISMS)}"
                )
            if security.sasl_username is None or security.sasl_password is None:
                problems.append(
                    f"KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD: required with {protocol}"
                )
        if security.uses_ssl and (security.ssl_cert_file is None) != (
            security.ssl_key_file is None
        ):
            problems.append("KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE: set both or neither")
        for name in ("KAFKA_SSL_CA_FILE", "KAFKA_SSL_CERT_FILE", "KAFKA_SSL_KEY_FILE"):
            path = get(name)
            if path is not None and security.uses_ssl and not Path(path).is_file():
                problems.append(f"{name}={path!r}: no such file")
        if problems:
            raise SecurityConfigError("invalid Kafka security settings: " + "; ".join(problems))
        return security

    def librdkafka(self) -> dict[str, str]:
        """librdkafka (confluent-kafka) properties."""
        config = {"security.protocol": self.protocol.lower()}
        if self.uses_sasl:
            config["sasl.mechanism"] = str(self.sasl_mechanism)
            config["sasl.username"] = str(self.sasl_username)
            config["sasl.password"] = str(self.sasl_password)
        if self.uses_ssl:
            if self.ssl_ca_file is not None:
                config["ssl.ca.location"] = self.ssl_ca_file
            if self.ssl_cert_file is not None and self.ssl_key_file is not None:
                config["ssl.certificate.location"] = self.ssl_cert_file
                config["ssl.key.location"] = self.ssl_key_file
                if self.ssl_key_password is not None:
                    config["ssl.key.password"] = self.ssl_key_password
            config["ssl.endpoint.identification.algorithm"] = (
                "https" if self.ssl_check_hostname else "none"
            )
        return config

    def java(self) -> dict[str, str]:
        """Java Kafka client properties (for Spark's Kafka source, without ``kafka.``).
        PEM files as Kafka's PEM key stores take them: the CA file as the trust store,
        the client certificate chain and key inline."""
        config = {"security.protocol": self.protocol}
        if self.uses_sasl:
            mechanism = str(self.sasl_mechanism)
            config["sasl.mechanism"] = mechanism
            config["sasl.jaas.config"] = (
                f"{LOGIN_MODULES[mechanism]} required "
                f"username={json.dumps(self.sasl_username)} "
                f"password={json.dumps(self.sasl_password)};"
            )
        if self.uses_ssl:
            if self.ssl_ca_file is not None:
                config["ssl.truststore.type"] = "PEM"
                config["ssl.truststore.location"] = self.ssl_ca_file
            if self.ssl_cert_file is not None and self.ssl_key_file is not None:
                config["ssl.keystore.type"] = "PEM"
                config["ssl.keystore.certificate.chain"] = Path(self.ssl_cert_file).read_text()
                config["ssl.keystore.key"] = Path(self.ssl_key_file).read_text()
                if self.ssl_key_password is not None:
                    config["ssl.key.password"] = self.ssl_key_password
            config["ssl.endpoint.identification.algorithm"] = (
                "https" if self.ssl_check_hostname else ""
            )
        return config
