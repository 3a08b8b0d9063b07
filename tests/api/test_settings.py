"""Configuration from environment variables: defaults, parsing, every bad value at once."""

from __future__ import annotations

import dataclasses
import ssl
import tempfile
from pathlib import Path

import pytest

from service.api.app import runtime_settings
from service.runtime.security import PLAINTEXT, KafkaSecurity
from service.settings import (
    DEFAULT_SESSION_TIMEOUT_MS,
    EMBEDDED_SESSION_TIMEOUT_MS,
    Settings,
    SettingsError,
)
from tests.integration.secure_kafka import KEY_PASSWORD, Pki, make_pki


def test_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.kafka_bootstrap_servers is None
    assert settings.http_host == "0.0.0.0"
    assert settings.http_port == 8000
    assert settings.api_token is None
    assert settings.udf_modules == ()
    assert settings.max_body_bytes == 1024 * 1024
    assert settings.pipelines_topic == "clockwork.pipelines"
    assert settings.log_level == "INFO"
    assert settings.instance_id


def test_the_settings_need_no_writable_temporary_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The image runs read-only: the rocksdb stores' default directory is found only when
    a store opens, never while the settings are read."""

    def no_temporary_directory() -> str:
        raise FileNotFoundError("No usable temporary directory found")

    monkeypatch.setattr(tempfile, "gettempdir", no_temporary_directory)
    assert Settings.from_env({}).state_dir == ""
    assert Settings.from_env({"SERVICE_STATE_DIR": "/data/state"}).state_dir == "/data/state"


def test_values_are_parsed() -> None:
    settings = Settings.from_env(
        {
            "KAFKA_BOOTSTRAP_SERVERS": "k1:9092, k2:9092",
            "SERVICE_HTTP_PORT": "9000",
            "SERVICE_API_TOKEN": "s3cret",
            "SERVICE_UDF_MODULES": "examples, acme.udf",
            "SERVICE_MAX_BODY_BYTES": "2048",
            "SERVICE_LOG_LEVEL": "debug",
            "SERVICE_INSTANCE_ID": "replica-1",
        }
    )
    assert settings.kafka_bootstrap_servers == "k1:9092,k2:9092"
    assert settings.http_port == 9000
    assert settings.api_token == "s3cret"
    assert settings.udf_modules == ("examples", "acme.udf")
    assert settings.max_body_bytes == 2048
    assert settings.log_level == "DEBUG"
    assert settings.instance_id == "replica-1"


def test_the_session_timeout_defaults_short_only_for_the_embedded_broker() -> None:
    settings = Settings.from_env({})
    assert settings.kafka_session_timeout_ms is None
    assert settings.session_timeout_ms(embedded_broker=True) == EMBEDDED_SESSION_TIMEOUT_MS
    assert settings.session_timeout_ms(embedded_broker=False) == DEFAULT_SESSION_TIMEOUT_MS
    assert EMBEDDED_SESSION_TIMEOUT_MS < DEFAULT_SESSION_TIMEOUT_MS


def test_a_configured_session_timeout_holds_for_any_broker() -> None:
    settings = Settings.from_env({"KAFKA_SESSION_TIMEOUT_MS": "7000"})
    assert settings.session_timeout_ms(embedded_broker=True) == 7000
    assert settings.session_timeout_ms(embedded_broker=False) == 7000


def test_the_runtime_gets_the_session_timeout_for_its_broker() -> None:
    settings = Settings.from_env({})
    embedded = runtime_settings(settings, "127.0.0.1:9092", embedded_broker=True)
    configured = runtime_settings(settings, "kafka:9092")
    assert embedded.session_timeout_ms == EMBEDDED_SESSION_TIMEOUT_MS
    assert configured.session_timeout_ms == DEFAULT_SESSION_TIMEOUT_MS


def test_the_prefetch_size_reaches_the_runtime() -> None:
    assert runtime_settings(Settings.from_env({}), "k:9092").prefetch_max_records == 250_000
    off = Settings.from_env({"SERVICE_PREFETCH_MAX_RECORDS": "0"})
    assert runtime_settings(off, "k:9092").prefetch_max_records == 0
    with pytest.raises(SettingsError, match="SERVICE_PREFETCH_MAX_RECORDS"):
        Settings.from_env({"SERVICE_PREFETCH_MAX_RECORDS": "-1"})


def test_the_standby_replicas_and_the_member_name_reach_the_runtime() -> None:
    default = runtime_settings(Settings.from_env({"SERVICE_INSTANCE_ID": "r-1"}), "k:9092")
    assert (default.standby_replicas, default.member) == (0, "r-1")
    two = Settings.from_env({"SERVICE_STANDBY_REPLICAS": "2"})
    assert runtime_settings(two, "k:9092").standby_replicas == 2
    with pytest.raises(SettingsError, match="SERVICE_STANDBY_REPLICAS"):
        Settings.from_env({"SERVICE_STANDBY_REPLICAS": "9"})


def test_blank_means_default() -> None:
    assert Settings.from_env({"SERVICE_HTTP_PORT": " ", "SERVICE_API_TOKEN": ""}).api_token is None


def test_every_invalid_variable_is_named_at_once() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env(
            {
                "SERVICE_HTTP_PORT": "eighty",
                "SERVICE_MAX_BODY_BYTES": "0",
                "SERVICE_LOG_LEVEL": "LOUD",
                "KAFKA_BOOTSTRAP_SERVERS": "nohost",
                "SERVICE_UDF_MODULES": "ok, not a module",
            }
        )
    names = [p.split("=")[0] for p in info.value.problems]
    assert names == [
        "KAFKA_BOOTSTRAP_SERVERS",
        "SERVICE_HTTP_PORT",
        "SERVICE_UDF_MODULES",
        "SERVICE_MAX_BODY_BYTES",
        "SERVICE_LOG_LEVEL",
    ]


def test_frozen_and_token_masked() -> None:
    settings = Settings.from_env({"SERVICE_API_TOKEN": "s3cret"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.http_port = 1  # type: ignore[misc]
    assert settings.describe()["api_token"] == "***"
    assert "s3cret" not in repr(settings.describe())


def test_every_field_is_documented() -> None:
    doc = Path("docs/configuration.md").read_text(encoding="utf-8")
    source = Path("service/settings.py").read_text(encoding="utf-8")
    for field in dataclasses.fields(Settings):
        # The env var name is the first ``NAME`` in the field's docstring.
        after = source.split(f"    {field.name}:", 1)[1]
        env = after.split("``", 2)[1]
        assert f"`{env}`" in doc, env


# -- Kafka security, the API's reads and HTTPS -----------------------------------------

SASL = {
    "KAFKA_BOOTSTRAP_SERVERS": "k:9093",
    "KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
    "KAFKA_SASL_MECHANISM": "scram-sha-512",
    "KAFKA_SASL_USERNAME": "app",
    "KAFKA_SASL_PASSWORD": "pw-Secret-1",
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def problems(env: dict[str, str]) -> list[str]:
    with pytest.raises(SettingsError) as info:
        Settings.from_env(env)
    return info.value.problems


def test_plaintext_by_default() -> None:
    assert Settings.from_env({}).kafka_security == PLAINTEXT
    assert runtime_settings(Settings.from_env({}), "k:9092").security == PLAINTEXT


def test_sasl_ssl_is_parsed_and_reaches_the_runtime(pki: Pki) -> None:
    settings = Settings.from_env({**SASL, "KAFKA_SSL_CA_FILE": str(pki.ca)})
    security = settings.kafka_security
    assert security == KafkaSecurity(
        "SASL_SSL", "SCRAM-SHA-512", "app", "pw-Secret-1", ssl_ca_file=str(pki.ca)
    )
    assert runtime_settings(settings, "k:9093").security == security
    kwargs = security.client_kwargs()
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert kwargs["sasl_plain_password"] == "pw-Secret-1"
    assert kwargs["ssl_context"].check_hostname
    assert kwargs["ssl_context"].verify_mode == ssl.CERT_REQUIRED


def test_hostname_verification_can_be_turned_off(pki: Pki) -> None:
    env = {**SASL, "KAFKA_SSL_CA_FILE": str(pki.ca), "KAFKA_SSL_CHECK_HOSTNAME": "false"}
    security = Settings.from_env(env).kafka_security
    assert not security.ssl_check_hostname
    assert not security.client_kwargs()["ssl_context"].check_hostname


def test_mutual_tls_with_an_encrypted_key_and_its_password_from_a_file(
    pki: Pki, tmp_path: Path
) -> None:
    password = tmp_path / "key-password"
    password.write_text(KEY_PASSWORD + "\n")  # as a mounted secret often ends
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": "k:9093",
        "KAFKA_SECURITY_PROTOCOL": "SSL",
        "KAFKA_SSL_CA_FILE": str(pki.ca),
        "KAFKA_SSL_CERT_FILE": str(pki.client_cert),
        "KAFKA_SSL_KEY_FILE": str(pki.client_key),
        "KAFKA_SSL_KEY_PASSWORD_FILE": str(password),
    }
    security = Settings.from_env(env).kafka_security
    assert security.ssl_key_password is None
    assert security.ssl_key_password_file == str(password)
    assert "sasl_mechanism" not in security.client_kwargs()
    security.ssl_context()  # the key decrypts with the file's password
    password.write_text("not it")
    with pytest.raises(ssl.SSLError):
        security.ssl_context()  # read again at every connection


def test_the_sasl_password_from_a_file_is_read_at_every_connection(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("first\n")
    env = {**SASL, "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}
    del env["KAFKA_SASL_PASSWORD"]
    security = Settings.from_env({**env, "KAFKA_SASL_PASSWORD_FILE": str(password)}).kafka_security
    assert security.client_kwargs()["sasl_plain_password"] == "first"
    password.write_text("rotated")
    assert security.client_kwargs()["sasl_plain_password"] == "rotated"


def test_the_token_from_a_file(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    assert Settings.from_env({"SERVICE_API_TOKEN_FILE": str(token)}).api_token == "t0ken"


def test_every_security_problem_is_named_at_once(pki: Pki, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("")
    found = problems(
        {
            "KAFKA_SECURITY_PROTOCOL": "TLS",
            "KAFKA_SASL_MECHANISM": "OAUTHBEARER",
            "KAFKA_SSL_CA_FILE": str(tmp_path / "missing.pem"),
            "KAFKA_SSL_CHECK_HOSTNAME": "maybe",
            "SERVICE_API_READ_OPEN": "perhaps",
            "SERVICE_HTTP_TLS_CERT_FILE": str(pki.admin_cert),
            "SERVICE_API_TOKEN_FILE": str(empty),
        }
    )
    text = "\n".join(found)
    for name in (
        "KAFKA_SECURITY_PROTOCOL='TLS'",
        "KAFKA_SASL_MECHANISM='OAUTHBEARER': OAUTHBEARER is not supported",
        "KAFKA_SSL_CA_FILE=",
        "KAFKA_SSL_CHECK_HOSTNAME='maybe'",
        "SERVICE_API_READ_OPEN='perhaps'",
        "SERVICE_HTTP_TLS_CERT_FILE and SERVICE_HTTP_TLS_KEY_FILE: set both or neither",
        "SERVICE_API_TOKEN_FILE=",
    ):
        assert name in text, name


def test_sasl_needs_its_mechanism_user_and_password() -> None:
    found = problems({"KAFKA_BOOTSTRAP_SERVERS": "k:9093", "KAFKA_SECURITY_PROTOCOL": "SASL_SSL"})
    assert [p.split(":")[0] for p in found] == [
        "KAFKA_SASL_MECHANISM",
        "KAFKA_SASL_USERNAME",
        "KAFKA_SASL_PASSWORD",
    ]


def test_a_value_and_its_file_are_exclusive(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("from-file")
    found = problems({**SASL, "KAFKA_SASL_PASSWORD_FILE": str(password)})
    assert "KAFKA_SASL_PASSWORD and KAFKA_SASL_PASSWORD_FILE: set one, not both" in found


def test_settings_the_protocol_would_ignore_are_refused(pki: Pki) -> None:
    ssl_with_sasl_vars = problems(
        {
            "KAFKA_BOOTSTRAP_SERVERS": "k:9093",
            "KAFKA_SECURITY_PROTOCOL": "SSL",
            "KAFKA_SASL_USERNAME": "app",
            "KAFKA_SASL_PASSWORD": "pw-Secret-1",
        }
    )
    assert any("only used with KAFKA_SECURITY_PROTOCOL=SASL" in p for p in ssl_with_sasl_vars)
    plain_with_ca = problems({**SASL, "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                              "KAFKA_SSL_CA_FILE": str(pki.ca)})  # fmt: skip
    assert any(p.startswith("KAFKA_SSL_CA_FILE: only used") for p in plain_with_ca)


def test_a_certificate_needs_its_key_and_the_files_must_load(pki: Pki) -> None:
    base = {"KAFKA_BOOTSTRAP_SERVERS": "k:9093", "KAFKA_SECURITY_PROTOCOL": "SSL"}
    alone = problems({**base, "KAFKA_SSL_CERT_FILE": str(pki.client_cert)})
    assert "KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE: set both or neither" in alone
    mismatched = problems(
        {
            **base,
            "KAFKA_SSL_CERT_FILE": str(pki.client_cert),
            "KAFKA_SSL_KEY_FILE": str(pki.admin_key),  # another certificate's key
        }
    )
    assert any("do not make a TLS context" in p for p in mismatched)
    no_password = problems(
        {
            **base,
            "KAFKA_SSL_CERT_FILE": str(pki.client_cert),
            "KAFKA_SSL_KEY_FILE": str(pki.client_key),
        }
    )
    assert any("do not make a TLS context" in p for p in no_password)
    not_a_ca = problems({**base, "KAFKA_SSL_CA_FILE": str(pki.directory / "ca.key")})
    assert any("do not make a TLS context" in p for p in not_a_ca)


def test_security_needs_a_configured_broker() -> None:
    found = problems({"KAFKA_SECURITY_PROTOCOL": "SSL"})
    assert found == [
        "KAFKA_SECURITY_PROTOCOL=SSL: needs KAFKA_BOOTSTRAP_SERVERS "
        "(the embedded broker speaks PLAINTEXT only)"
    ]


def test_no_secret_in_repr_describe_or_problems(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {**SASL, "KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "SERVICE_API_TOKEN": "tok-Secret"}
    )
    shown = repr(settings) + str(settings.describe())
    assert "pw-Secret-1" not in shown and "tok-Secret" not in shown
    assert settings.describe()["kafka_security"]["sasl_password"] == "***"
    password = tmp_path / "password"
    password.write_text("file-Secret-2")
    found = problems(
        {**SASL, "KAFKA_SASL_MECHANISM": "GSSAPI", "KAFKA_SASL_PASSWORD_FILE": str(password)}
    )
    assert found
    assert "pw-Secret-1" not in str(found) and "file-Secret-2" not in str(found)


def test_reads_open_and_https_files(pki: Pki) -> None:
    settings = Settings.from_env(
        {
            "SERVICE_API_READ_OPEN": "true",
            "SERVICE_HTTP_TLS_CERT_FILE": str(pki.admin_cert),
            "SERVICE_HTTP_TLS_KEY_FILE": str(pki.admin_key),
        }
    )
    assert settings.api_read_open
    assert settings.http_tls_cert_file == str(pki.admin_cert)
    assert not Settings.from_env({}).api_read_open


# -- the schema registry -----------------------------------------------------------------


def test_the_schema_registry_is_configured_as_confluents_clients_name_it() -> None:
    assert Settings.from_env({}).schema_registry is None
    settings = Settings.from_env(
        {
            "SERVICE_SCHEMA_REGISTRY_URL": "http://a:8081, https://b:8081",
            "SERVICE_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": "me:s3cret",
        }
    )
    registry = settings.schema_registry
    assert registry is not None
    assert registry.client_config() == {
        "url": "http://a:8081,https://b:8081",
        "timeout": 5.0,
        "max.retries": 0,
        "basic.auth.user.info": "me:s3cret",
    }
    assert "s3cret" not in repr(settings.describe())
    with pytest.raises(SettingsError, match="SERVICE_SCHEMA_REGISTRY_URL"):
        Settings.from_env({"SERVICE_SCHEMA_REGISTRY_URL": "a:8081"})
