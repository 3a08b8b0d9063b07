"""The service against Apache Kafka with security on: SASL_SSL (SCRAM, with the
StandardAuthorizer) and mutual TLS. One broker of each kind per session
(``tests/conftest.py``), certificates made by the test (``secure_kafka.py``).

A pipeline (exactly-once on SASL_SSL: transactional producers and the transactions
probe too), the pipeline store, the tail and the status all work through the
configured security, from the variables as a deployment sets them (secrets from
files), and no secret appears in a log line, a status, ``/metrics`` or the API.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.runtime.kafka.clients import KafkaCluster
from service.settings import Settings
from tests.api.server import eventually, running_app, wait_ready
from tests.integration.kafka_utils import create_topic, json_record, produce, read_json
from tests.integration.secure_kafka import (
    APP_PASSWORD,
    KEY_PASSWORD,
    SECRETS,
    TOKEN,
    Pki,
    mtls_security,
    scram_env,
    scram_security,
    service_settings,
    spec,
)
from tests.kafka.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def first_tail_record(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    """The first record the live tail of ``name`` streams."""
    async with client.stream("GET", f"/pipelines/{name}/tail") as response:
        assert response.status_code == 200
        kind = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind == "records":
                records = json.loads(line.removeprefix("data: "))["records"]
                if records:
                    first: dict[str, Any] = records[0]
                    return first
    raise AssertionError("the tail ended without a record")


async def run_a_pipeline(settings: Settings, cluster: KafkaCluster, delivery: str) -> list[str]:
    """Create a pipeline through the API, feed it, read its results and its tail; the
    texts the service showed (status, metrics, the pipeline) for the secret check."""
    name = f"secure-{uuid.uuid4().hex[:8]}"
    source = f"{name}.in"
    await create_topic(cluster, source, 1)
    shown: list[str] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        running_app(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30, headers=headers) as client,
    ):
        await wait_ready(client, timeout_s=60)
        created = await client.post("/pipelines", json=spec(name, source, delivery))
        assert created.status_code == 201, created.text
        await produce(
            cluster,
            source,
            [json_record(0, "u1", {"ts": ts}) for ts in (1000, 1500, 2500)],
        )

        async def results() -> list[dict[str, Any]]:
            found = await read_json(cluster, f"{name}.out", isolation_level="read_committed")
            return [r for r in found if r["window"]["start"] == 1000]

        (window,) = await eventually(results, timeout_s=60)
        assert window["result"] == {"n": 2}
        tailed = await eventually(lambda: first_tail_record(client, name), timeout_s=30)
        assert tailed["topic"] == f"{name}.out"
        status = await client.get(f"/pipelines/{name}/status")
        assert status.json()["state"] == "running", status.text
        for path in (f"/pipelines/{name}/status", "/metrics", f"/pipelines/{name}", "/readyz"):
            shown.append((await client.get(path)).text)
    return shown


def assert_no_secret(texts: list[str], caplog: pytest.LogCaptureFixture) -> None:
    everything = "\n".join([*texts, caplog.text])
    assert caplog.text  # the capture works: something was logged
    for secret in (*SECRETS, TOKEN):
        assert secret not in everything


async def test_a_pipeline_store_and_tail_work_over_sasl_ssl(
    sasl_ssl_kafka: KafkaBroker,
    kafka_pki: Pki,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    settings = service_settings(sasl_ssl_kafka, scram_env(kafka_pki, tmp_path / "password"))
    # The password is read from its file at every connection, not kept.
    assert settings.kafka_security.sasl_password is None
    kept = replace(settings.kafka_security, sasl_password_file=None, sasl_password=APP_PASSWORD)
    assert kept == scram_security(kafka_pki)
    cluster = KafkaCluster(sasl_ssl_kafka.bootstrap_servers, scram_security(kafka_pki))
    shown = await run_a_pipeline(settings, cluster, "exactly_once")
    shown.append(repr(settings))
    shown.append(str(settings.describe()))
    assert_no_secret(shown, caplog)


async def test_a_pipeline_works_over_mutual_tls(
    mtls_kafka: KafkaBroker,
    kafka_pki: Pki,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    password_file = tmp_path / "key-password"
    password_file.write_text(KEY_PASSWORD)
    env = {
        "KAFKA_SECURITY_PROTOCOL": "SSL",
        "KAFKA_SSL_CA_FILE": str(kafka_pki.ca),
        "KAFKA_SSL_CERT_FILE": str(kafka_pki.client_cert),
        "KAFKA_SSL_KEY_FILE": str(kafka_pki.client_key),
        "KAFKA_SSL_KEY_PASSWORD_FILE": str(password_file),
    }
    settings = service_settings(mtls_kafka, env)
    kept = replace(
        settings.kafka_security, ssl_key_password_file=None, ssl_key_password=KEY_PASSWORD
    )
    assert kept == mtls_security(kafka_pki)
    cluster = KafkaCluster(mtls_kafka.bootstrap_servers, mtls_security(kafka_pki))
    shown = await run_a_pipeline(settings, cluster, "at_least_once")
    assert_no_secret([*shown, repr(settings), str(settings.describe())], caplog)
