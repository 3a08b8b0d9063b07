"""What the API answers when something is wrong, through a real server: 422 with every
problem, 401 without the token, 413 over the size limit, 404 and 409; and the probes,
the schema and the OpenAPI document."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.api.server import app_settings, create_topic, running_app, wait_ready

pytestmark = pytest.mark.integration


def spec(name: str, source: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [source]},
        "operator": {"type": "keyed_process", "function": "dedupe", "params": {"ttl_ms": 1000}},
        "sink": {"topic": f"{source}.out"},
    }


async def test_422_lists_every_problem_with_its_path(bootstrap_servers: str) -> None:
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        bad = {
            "name": "Bad Name",
            "source": {"topics": ["in"], "colour": "red"},
            "operator": {
                "type": "window",
                "assigner": {"type": "sliding", "size_ms": 0, "slide_ms": 10},
                "evictor": {"type": "count", "max_count": 3},
                "aggregations": {"total": {"fn": "sum"}},
            },
            "sink": {"topic": "in"},
        }
        response = await client.post("/pipelines", json=bad)
        assert response.status_code == 422
        detail = response.json()["detail"]
        assert sorted((tuple(e["loc"]), e["type"]) for e in detail) == sorted(
            [
                (("body", "name"), "string_pattern_mismatch"),
                (("body", "source", "colour"), "extra_forbidden"),
                (("body", "operator", "assigner", "size_ms"), "greater_than"),
                (("body", "operator", "evictor"), "evictor_needs_elements"),
                (("body", "operator", "aggregations", "total", "field"), "missing"),
                (("body", "sink", "topic"), "sink_is_source"),
            ]
        )
        assert all(isinstance(e["msg"], str) and e["msg"] for e in detail)

        not_json = await client.post(
            "/pipelines", content=b"{nope", headers={"content-type": "application/json"}
        )
        assert not_json.status_code == 422
        assert not_json.json()["detail"][0]["loc"] == ["body"]
        assert (await client.post("/pipelines", json=[1, 2])).status_code == 422


async def test_a_query_parameter_given_twice_or_mistyped_is_a_422(bootstrap_servers: str) -> None:
    """Issue 47: ``GET /history?since_ms=false&since_ms=0.0`` was read as ``since_ms=0``
    and answered 200. Each parameter once, in its schema's form, on every operation
    (service/api/query.py); the well-formed query still answers."""
    source = f"in-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap_servers, source, partitions=1)
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        name = f"q-{uuid.uuid4().hex[:8]}"
        assert (await client.post("/pipelines", json=spec(name, source))).status_code == 201

        def problems(response: httpx.Response) -> list[tuple[tuple[str, ...], str]]:
            assert response.status_code == 422, response.text
            return [(tuple(p["loc"]), p["type"]) for p in response.json()["detail"]]

        for path in ("/history", f"/pipelines/{name}/history"):
            assert problems(await client.get(f"{path}?since_ms=false&since_ms=0.0")) == [
                (("query", "since_ms"), "duplicate_parameter")
            ], path
            assert problems(await client.get(f"{path}?since_ms=0.0")) == [
                (("query", "since_ms"), "int_parsing")
            ], path
            assert (await client.get(f"{path}?since_ms=0")).status_code == 200, path
            assert (await client.get(path)).status_code == 200, path
        status = f"/pipelines/{name}/status"
        assert problems(await client.get(f"{status}?scope=local&scope=pipeline")) == [
            (("query", "scope"), "duplicate_parameter")
        ]
        assert problems(await client.get(f"{status}?scope=everywhere")) == [
            (("query", "scope"), "literal_error")
        ]
        assert (await client.get(f"{status}?scope=local")).json()["scope"] == "local"
        replaced = f"/pipelines/{name}?reset_state=yes"
        assert problems(await client.put(replaced, json=spec(name, source))) == [
            (("query", "reset_state"), "bool_parsing")
        ]
        assert (await client.get(f"/pipelines/{name}?x=1&x=1")).status_code == 422
        assert (await client.get(f"/pipelines/{name}?x=1")).status_code == 200


async def test_token_guards_mutations_and_data_reads(bootstrap_servers: str) -> None:
    source = f"in-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap_servers, source, partitions=1)
    settings = app_settings(bootstrap_servers, api_token="s3cret-token")
    async with (
        running_app(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        name = f"dedupe-{uuid.uuid4().hex[:8]}"
        assert (await client.post("/pipelines", json=spec(name, source))).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert (
            await client.post("/pipelines", json=spec(name, source), headers=wrong)
        ).status_code == 401
        # Unauthenticated garbage is a 401, not a 422 about the garbage.
        assert (await client.post("/pipelines", content=b"{nope")).status_code == 401
        auth = {"Authorization": "Bearer s3cret-token"}
        created = await client.post("/pipelines", json=spec(name, source), headers=auth)
        assert created.status_code == 201, created.text
        # Every data read needs the token: specs, history, the tail (record contents).
        reads = ["/pipelines", f"/pipelines/{name}", f"/pipelines/{name}/history", "/history"]
        for path in [*reads, f"/pipelines/{name}/tail"]:
            for headers in ({}, wrong):
                refused = await client.get(path, headers=headers)
                assert refused.status_code == 401, path
                assert refused.headers["www-authenticate"].startswith("Bearer")
            assert (await client.head(path)).status_code == 401, path
        for path in reads:
            assert (await client.get(path, headers=auth)).status_code == 200, path
        async with client.stream("GET", f"/pipelines/{name}/tail", headers=auth) as tail:
            assert tail.status_code == 200
        # Probes, status, metrics and the schema stay open (dashboards, orchestrators).
        for path in ("/healthz", "/readyz", "/metrics", f"/pipelines/{name}/status"):
            assert (await client.get(path)).status_code == 200, path
        assert (await client.get("/schema/pipeline")).status_code == 200
        assert (await client.get("/ui/")).status_code == 200  # the console asks itself
        assert (await client.post(f"/pipelines/{name}/pause")).status_code == 401
        assert (await client.post(f"/pipelines/{name}/pause", headers=auth)).status_code == 200
        assert (await client.delete(f"/pipelines/{name}")).status_code == 401
        assert (await client.delete(f"/pipelines/{name}", headers=auth)).status_code == 204
        doc = (await client.get("/openapi.json")).json()
        assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
        assert doc["paths"]["/pipelines"]["get"]["security"] == [{"bearer": []}]
        for path in ("/pipelines", "/history", "/pipelines/{name}/history"):
            assert "401" in doc["paths"][path]["get"]["responses"], path
        assert "security" not in doc["paths"]["/pipelines/{name}/status"]["get"]


async def test_reads_stay_open_with_read_open(bootstrap_servers: str) -> None:
    """``SERVICE_API_READ_OPEN=true``: the token guards changes only, as before."""
    source = f"in-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap_servers, source, partitions=1)
    settings = app_settings(bootstrap_servers, api_token="s3cret-token", api_read_open=True)
    async with (
        running_app(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        name = f"open-{uuid.uuid4().hex[:8]}"
        assert (await client.post("/pipelines", json=spec(name, source))).status_code == 401
        auth = {"Authorization": "Bearer s3cret-token"}
        created = await client.post("/pipelines", json=spec(name, source), headers=auth)
        assert created.status_code == 201, created.text
        for path in ("/pipelines", f"/pipelines/{name}", f"/pipelines/{name}/history", "/history"):
            assert (await client.get(path)).status_code == 200, path
        async with client.stream("GET", f"/pipelines/{name}/tail") as tail:
            assert tail.status_code == 200
        assert (await client.delete(f"/pipelines/{name}")).status_code == 401
        assert (await client.delete(f"/pipelines/{name}", headers=auth)).status_code == 204
        doc = (await client.get("/openapi.json")).json()
        assert "security" not in doc["paths"]["/pipelines"]["get"]


async def test_413_over_the_body_limit(bootstrap_servers: str) -> None:
    settings = app_settings(bootstrap_servers, max_body_bytes=2048)
    async with (
        running_app(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        big = spec("big", "in")
        big["operator"]["params"]["padding"] = "x" * 4096
        assert (await client.post("/pipelines", json=big)).status_code == 413

        async def chunked():  # type: ignore[no-untyped-def]
            for _ in range(10):
                yield b" " * 512

        streamed = await client.post(
            "/pipelines", content=chunked(), headers={"content-type": "application/json"}
        )
        assert streamed.status_code == 413
        assert "larger than 2048 bytes" in streamed.json()["detail"]


async def test_404_409_probes_schema_and_docs(bootstrap_servers: str) -> None:
    source = f"in-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap_servers, source, partitions=1)
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        await wait_ready(client)
        ready = (await client.get("/readyz")).json()
        assert ready["checks"] == {"started": True, "broker": True, "pipelines_loaded": True}
        for method, path in [
            ("GET", "/pipelines/nope"),
            ("GET", "/pipelines/nope/status"),
            ("PUT", "/pipelines/nope"),
            ("DELETE", "/pipelines/nope"),
            ("POST", "/pipelines/nope/pause"),
            ("POST", "/pipelines/nope/resume"),
        ]:
            body = spec("nope", source) if method == "PUT" else None
            response = await client.request(method, path, json=body)
            assert response.status_code == 404, (method, path, response.text)

        name = f"p-{uuid.uuid4().hex[:8]}"
        assert (await client.post("/pipelines", json=spec(name, source))).status_code == 201
        assert (await client.post("/pipelines", json=spec(name, source))).status_code == 409
        # The params are part of the operator, so they shape the state: 409 without a reset.
        changed = spec(name, source)
        changed["operator"]["params"]["ttl_ms"] = 2000
        assert (await client.put(f"/pipelines/{name}", json=changed)).status_code == 409
        reset = await client.put(f"/pipelines/{name}?reset_state=true", json=changed)
        assert reset.status_code == 200, reset.text
        assert reset.json()["state_epoch"] == 1
        assert reset.json()["spec"]["operator"]["params"]["ttl_ms"] == 2000
        # A change that keeps the state shape needs no reset.
        same_state = dict(changed, sink={"topic": f"{source}.other"})
        kept = await client.put(f"/pipelines/{name}", json=same_state)
        assert kept.status_code == 200, kept.text
        assert kept.json()["state_epoch"] == 1
        renamed = dict(changed, name="other-name")
        assert (await client.put(f"/pipelines/{name}", json=renamed)).status_code == 422
        assert (await client.delete(f"/pipelines/{name}")).status_code == 204

        schema = (await client.get("/schema/pipeline")).json()
        assert schema["title"] == "PipelineSpec"
        assert "WindowOperator" in schema["$defs"]
        doc = (await client.get("/openapi.json")).json()
        assert "/pipelines/{name}/status" in doc["paths"]
        body = doc["paths"]["/pipelines"]["post"]["requestBody"]["content"]["application/json"]
        assert body["schema"] == {  # a JSON spec, or a SQL script (docs/sql.md)
            "anyOf": [
                {"$ref": "#/components/schemas/PipelineSpec"},
                {"$ref": "#/components/schemas/SqlPipeline"},
            ]
        }
        assert {"PipelineSpec", "SqlPipeline"} <= set(doc["components"]["schemas"])
        assert (await client.get("/docs")).status_code == 200


async def test_a_pipeline_whose_source_topic_does_not_exist_can_be_deleted(
    bootstrap_servers: str,
) -> None:
    """It never ran (it fails at start, and retries), so nothing of it is to reset: the
    delete answers 204, not a 500 from the missing topic."""
    name = f"nosource-{uuid.uuid4().hex[:8]}"
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        created = await client.post("/pipelines", json=spec(name, f"{name}.missing"))
        assert created.status_code == 201, created.text
        assert (await client.delete(f"/pipelines/{name}")).status_code == 204
        assert (await client.get(f"/pipelines/{name}")).status_code == 404
