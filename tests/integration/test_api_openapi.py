"""What the OpenAPI document promises and the HTTP layer keeps, through a real server:
``Allow`` on 405, links from a created pipeline, the replacement body, JSON numbers."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.api.server import app_settings, create_topic, running_app, wait_ready

pytestmark = pytest.mark.integration

TOKEN = "openapi-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def client(bootstrap_servers: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = app_settings(bootstrap_servers, api_token=TOKEN)
    async with (
        running_app(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        yield client


def spec(name: str, source: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [source]},
        "operator": {"type": "keyed_process", "function": "dedupe", "params": {"ttl_ms": 1000}},
        "sink": {"topic": f"{source}.out"},
    }


async def test_405_allow_lists_every_method_of_the_path(client: httpx.AsyncClient) -> None:
    for path, methods in [
        ("/pipelines/some-name", {"GET", "PUT", "DELETE"}),
        ("/pipelines", {"GET", "POST"}),
        ("/pipelines/some-name/pause", {"POST"}),
    ]:
        response = await client.request("PATCH", path)
        assert response.status_code == 405, path
        assert set(response.headers["allow"].split(", ")) == methods, path


async def test_a_method_no_route_serves_is_405_without_the_token(
    client: httpx.AsyncClient,
) -> None:
    assert (await client.patch("/pipelines/some-name")).status_code == 405
    assert (await client.post("/pipelines/some-name")).status_code == 405
    assert (await client.delete("/pipelines/some-name")).status_code == 401


async def test_links_lead_from_a_created_pipeline_to_its_operations(
    client: httpx.AsyncClient,
) -> None:
    doc = (await client.get("/openapi.json")).json()
    created = doc["paths"]["/pipelines"]["post"]["responses"]["201"]["links"]
    operations = {
        op["operationId"]: (path, method)
        for path, item in doc["paths"].items()
        for method, op in item.items()
    }
    targets = {operations[link["operationId"]] for link in created.values()}
    assert targets >= {
        ("/pipelines/{name}", "get"),
        ("/pipelines/{name}", "put"),
        ("/pipelines/{name}", "delete"),
        ("/pipelines/{name}/pause", "post"),
        ("/pipelines/{name}/resume", "post"),
        ("/pipelines/{name}/status", "get"),
    }
    assert all(link["parameters"] == {"name": "$response.body#/name"} for link in created.values())


async def test_a_replacement_body_may_leave_the_name_out(
    client: httpx.AsyncClient, bootstrap_servers: str
) -> None:
    doc = (await client.get("/openapi.json")).json()
    put = doc["paths"]["/pipelines/{name}"]["put"]["requestBody"]["content"]["application/json"]
    assert put["schema"] == {  # a JSON spec, or a SQL script (docs/sql.md)
        "anyOf": [
            {"$ref": "#/components/schemas/PipelineReplacement"},
            {"$ref": "#/components/schemas/SqlReplacement"},
        ]
    }
    assert "name" not in doc["components"]["schemas"]["PipelineReplacement"]["required"]
    assert doc["components"]["schemas"]["SqlReplacement"]["required"] == ["sql"]

    source = f"in-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap_servers, source, partitions=1)
    name = f"p-{uuid.uuid4().hex[:8]}"
    assert (
        await client.post("/pipelines", json=spec(name, source), headers=AUTH)
    ).status_code == 201
    unnamed = spec(name, source)
    del unnamed["name"]
    replaced = await client.put(f"/pipelines/{name}", json=unnamed, headers=AUTH)
    assert replaced.status_code == 200, replaced.text
    assert (await client.delete(f"/pipelines/{name}", headers=AUTH)).status_code == 204


async def test_an_integer_may_be_written_with_a_fraction(
    client: httpx.AsyncClient, bootstrap_servers: str
) -> None:
    source = f"in-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap_servers, source, partitions=1)
    body = spec(f"p-{uuid.uuid4().hex[:8]}", source)
    body["operator"]["params"]["ttl_ms"] = 1000.0
    created = await client.post("/pipelines", json=body, headers=AUTH)
    assert created.status_code == 201, created.text
    assert created.json()["spec"]["operator"]["params"]["ttl_ms"] == 1000
    await client.delete(f"/pipelines/{body['name']}", headers=AUTH)


async def test_nan_and_infinity_are_not_json(client: httpx.AsyncClient) -> None:
    for text in (b'{"name": NaN}', b'{"name": 1e400}'):
        response = await client.post(
            "/pipelines", content=text, headers={**AUTH, "content-type": "application/json"}
        )
        assert response.status_code == 422
        assert response.json()["detail"][0]["type"] == "json_invalid"


async def test_a_name_no_pipeline_can_have_is_refused_in_the_path(
    client: httpx.AsyncClient,
) -> None:
    # A data read: without the token it is a 401 before the name is even looked at.
    assert (await client.get("/pipelines/Bad%20Name")).status_code == 401
    response = await client.get("/pipelines/Bad%20Name", headers=AUTH)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["path", "name"]
