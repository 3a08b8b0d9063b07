"""The REST API serving HTTPS itself (SERVICE_HTTP_TLS_CERT_FILE/KEY_FILE through
uvicorn), for deployments without a TLS-terminating ingress."""

from __future__ import annotations

import asyncio
import ssl

import httpx
import pytest
import uvicorn

from service.__main__ import server_config
from service.api.app import create_app
from tests.api.server import app_settings, eventually
from tests.integration.secure_kafka import Pki

pytestmark = pytest.mark.integration


async def test_the_api_serves_https_with_the_configured_certificate(
    bootstrap_servers: str, kafka_pki: Pki
) -> None:
    settings = app_settings(
        bootstrap_servers,
        http_tls_cert_file=str(kafka_pki.directory / "broker.crt"),
        http_tls_key_file=str(kafka_pki.directory / "broker.key"),
    )
    server = uvicorn.Server(server_config(settings, create_app(settings)))
    task = asyncio.create_task(server.serve())
    try:
        await eventually(lambda: server.started or task.done())
        assert not task.done()
        trusted = ssl.create_default_context(cafile=str(kafka_pki.ca))
        host = f"{settings.http_host}:{settings.http_port}"
        async with httpx.AsyncClient(verify=trusted, timeout=10) as client:
            response = await client.get(f"https://{host}/healthz")
            assert response.status_code == 200
            assert response.json() == {"status": "ok"}
        async with httpx.AsyncClient(timeout=10) as client:
            with pytest.raises(httpx.TransportError):
                await client.get(f"http://{host}/healthz")
        untrusted = ssl.create_default_context(cafile=str(kafka_pki.other_ca))
        async with httpx.AsyncClient(verify=untrusted, timeout=10) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(f"https://{host}/healthz")
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
