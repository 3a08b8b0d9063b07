"""Security failures against the SASL_SSL broker (StandardAuthorizer on): the service
starts, ``/readyz`` says why it is not ready, the service's log names the cause once,
nothing crashes, no secret shows, and it recovers by itself once the cause is fixed
(a password file or CA file fixed in place, a user created, an ACL added)."""

from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.runtime.kafka.clients import KafkaCluster
from tests.api.server import eventually, running_app
from tests.integration.kafka_utils import create_topic, json_record, produce, read_json
from tests.integration.secure_kafka import (
    APP_PASSWORD,
    APP_USER,
    LIMITED_PASSWORD,
    LIMITED_USER,
    SECRETS,
    SERVICE_ACLS,
    TOKEN,
    Pki,
    admin_cluster,
    allow,
    create_scram_user,
    pipeline_acls,
    service_settings,
    spec,
)
from tests.kafka.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

AUTH = {"Authorization": f"Bearer {TOKEN}"}
WRONG_PASSWORD = "wrong-Secret-0a9f"


def env_for(pki: Pki, user: str, password_file: Path, ca_file: Path) -> dict[str, str]:
    return {
        "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        "KAFKA_SASL_USERNAME": user,
        "KAFKA_SASL_PASSWORD_FILE": str(password_file),
        "KAFKA_SSL_CA_FILE": str(ca_file),
    }


def service_lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    """The service's own log lines (not aiokafka's) that contain ``text``."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("service.") and text in r.getMessage()
    ]


def aiokafka_refusals(caplog: pytest.LogCaptureFixture) -> int:
    return sum(1 for r in caplog.records if r.getMessage().startswith("Unable connect to"))


@pytest.mark.parametrize("fault", ["wrong_password", "untrusted_ca", "unknown_user"])
async def test_a_refused_connection_is_not_ready_with_its_reason_and_recovers(
    fault: str,
    sasl_ssl_kafka: KafkaBroker,
    kafka_pki: Pki,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    user, password = APP_USER, APP_PASSWORD
    if fault == "unknown_user":
        user, password = f"ghost-{uuid.uuid4().hex[:8]}", f"ghost-Secret-{uuid.uuid4().hex}"
        # A user the documented ACLs are granted to before it exists.
        allow(sasl_ssl_kafka, kafka_pki, f"User:{user}", *SERVICE_ACLS)
    password_file = tmp_path / "password"
    password_file.write_text(WRONG_PASSWORD if fault == "wrong_password" else password)
    ca_file = tmp_path / "ca.pem"
    shutil.copy(kafka_pki.other_ca if fault == "untrusted_ca" else kafka_pki.ca, ca_file)
    expected = {
        "wrong_password": f"SASL authentication failed for user '{user}'",
        "unknown_user": f"SASL authentication failed for user '{user}'",
        "untrusted_ca": "TLS: the broker's certificate is not trusted",
    }[fault]
    settings = service_settings(sasl_ssl_kafka, env_for(kafka_pki, user, password_file, ca_file))
    async with (
        running_app(settings, timeout_s=60) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        # Started (it answers), not ready, and it says why.
        assert (await client.get("/healthz")).status_code == 200

        async def refused() -> dict[str, Any] | None:
            ready = await client.get("/readyz")
            body: dict[str, Any] = ready.json()
            return body if ready.status_code == 503 and expected in body.get("reason", "") else None

        not_ready = await eventually(refused, timeout_s=30)
        assert not_ready["checks"]["broker"] is False
        # Retried several times meanwhile (aiokafka logs every attempt): still one line
        # per part of the service that met it.
        await eventually(lambda: aiokafka_refusals(caplog) >= 4, timeout_s=30)
        named = service_lines(caplog, expected)
        assert len(named) == 2, named  # the health check's and the store's, once each
        assert not [r for r in caplog.records if r.name.startswith("service.") and r.exc_info]

        # Fixed in place: the next attempt works and the service becomes ready.
        if fault == "wrong_password":
            password_file.write_text(password)
        elif fault == "untrusted_ca":
            shutil.copy(kafka_pki.ca, ca_file)
        else:
            create_scram_user(sasl_ssl_kafka, kafka_pki, user, password)

        async def ready() -> bool:
            return (await client.get("/readyz")).status_code == 200

        await eventually(ready, timeout_s=60)
        assert (await client.get("/pipelines", headers=AUTH)).status_code == 200
        texts = [(await client.get(p)).text for p in ("/readyz", "/metrics")]
    everything = "\n".join([*texts, caplog.text, str(not_ready)])
    for secret in (*SECRETS, WRONG_PASSWORD, password, TOKEN):
        assert secret not in everything


async def test_a_pipeline_without_its_acls_fails_naming_them_and_runs_once_granted(
    sasl_ssl_kafka: KafkaBroker,
    kafka_pki: Pki,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    principal = f"User:{LIMITED_USER}"
    allow(sasl_ssl_kafka, kafka_pki, principal, *SERVICE_ACLS)
    name = f"acl-{uuid.uuid4().hex[:8]}"
    source = f"{name}.in"
    admin = admin_cluster(sasl_ssl_kafka, kafka_pki)
    await create_topic(admin, source, 1)
    password_file = tmp_path / "password"
    password_file.write_text(LIMITED_PASSWORD)
    env = env_for(kafka_pki, LIMITED_USER, password_file, kafka_pki.ca)
    settings = service_settings(sasl_ssl_kafka, env)
    async with (
        running_app(settings, timeout_s=60) as url,
        httpx.AsyncClient(base_url=url, timeout=30, headers=AUTH) as client,
    ):
        # The service's own ACLs are enough to be ready (the store, the health check).
        await eventually(lambda: _status_code(client, "/readyz", 200), timeout_s=60)
        created = await client.post("/pipelines", json=spec(name, source, "exactly_once"))
        assert created.status_code == 201, created.text

        async def failed() -> dict[str, Any] | None:
            status: dict[str, Any] = (await client.get(f"/pipelines/{name}/status")).json()
            return status if status["state"] == "failed" else None

        status = await eventually(failed, timeout_s=60)
        needed = (
            f"kafka-acls --add --allow-principal {principal} --operation Describe "
            f"--operation Read --topic {source}"
        )
        assert needed in status["reason"], status
        assert (await client.get("/readyz")).status_code == 200  # the service is fine

        allow(sasl_ssl_kafka, kafka_pki, principal, *pipeline_acls(source, f"{name}.out"))

        async def running() -> bool:
            state = (await client.get(f"/pipelines/{name}/status")).json()["state"]
            return bool(state == "running")

        await eventually(running, timeout_s=90)
        limited = KafkaCluster(sasl_ssl_kafka.bootstrap_servers, settings.kafka_security)
        await produce(admin, source, [json_record(0, "u1", {"ts": t}) for t in (1000, 2500)])

        async def results() -> list[dict[str, Any]]:
            return await read_json(limited, f"{name}.out", isolation_level="read_committed")

        (window,) = await eventually(results, timeout_s=60)
        assert window["result"] == {"n": 1}
        # The reason was logged once, not at every restart.
        assert len(service_lines(caplog, needed)) == 1
        status_text = (await client.get(f"/pipelines/{name}/status")).text
    for secret in (*SECRETS, TOKEN):
        assert secret not in caplog.text + status_text


async def _status_code(client: httpx.AsyncClient, path: str, code: int) -> bool:
    return (await client.get(path)).status_code == code


async def test_without_a_client_certificate_mtls_is_not_ready_and_says_so(
    mtls_kafka: KafkaBroker, kafka_pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker requires a client certificate and none is configured: not ready, the
    reason points at the certificate, no crash."""
    caplog.set_level(logging.DEBUG)
    env = {"KAFKA_SECURITY_PROTOCOL": "SSL", "KAFKA_SSL_CA_FILE": str(kafka_pki.ca)}
    settings = service_settings(mtls_kafka, env)
    async with (
        running_app(settings, timeout_s=60) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):

        async def refused() -> dict[str, Any] | None:
            ready = await client.get("/readyz")
            body: dict[str, Any] = ready.json()
            return body if ready.status_code == 503 and body.get("reason") else None

        not_ready = await eventually(refused, timeout_s=30)
        assert "KAFKA_SSL_CERT_FILE" in not_ready["reason"], not_ready
        assert (await client.get("/healthz")).status_code == 200
