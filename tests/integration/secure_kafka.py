"""Apache Kafka with security on, for the tests: certificates made on the fly, a
SASL_SSL broker (SCRAM users, StandardAuthorizer) and an mTLS one, and the Admin API
calls aiokafka lacks (SCRAM users, ACLs) through ``tests/kafka/AdminTool.java``.

The certificates are made with ``openssl`` in a temporary directory: one CA, the
broker's certificate (for 127.0.0.1 and localhost, usable as server and client), the
client certificates for mutual TLS (``CN=clockwork``, its key encrypted; ``CN=admin``),
and a second CA nobody's certificate comes from (an untrusted CA). Keys are EC P-256
(quick to make), PKCS#8 PEM, which Python's ``ssl`` and Kafka's PEM key stores read.
"""

from __future__ import annotations

import os
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.runtime.kafka.clients import KafkaCluster
from service.runtime.security import KafkaSecurity
from service.settings import Settings
from tests.kafka.kafka_broker import KafkaBroker, java_binary, read_classpath

ADMIN_USER = "admin"
ADMIN_PASSWORD = "admin-Secret-7f3a"
"""The broker's own SCRAM user (inter-broker) and the tests' super user."""

APP_USER = "clockwork"
APP_PASSWORD = "app-Secret-91c2e5"
"""The service's user: created at format time, super user (the end-to-end tests)."""

LIMITED_USER = "limited"
LIMITED_PASSWORD = "limited-Secret-4d0b"
"""A user with no ACLs at first (the missing-ACL test grants them)."""

KEY_PASSWORD = "key-Secret-e21a"
"""The password of the mTLS client's encrypted key."""

SECRETS = (ADMIN_PASSWORD, APP_PASSWORD, LIMITED_PASSWORD, KEY_PASSWORD)
"""Every secret the tests configure: none may appear in a log, status or metric."""

ADMIN_TOOL = Path(__file__).resolve().parents[1] / "kafka" / "AdminTool.java"


@dataclass(frozen=True)
class Pki:
    """The files :func:`make_pki` wrote."""

    directory: Path
    ca: Path
    other_ca: Path
    broker_pem: Path
    """The broker's key and certificate chain in one PEM file (Kafka's PEM key store)."""
    client_cert: Path
    client_key: Path
    """Encrypted with :data:`KEY_PASSWORD`."""
    admin_cert: Path
    admin_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _key(name: str, cwd: Path) -> None:
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
        "-out", f"{name}.key", cwd=cwd,
    )  # fmt: skip


def _ca(name: str, cwd: Path) -> None:
    _key(name, cwd)
    _openssl(
        "req", "-x509", "-new", "-key", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
        "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=cwd,
    )  # fmt: skip


def _signed(name: str, cn: str, extensions: str, cwd: Path) -> None:
    _key(name, cwd)
    _openssl(
        "req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=cwd
    )
    (cwd / f"{name}.ext").write_text(
        extensions + "\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n"
    )
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
        cwd=cwd,
    )  # fmt: skip


def make_pki(directory: Path) -> Pki:
    """A CA, the broker's and the clients' certificates, and an unrelated CA."""
    directory.mkdir(parents=True, exist_ok=True)
    _ca("ca", directory)
    _ca("other-ca", directory)
    _signed(
        "broker",
        "broker",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth",
        directory,
    )
    (directory / "broker.pem").write_text(
        (directory / "broker.key").read_text() + (directory / "broker.crt").read_text()
    )
    _signed("client", "clockwork", "extendedKeyUsage=clientAuth", directory)
    _openssl(
        "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", "client.key", "-out", "client.enc.key",
        "-passout", f"pass:{KEY_PASSWORD}",
        cwd=directory,
    )  # fmt: skip
    _signed("admin", "admin", "extendedKeyUsage=clientAuth", directory)
    return Pki(
        directory=directory,
        ca=directory / "ca.pem",
        other_ca=directory / "other-ca.pem",
        broker_pem=directory / "broker.pem",
        client_cert=directory / "client.crt",
        client_key=directory / "client.enc.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
    )


def _tls_settings(pki: Pki) -> dict[str, str]:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.broker_pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
    }


def _probe_context(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
    return context


def sasl_ssl_broker(pki: Pki) -> KafkaBroker:
    """A broker (not started) with one SASL_SSL listener (SCRAM-SHA-256 and -512), the
    StandardAuthorizer on, :data:`ADMIN_USER` and :data:`APP_USER` super users, and
    :data:`LIMITED_USER` without ACLs. The controller listener stays PLAINTEXT on
    loopback, so its principal (ANONYMOUS) is a super user too, as KRaft needs."""
    jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required "
    jaas += f'username="{ADMIN_USER}" password="{ADMIN_PASSWORD}";'
    return KafkaBroker(
        protocol="SASL_SSL",
        scram_users={
            ADMIN_USER: ADMIN_PASSWORD,
            APP_USER: APP_PASSWORD,
            LIMITED_USER: LIMITED_PASSWORD,
        },
        probe_ssl_context=_probe_context(pki),
        settings={
            **_tls_settings(pki),
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": jaas,
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{ADMIN_USER};User:{APP_USER};User:ANONYMOUS",
        },
    )


def mtls_broker(pki: Pki) -> KafkaBroker:
    """A broker (not started) with one SSL listener that requires a client certificate
    signed by the CA (no authorizer: the certificate is the authentication)."""
    return KafkaBroker(
        protocol="SSL",
        probe_ssl_context=_probe_context(pki),
        settings={**_tls_settings(pki), "ssl.client.auth": "required"},
    )


def scram_security(
    pki: Pki, user: str = APP_USER, password: str = APP_PASSWORD, ca: Path | None = None
) -> KafkaSecurity:
    return KafkaSecurity(
        protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username=user,
        sasl_password=password,
        ssl_ca_file=str(ca or pki.ca),
    )


def mtls_security(pki: Pki) -> KafkaSecurity:
    return KafkaSecurity(
        protocol="SSL",
        ssl_ca_file=str(pki.ca),
        ssl_cert_file=str(pki.client_cert),
        ssl_key_file=str(pki.client_key),
        ssl_key_password=KEY_PASSWORD,
    )


def scram_env(pki: Pki, password_file: Path) -> dict[str, str]:
    """The service's environment for :func:`scram_security`, the password from a file."""
    password_file.write_text(APP_PASSWORD + "\n")
    return {
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "KAFKA_SASL_USERNAME": APP_USER,
        "KAFKA_SASL_PASSWORD_FILE": str(password_file),
        "KAFKA_SSL_CA_FILE": str(pki.ca),
    }


def admin_cluster(broker: KafkaBroker, pki: Pki) -> KafkaCluster:
    """The tests' super user on the SASL_SSL broker."""
    return KafkaCluster(broker.bootstrap_servers, scram_security(pki, ADMIN_USER, ADMIN_PASSWORD))


def _admin_tool(broker: KafkaBroker, pki: Pki, *args: str) -> None:
    properties = pki.directory / "admin.properties"
    jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required "
    jaas += f'username="{ADMIN_USER}" password="{ADMIN_PASSWORD}";'
    properties.write_text(
        f"bootstrap.servers={broker.bootstrap_servers}\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        f"sasl.jaas.config={jaas}\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={pki.ca}\n"
    )
    done = subprocess.run(
        [
            java_binary(),
            "-Xmx128m",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            read_classpath(),
            str(ADMIN_TOOL),
            str(properties),
            *args,
        ],
        check=False,
        capture_output=True,
        timeout=120,
        env={**os.environ, "KAFKA_LOG4J_OPTS": ""},
    )
    if done.returncode != 0:
        raise RuntimeError(f"AdminTool {args[:1]} failed: {done.stderr.decode()[-3000:]}")


def create_scram_user(broker: KafkaBroker, pki: Pki, user: str, password: str) -> None:
    """Create ``user`` (or set its password) for both SCRAM mechanisms."""
    _admin_tool(broker, pki, "scram", user, password)


def allow(broker: KafkaBroker, pki: Pki, principal: str, *acls: tuple[str, str, str, str]) -> None:
    """ALLOW ACLs ``(resource type, name, pattern type, operation)`` for ``principal``."""
    _admin_tool(broker, pki, "allow", principal, *(part for acl in acls for part in acl))


Acl = tuple[str, str, str, str]
"""``(resource type, name, pattern type, operation)``, as ``allow`` takes them."""

SERVICE_ACLS: tuple[Acl, ...] = (
    *(
        ("topic", "clockwork.", "prefixed", op)
        for op in ("Create", "Describe", "Read", "Write", "Alter", "Delete")
    ),
    *(("group", "clockwork.", "prefixed", op) for op in ("Read", "Describe")),
    *(("transactional_id", "clockwork.", "prefixed", op) for op in ("Write", "Describe")),
)
"""The service's own ACLs, as docs/operations.md lists them (its topics, groups and
transactional ids)."""


def pipeline_acls(source: str, output_prefix: str) -> tuple[Acl, ...]:
    """A pipeline's ACLs as docs/operations.md lists them: read its source, create,
    write and read (the tail) its outputs, which start with ``output_prefix``."""
    return (
        ("topic", source, "literal", "Describe"),
        ("topic", source, "literal", "Read"),
        *(
            ("topic", output_prefix, "prefixed", op)
            for op in ("Create", "Describe", "Write", "Read")
        ),
    )


TOKEN = "api-Token-5b7c"


def spec(name: str, source: str, delivery: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [source], "start_from": "earliest"},
        "timestamp": {"field": "ts", "format": "epoch_millis"},
        "watermark": {
            "strategy": "bounded_out_of_orderness",
            "max_out_of_orderness_ms": 0,
            "interval_ms": 0,
        },
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 1000},
            "aggregations": {"n": {"fn": "count"}},
        },
        "sink": {"topic": f"{name}.out"},
        "delivery": delivery,
    }


def service_settings(broker: KafkaBroker, env: dict[str, str]) -> Settings:
    """The suite's app settings with the security read from ``env``, as in a deployment."""
    from tests.api.server import app_settings  # the app's test helpers: only here

    security = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers, **env})
    return app_settings(
        broker.bootstrap_servers, kafka_security=security.kafka_security, api_token=TOKEN
    )
