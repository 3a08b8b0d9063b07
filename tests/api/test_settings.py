"""Configuration from environment variables: defaults, parsing, every bad value at once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from service.api.app import runtime_settings
from service.settings import (
    DEFAULT_SESSION_TIMEOUT_MS,
    EMBEDDED_SESSION_TIMEOUT_MS,
    Settings,
    SettingsError,
)


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
