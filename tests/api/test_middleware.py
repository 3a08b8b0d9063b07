"""The bearer-token and body-size middlewares on a minimal ASGI app (the real server is
exercised in tests/integration/test_api_errors.py)."""

from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from service.api.app import create_app
from service.api.middleware import (
    DATA_READS,
    BearerTokenMiddleware,
    BodySizeLimitMiddleware,
    is_data_read,
    methods_served,
)
from service.settings import Settings


async def echo(request: Request) -> JSONResponse:
    body = await request.body()
    return JSONResponse({"size": len(body)})


def app(token: str | None = None, limit: int = 100) -> Starlette:
    inner = Starlette(routes=[Route("/", echo, methods=["GET", "POST", "PUT", "DELETE"])])
    wrapped = BodySizeLimitMiddleware(inner, max_bytes=limit)
    return BearerTokenMiddleware(wrapped, token) if token else wrapped  # type: ignore[return-value]


def client(asgi: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://t")  # type: ignore[arg-type]


async def test_mutations_need_the_token_reads_do_not() -> None:
    async with client(app(token="s3cret")) as c:
        assert (await c.get("/")).status_code == 200
        for method in ("POST", "PUT", "DELETE"):
            response = await c.request(method, "/")
            assert response.status_code == 401
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert response.json() == {"detail": "missing or wrong bearer token"}
        assert (await c.post("/", headers={"Authorization": "Bearer wrong"})).status_code == 401
        assert (await c.post("/", headers={"Authorization": "s3cret"})).status_code == 401
        ok = await c.post("/", headers={"Authorization": "Bearer s3cret"}, content=b"x")
        assert ok.status_code == 200


async def test_declared_length_over_the_limit_is_refused_before_reading() -> None:
    async with client(app(limit=10)) as c:
        response = await c.post("/", content=b"x" * 11)
        assert response.status_code == 413
        assert (await c.post("/", content=b"x" * 10)).json() == {"size": 10}


async def test_streamed_body_is_counted() -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(5):
            yield b"x" * 5

    async with client(app(limit=10)) as c:
        response = await c.post("/", content=chunks())
        assert response.status_code == 413


def test_every_data_read_is_a_get_route_of_the_app() -> None:
    """A renamed route must not fall out of the token's cover unnoticed, and every GET
    under /pipelines but the status (progress, no records) is covered."""
    app = create_app(Settings(kafka_bootstrap_servers="k:9092", api_token="t"))

    def served(path: str) -> list[str]:
        scope = {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": []}
        return methods_served(app.routes, scope, mounts=False)

    for template in DATA_READS:
        path = template.replace("{name}", "p-1")
        assert "GET" in served(path), template
        assert is_data_read(path)
    for path in ("/pipelines/p-1/status", "/pipelines/p-1/x", "/metrics", "/readyz", "/ui/"):
        assert not is_data_read(path), path
    assert "GET" in served("/pipelines/p-1/status")
