"""The compaction job's Kafka security: the service's variables as librdkafka and Java
client properties."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.compaction.security import ClientSecurity, SecurityConfigError


def test_plaintext_by_default() -> None:
    security = ClientSecurity.from_env({})
    assert security.librdkafka() == {"security.protocol": "plaintext"}
    assert security.java() == {"security.protocol": "PLAINTEXT"}


def test_sasl_ssl_in_both_clients_names(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    password = tmp_path / "password"
    password.write_text('pa"ss\n')
    security = ClientSecurity.from_env(
        {
            "KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
            "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "KAFKA_SASL_USERNAME": "app",
            "KAFKA_SASL_PASSWORD_FILE": str(password),
            "KAFKA_SSL_CA_FILE": str(ca),
        }
    )
    assert security.librdkafka() == {
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "app",
        "sasl.password": 'pa"ss',
        "ssl.ca.location": str(ca),
        "ssl.endpoint.identification.algorithm": "https",
    }
    assert security.java() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="app" password="pa\\"ss";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca),
        "ssl.endpoint.identification.algorithm": "https",
    }
    assert 'pa"ss' not in repr(security)


def test_mutual_tls_inline_pem_for_java_and_no_hostname_check(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("CERT")
    key.write_text("KEY")
    security = ClientSecurity.from_env(
        {
            "KAFKA_SECURITY_PROTOCOL": "SSL",
            "KAFKA_SSL_CERT_FILE": str(cert),
            "KAFKA_SSL_KEY_FILE": str(key),
            "KAFKA_SSL_KEY_PASSWORD": "kp",
            "KAFKA_SSL_CHECK_HOSTNAME": "false",
        }
    )
    java = security.java()
    assert java["ssl.keystore.type"] == "PEM"
    assert (java["ssl.keystore.certificate.chain"], java["ssl.keystore.key"]) == ("CERT", "KEY")
    assert java["ssl.key.password"] == "kp"
    assert java["ssl.endpoint.identification.algorithm"] == ""
    rdkafka = security.librdkafka()
    assert rdkafka["ssl.certificate.location"] == str(cert)
    assert rdkafka["ssl.endpoint.identification.algorithm"] == "none"


def test_every_problem_named_without_a_secret(tmp_path: Path) -> None:
    with pytest.raises(SecurityConfigError) as info:
        ClientSecurity.from_env(
            {
                "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "KAFKA_SASL_MECHANISM": "GSSAPI",
                "KAFKA_SASL_PASSWORD": "hidden-Secret",
                "KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "nope"),
                "KAFKA_SSL_CERT_FILE": str(tmp_path / "missing.pem"),
            }
        )
    text = str(info.value)
    for part in (
        "KAFKA_SASL_PASSWORD and KAFKA_SASL_PASSWORD_FILE",
        "KAFKA_SASL_MECHANISM='GSSAPI'",
        "KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD: required",
        "KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE",
        "KAFKA_SSL_CERT_FILE=",
    ):
        assert part in text, part
    assert "hidden-Secret" not in text
