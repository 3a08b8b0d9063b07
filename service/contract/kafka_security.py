"""The Kafka security variables, as the service and the compaction job both read them.

``KAFKA_SECURITY_PROTOCOL``, ``KAFKA_SASL_*`` and ``KAFKA_SSL_*`` (docs/configuration.md):
the protocols and mechanisms they may name, which protocols use TLS and which SASL, how a
boolean is written and how a secret file is read. The service
(:mod:`service.settings`, :class:`~service.runtime.security.KafkaSecurity`) and the
compaction job (:class:`~service.compaction.security.ClientSecurity`) each report
problems in their own words; what they accept is this.
"""

from __future__ import annotations

__all__ = [
    "SASL_MECHANISMS",
    "SASL_PROTOCOLS",
    "SECURITY_PROTOCOLS",
    "TLS_PROTOCOLS",
    "parse_bool",
    "read_secret_file",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""``KAFKA_SECURITY_PROTOCOL``'s values (upper case; the variable may be either)."""
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
"""The protocols that use TLS, and so the ``KAFKA_SSL_*`` variables."""
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
"""The protocols that use SASL, and so the ``KAFKA_SASL_*`` variables."""
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""``KAFKA_SASL_MECHANISM``'s values. OAUTHBEARER is not offered: aiokafka needs a token
provider object (there is no built-in OIDC client-credentials flow), see
docs/configuration.md."""

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def parse_bool(raw: str) -> bool:
    """A boolean variable (``KAFKA_SSL_CHECK_HOSTNAME``, and every other of the
    service's): true, 1, yes or false, 0, no, in any case; ``ValueError`` else."""
    value = raw.lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError("must be true or false")


def read_secret_file(path: str) -> str:
    """A secret from a file as container secrets are mounted: one trailing newline
    dropped. Raises ``OSError``/``UnicodeDecodeError``; the message has no content."""
    with open(path, encoding="utf-8") as file:
        return file.read().removesuffix("\n").removesuffix("\r")
