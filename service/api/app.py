"""The FastAPI application: :func:`create_app` and the lifespan that runs everything.

Start order (the lifespan): the embedded broker when ``KAFKA_BOOTSTRAP_SERVERS`` is
unset, the runtime (broker health check), the pipeline store follower (which starts the
stored pipelines through the registry). Stop order is the reverse: stop following the
store, stop every pipeline gracefully (checkpoint, commit, leave the group), stop the
broker. All of it shares uvicorn's event loop: one process, one loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse

from service.api.middleware import BearerTokenMiddleware, BodySizeLimitMiddleware
from service.api.registry import (
    PipelineExists,
    PipelineNotFound,
    PipelineRegistry,
    SpecInvalid,
    StateIncompatible,
)
from service.api.routes import health, metrics, pipelines, schema
from service.api.routes.deps import Services
from service.api.spec import PipelineSpec
from service.api.store import PipelineStore, StoredPipeline, StoreError, StoreTimeout
from service.runtime.embedded_broker import EmbeddedBroker
from service.runtime.manager import Runtime
from service.runtime.settings import RuntimeSettings
from service.settings import Settings

__all__ = ["create_app", "runtime_settings"]

logger = logging.getLogger(__name__)

_DESCRIPTION = """Event-time stream processing on Kafka with Apache Flink's semantics.

Configure pipelines with `POST /pipelines` (the spec's JSON Schema is at
`GET /schema/pipeline`). When `SERVICE_API_TOKEN` is set, every POST, PUT and DELETE needs
`Authorization: Bearer <token>`.
"""


def runtime_settings(
    settings: Settings, bootstrap_servers: str, *, embedded_broker: bool = False
) -> RuntimeSettings:
    """The runtime's part of the service configuration."""
    return RuntimeSettings(
        bootstrap_servers=bootstrap_servers,
        checkpoint_interval_ms=settings.checkpoint_interval_ms,
        fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
        session_timeout_ms=settings.session_timeout_ms(embedded_broker),
        prefetch_max_records=settings.prefetch_max_records,
        replication_factor=settings.topic_replication,
    )


def create_app(settings: Settings, runtime: Runtime | None = None) -> FastAPI:
    """The service as an ASGI app; its lifespan starts and stops everything.

    ``runtime``: run pipelines in this runtime (its lifecycle stays with the caller);
    default: the app creates, starts and shuts down its own.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            app.state.services = await _start(settings, runtime, stack)
            try:
                yield
            finally:
                app.state.services = None
                logger.info("shutting down: stopping the store follower and every pipeline")

    app = FastAPI(
        title="Clockwork",
        version="0.1.0",
        description=_DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.services = None
    app.include_router(pipelines.router)
    app.include_router(schema.router)
    app.include_router(health.router)
    app.include_router(metrics.router)
    _add_error_handlers(app)
    # Added last = outermost: the token is checked before the body is even counted.
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    if settings.api_token:
        app.add_middleware(BearerTokenMiddleware, token=settings.api_token)
    app.openapi = lambda: _openapi(app, settings)  # type: ignore[method-assign]
    return app


async def _start(settings: Settings, runtime: Runtime | None, stack: AsyncExitStack) -> Services:
    bootstrap = settings.kafka_bootstrap_servers
    embedded = bootstrap is None
    if bootstrap is None:
        broker = await asyncio.to_thread(EmbeddedBroker().start)
        stack.push_async_callback(asyncio.to_thread, broker.stop)
        bootstrap = broker.bootstrap_servers
        logger.warning(
            "KAFKA_BOOTSTRAP_SERVERS is unset: started an embedded Kafka-compatible broker "
            "(Tansu) at %s; its data lives in memory and is lost when the service stops",
            bootstrap,
        )
    if runtime is None:
        runtime = Runtime(runtime_settings(settings, bootstrap, embedded_broker=embedded))
        await runtime.start()
        stack.push_async_callback(runtime.shutdown)
    registry: PipelineRegistry | None = None

    async def on_change(name: str, old: StoredPipeline | None, new: StoredPipeline | None) -> None:
        if registry is not None:
            await registry.on_change(name, old, new)

    store = PipelineStore(
        bootstrap,
        settings.pipelines_topic,
        instance_id=settings.instance_id,
        on_change=on_change,
        replication_factor=settings.topic_replication,
        fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
    )
    registry = PipelineRegistry(store, runtime, settings)
    await store.start()
    stack.push_async_callback(store.stop)
    logger.info(
        "clockwork %s serving; pipelines from %r on %s",
        settings.instance_id,
        settings.pipelines_topic,
        bootstrap,
    )
    return Services(settings, bootstrap, runtime, store, registry)


def _add_error_handlers(app: FastAPI) -> None:
    def detail(status: int, message: str) -> JSONResponse:
        return JSONResponse({"detail": message}, status_code=status)

    async def spec_invalid(_: Request, exc: Exception) -> JSONResponse:
        if not isinstance(exc, SpecInvalid):  # registered for this type only
            raise exc
        errors = [{**e, "loc": ["body", *e["loc"]]} for e in exc.errors]
        return JSONResponse({"detail": errors}, status_code=422)

    async def not_found(_: Request, exc: Exception) -> JSONResponse:
        return detail(404, str(exc.args[0]) if exc.args else "not found")

    async def conflict(_: Request, exc: Exception) -> JSONResponse:
        return detail(409, str(exc.args[0]) if exc.args else "conflict")

    async def store_timeout(_: Request, exc: Exception) -> JSONResponse:
        return detail(504, str(exc))

    async def store_error(_: Request, exc: Exception) -> JSONResponse:
        return detail(503, str(exc))

    app.add_exception_handler(SpecInvalid, spec_invalid)
    app.add_exception_handler(PipelineNotFound, not_found)
    app.add_exception_handler(PipelineExists, conflict)
    app.add_exception_handler(StateIncompatible, conflict)
    app.add_exception_handler(StoreTimeout, store_timeout)
    app.add_exception_handler(StoreError, store_error)


def _openapi(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """FastAPI's document plus the spec's schema (bodies are validated by hand) and the
    bearer scheme on mutating operations when a token is configured."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    spec_schema = PipelineSpec.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(spec_schema.pop("$defs", {}))
    schemas["PipelineSpec"] = spec_schema
    if settings.api_token:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        for path in doc.get("paths", {}).values():
            for method, operation in path.items():
                if method.upper() in ("POST", "PUT", "PATCH", "DELETE"):
                    operation["security"] = [{"bearer": []}]
    app.openapi_schema = doc
    return doc
