"""The FastAPI application: :func:`create_app` and the lifespan that runs everything.

Start order (the lifespan): the embedded broker when ``KAFKA_BOOTSTRAP_SERVERS`` is
unset, the runtime (broker health check), the pipeline store follower (which starts the
stored pipelines through the registry), the history and the member board (this
replica's reports for the whole-pipeline view). Stop order is the reverse: say goodbye
on the member board, stop following the store, stop every pipeline gracefully
(checkpoint, commit, leave the group), stop the broker. All of it shares uvicorn's
event loop: one process, one loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import Depends, FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.api.local_pipelines import LocalPipelines
from service.api.members import MemberBoard
from service.api.middleware import (
    DATA_READS,
    MUTATING_METHODS,
    BearerTokenMiddleware,
    BodySizeLimitMiddleware,
    methods_served,
    openapi_template,
)
from service.api.query import document_query_contract, single_valued_query
from service.api.registry import (
    PipelineExists,
    PipelineNotFound,
    PipelineRegistry,
    SpecInvalid,
    StateIncompatible,
)
from service.api.routes import cluster, console, health, metrics, pipelines, schema, sql, state
from service.api.routes.deps import Services
from service.api.state_queries import StateQueries
from service.api.store import PipelineStore, StoreError, StoreTimeout
from service.api.whole_history import whole_samples
from service.core.time import SystemClock
from service.pipeline_spec.schema import pipeline_schema, replacement_schema, sql_schemas
from service.pipeline_spec.sql.pull_query import PULL_QUERY_SCHEMA
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.embedded_broker import EmbeddedBroker
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.history import History
from service.runtime.settings import RuntimeSettings
from service.settings import Settings
from service.workers.pool import WorkerPool

__all__ = ["WorkerRole", "create_app", "runtime_settings"]

logger = logging.getLogger(__name__)

_DESCRIPTION = """Event-time stream processing on Kafka with Apache Flink's semantics.

Configure pipelines with `POST /pipelines` (the spec's JSON Schema is at
`GET /schema/pipeline`). When `SERVICE_API_TOKEN` is set, every POST, PUT and DELETE needs
`Authorization: Bearer <token>`, and so do the reads of pipeline specs, history, the
live tail and the state (pull queries; unless the service keeps reads open). Status,
probes and metrics stay open.
A query parameter is given at most once, in the form its schema states (an integer in
decimal digits, a boolean as `true` or `false`): anything else is a 422.
"""


def runtime_settings(
    settings: Settings, bootstrap_servers: str, *, embedded_broker: bool = False
) -> RuntimeSettings:
    """The runtime's part of the service configuration."""
    return RuntimeSettings(
        bootstrap_servers=bootstrap_servers,
        security=settings.kafka_security,
        checkpoint_interval_ms=settings.checkpoint_interval_ms,
        fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
        session_timeout_ms=settings.session_timeout_ms(embedded_broker),
        prefetch_max_records=settings.prefetch_max_records,
        replication_factor=settings.topic_replication,
        schema_registry=settings.schema_registry,
        state_backend=settings.state_backend,
        state_dir=settings.state_dir,
        standby_replicas=settings.standby_replicas,
        member=settings.instance_id,
    )


@dataclass(frozen=True, slots=True)
class WorkerRole:
    """This process is worker ``index`` of replica ``replica`` (``python -m service.worker``):
    it runs pipelines and serves only the probes and ``/metrics``, to its API process."""

    index: int
    replica: str


def create_app(
    settings: Settings,
    runtime: Runtime | None = None,
    *,
    worker: WorkerRole | None = None,
) -> FastAPI:
    """The service as an ASGI app; its lifespan starts and stops everything.

    What the process does follows from the settings: with ``SERVICE_WORKERS`` 1 it
    serves the API and runs the pipelines; above 1 it serves the API and supervises
    that many workers, and runs no pipeline itself; as a ``worker`` it runs pipelines.
    Workers read their configuration from this process's environment (as ``python -m
    service`` reads it), plus the broker this process resolved: settings built otherwise
    should keep ``workers`` at 1.
    ``runtime``: run pipelines in this runtime (its lifecycle stays with the caller);
    default: the app creates, starts and shuts down its own.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            found = await _start(settings, runtime, worker, stack)
            client = await stack.enter_async_context(httpx.AsyncClient())
            app.state.queries = StateQueries(found, client, worker=worker is not None)
            app.state.services = found
            try:
                yield
            finally:
                app.state.services = None
                app.state.queries = None
                logger.info("shutting down: stopping the store follower and every pipeline")

    app = FastAPI(
        title="Clockwork",
        version="0.1.0",
        description=_DESCRIPTION,
        lifespan=lifespan,
        # Every operation's query string: each parameter once, in its schema's form.
        dependencies=[Depends(single_valued_query)],
    )
    app.state.services = None
    app.state.queries = None
    app.state.settings = settings
    app.include_router(health.router)
    app.include_router(metrics.router)
    if worker is not None:  # the API process is the only client
        app.include_router(state.router)  # the pull queries it routes here
        return app
    app.include_router(pipelines.router)
    app.include_router(state.router)
    app.include_router(state.query_router)
    app.include_router(schema.router)
    app.include_router(sql.router)
    app.include_router(cluster.router)
    app.include_router(console.router)
    console.mount_static(app)
    _add_error_handlers(app)
    # Added last = outermost: the token is checked before the body is even counted.
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    if settings.api_token:
        app.add_middleware(
            BearerTokenMiddleware, token=settings.api_token, read_open=settings.api_read_open
        )
    app.openapi = lambda: _openapi(app, settings)  # type: ignore[method-assign]
    return app


async def _start(
    settings: Settings, runtime: Runtime | None, worker: WorkerRole | None, stack: AsyncExitStack
) -> Services:
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
    session_timeout_ms = settings.session_timeout_ms(embedded)
    supervises = worker is None and runtime is None and settings.workers > 1
    local: LocalPipelines | None = None
    pool: WorkerPool | None = None
    if runtime is None and not supervises:
        runtime = Runtime(runtime_settings(settings, bootstrap, embedded_broker=embedded))
        await runtime.start()
        stack.push_async_callback(runtime.shutdown)
    cluster = KafkaCluster(bootstrap, settings.kafka_security)
    registry: PipelineRegistry | None = None
    members: MemberBoard | None = None

    def status_here(name: str) -> dict[str, Any]:
        if local is not None:
            return local.status(name)
        assert members is not None
        return members.replica_status(name, int(time.time() * 1000), lost_after)

    lost_after = session_timeout_ms + 2 * settings.status_publish_interval_ms
    on_change = None
    if runtime is not None:
        local = LocalPipelines(runtime, lambda raw: _registry().parse_stored(raw))
        on_change = local.on_change

    def _registry() -> PipelineRegistry:
        assert registry is not None
        return registry

    store = PipelineStore(
        cluster,
        settings.pipelines_topic,
        instance_id=settings.instance_id,
        on_change=on_change,
        replication_factor=settings.topic_replication,
        fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
    )
    registry = PipelineRegistry(store, cluster, settings, status_here, local)
    await store.start()
    stack.push_async_callback(store.stop)
    members = MemberBoard(
        cluster,
        settings.members_topic,
        settings.instance_id,
        registry.statuses_here if local is not None else None,
        replica=worker.replica if worker is not None else None,
        worker=worker.index if worker is not None else 0,
        address=settings.advertised_query_address(),
        interval_s=settings.status_publish_interval_ms / 1000,
        replication_factor=settings.topic_replication,
        fetch_max_wait_ms=settings.kafka_fetch_max_wait_ms,
    )
    members.start()
    stack.push_async_callback(members.stop)
    if supervises:
        pool = WorkerPool(
            settings.workers,
            worker_environment(bootstrap, session_timeout_ms),
            settings.instance_id,
            stop_timeout_s=settings.shutdown_timeout_ms / 1000 + 5,
        )
        pool.start()
        stack.push_async_callback(pool.stop)
    history = History(
        whole_samples(members, lambda: [p.name for p in store.all()], lost_after), SystemClock()
    )
    if worker is None:  # a worker's own part is in its reports; the API process charts
        history.start()
        stack.push_async_callback(history.stop)
    logger.info(
        "clockwork %s serving%s; pipelines from %r on %s",
        settings.instance_id,
        f" with {settings.workers} workers" if pool is not None else "",
        settings.pipelines_topic,
        bootstrap,
    )
    return Services(
        settings, cluster, runtime, store, registry, history, members, lost_after, local, pool
    )


def worker_environment(bootstrap: str, session_timeout_ms: int) -> dict[str, str]:
    """The workers' environment: the replica's, with the broker this process resolved
    (the embedded one it started, if it did) and the session timeout that goes with it."""
    return {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "KAFKA_SESSION_TIMEOUT_MS": str(session_timeout_ms),
    }


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

    async def http_error(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, StarletteHTTPException):  # registered for this type only
            raise exc
        if exc.status_code == 405:
            # Starlette names the methods of the first route whose path matched; a path
            # served by several routes (GET, PUT and DELETE /pipelines/{name}) has more.
            served = methods_served(request.app.router.routes, request.scope, mounts=False)
            if served:
                exc.headers = {**(exc.headers or {}), "Allow": ", ".join(served)}
        return await http_exception_handler(request, exc)

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(SpecInvalid, spec_invalid)
    app.add_exception_handler(PipelineNotFound, not_found)
    app.add_exception_handler(PipelineExists, conflict)
    app.add_exception_handler(StateIncompatible, conflict)
    app.add_exception_handler(StoreTimeout, store_timeout)
    app.add_exception_handler(StoreError, store_error)


def _openapi(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """FastAPI's document plus the spec's schemas (bodies are validated by hand: the same
    schema as ``/schema/pipeline``), links from a created pipeline to what can be done with
    it, the query string's contract (:mod:`service.api.query`) and the bearer scheme on
    mutating operations when a token is configured."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    spec_schema = pipeline_schema(settings.udf_modules, ref_template="#/components/schemas/{model}")
    schemas.update(spec_schema.pop("$defs", {}))
    spec_schema.pop("$schema", None)  # the document's dialect (3.1: 2020-12) applies
    schemas["PipelineSpec"] = spec_schema
    schemas["PipelineReplacement"] = replacement_schema(spec_schema)
    schemas.update(sql_schemas())
    schemas["PullQuery"] = PULL_QUERY_SCHEMA
    _link_operations(doc)
    document_query_contract(doc)
    if settings.api_token:
        reads = {openapi_template(t) for t in DATA_READS}
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        for template, path in doc.get("paths", {}).items():
            for method, operation in path.items():
                if method.upper() in MUTATING_METHODS or (
                    method.upper() == "GET" and template in reads and not settings.api_read_open
                ):
                    operation["security"] = [{"bearer": []}]
                    operation.setdefault("responses", {}).setdefault(
                        "401",
                        {
                            "description": "SERVICE_API_TOKEN is set and the bearer token "
                            "is missing or wrong"
                        },
                    )
    app.openapi_schema = doc
    return doc


_PER_PIPELINE = {
    "GetPipeline": ("/pipelines/{name}", "get"),
    "ReplacePipeline": ("/pipelines/{name}", "put"),
    "DeletePipeline": ("/pipelines/{name}", "delete"),
    "PausePipeline": ("/pipelines/{name}/pause", "post"),
    "ResumePipeline": ("/pipelines/{name}/resume", "post"),
    "PipelineStatus": ("/pipelines/{name}/status", "get"),
    "PipelineHistory": ("/pipelines/{name}/history", "get"),
}
"""The operations on one pipeline, by the link names the OpenAPI document gives them."""


def _link_operations(doc: dict[str, Any]) -> None:
    """OpenAPI links: from the pipeline that ``POST /pipelines`` created (and that
    replace, pause and resume return) to every operation on it, by its name; from a
    deleted one to reading it again. Clients and stateful fuzzers follow them."""
    paths = doc.get("paths", {})

    def operation_id(path: str, method: str) -> str | None:
        found: str | None = paths.get(path, {}).get(method, {}).get("operationId")
        return found

    def links(name_from: str) -> dict[str, Any]:
        found = {}
        for link, (path, method) in _PER_PIPELINE.items():
            target = operation_id(path, method)
            if target is not None:
                found[link] = {"operationId": target, "parameters": {"name": name_from}}
        return found

    sources = [
        ("/pipelines", "post", "201"),
        ("/pipelines/{name}", "put", "200"),
        ("/pipelines/{name}/pause", "post", "200"),
        ("/pipelines/{name}/resume", "post", "200"),
    ]
    for path, method, status in sources:
        response = paths.get(path, {}).get(method, {}).get("responses", {}).get(status)
        if response is not None:
            response["links"] = links("$response.body#/name")
    deleted = paths.get("/pipelines/{name}", {}).get("delete", {}).get("responses", {})
    get_id = operation_id("/pipelines/{name}", "get")
    if "204" in deleted and get_id is not None:
        deleted["204"]["links"] = {
            "GetDeletedPipeline": {
                "operationId": get_id,
                "parameters": {"name": "$request.path.name"},
            }
        }
