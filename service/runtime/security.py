"""How the service authenticates to Kafka and encrypts its connections: one frozen value.

:class:`KafkaSecurity` holds what ``KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SASL_*`` and
``KAFKA_SSL_*`` say (parsed and checked by :mod:`service.settings`) and turns it into
the keyword arguments of aiokafka's clients (:meth:`KafkaSecurity.client_kwargs`). Every
client the service opens is made by :class:`~service.runtime.kafka.clients.KafkaCluster`,
which passes these, so none can connect without them. A root module of the runtime
(stdlib only): :class:`~service.runtime.settings.RuntimeSettings` carries one. What the
variables may say (protocols, mechanisms, which protocols use TLS or SASL) is
:mod:`service.contract.kafka_security`, which the compaction job reads too.

Secrets (the SASL password, the private key's password) are kept out of ``repr`` and
:meth:`KafkaSecurity.describe`, so the start-up log line, a status or an error message
that prints the settings cannot show them.

The TLS context is built anew for every client (from the files, at that moment): a CA
or certificate replaced on disk (a renewed certificate, a fixed trust store) is used by
the next connection without a restart.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any

from service.contract.kafka_security import SASL_PROTOCOLS, TLS_PROTOCOLS, read_secret_file

__all__ = ["PLAINTEXT", "KafkaSecurity"]


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """The security settings of every Kafka client; the default is ``PLAINTEXT``."""

    protocol: str = "PLAINTEXT"
    """``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
    sasl_mechanism: str | None = None
    """``sasl.mechanism`` (SASL_* protocols only): PLAIN, SCRAM-SHA-256, SCRAM-SHA-512."""
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_password_file: str | None = None
    """Read the password from this file at every connection instead (a mounted secret
    that is rotated or fixed in place is used without a restart)."""
    ssl_ca_file: str | None = None
    """PEM bundle of the CAs to trust; None: the system's trust store."""
    ssl_cert_file: str | None = None
    """PEM client certificate (chain) for mutual TLS; with :attr:`ssl_key_file`."""
    ssl_key_file: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    ssl_key_password_file: str | None = None
    ssl_check_hostname: bool = True
    """Verify that the broker's certificate names the host connected to."""

    @property
    def uses_ssl(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    @property
    def principal(self) -> str:
        """The Kafka principal the broker sees, for ACL advice: ``User:<name>`` with
        SASL, the client certificate's subject with mutual TLS, else ANONYMOUS."""
        if self.uses_sasl:
            return f"User:{self.sasl_username}"
        if self.uses_ssl and self.ssl_cert_file is not None:
            return '"User:<subject of KAFKA_SSL_CERT_FILE, e.g. CN=clockwork>"'
        return "User:ANONYMOUS"

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context from the files as they are now: the CA file (or the
        system's trust store), the client certificate and key for mutual TLS, hostname
        verification unless turned off. Raises ``OSError``/``ssl.SSLError`` for a missing
        or unreadable file (never with a password in the message: Python's are fixed)."""
        context = ssl.create_default_context(cafile=self.ssl_ca_file)
        context.check_hostname = self.ssl_check_hostname
        if self.ssl_cert_file is not None:
            password = secret_from(self.ssl_key_password, self.ssl_key_password_file)
            context.load_cert_chain(self.ssl_cert_file, self.ssl_key_file, password=password)
        return context

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``AIOKafkaConsumer``/``Producer``/``AdminClient``."""
        kwargs: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_ssl:
            kwargs["ssl_context"] = self.ssl_context()
        if self.uses_sasl:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = secret_from(self.sasl_password, self.sasl_password_file)
        return kwargs

    def describe(self) -> dict[str, Any]:
        """The settings for logs and the start-up line: secrets only as set or not."""
        out: dict[str, Any] = {"protocol": self.protocol}
        if self.uses_sasl:
            out["sasl_mechanism"] = self.sasl_mechanism
            out["sasl_username"] = self.sasl_username
            out["sasl_password"] = "***" if self.sasl_password else None
            out["sasl_password_file"] = self.sasl_password_file
        if self.uses_ssl:
            out["ssl_ca_file"] = self.ssl_ca_file
            out["ssl_cert_file"] = self.ssl_cert_file
            out["ssl_key_file"] = self.ssl_key_file
            out["ssl_key_password"] = "***" if self.ssl_key_password else None
            out["ssl_key_password_file"] = self.ssl_key_password_file
            out["ssl_check_hostname"] = self.ssl_check_hostname
        return out


PLAINTEXT = KafkaSecurity()


def secret_from(value: str | None, path: str | None) -> str | None:
    """``value``, or the file's content now when ``path`` is set."""
    return read_secret_file(path) if path is not None else value
