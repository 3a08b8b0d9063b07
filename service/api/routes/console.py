"""The web console: its static files at ``/ui``, and the two feeds only it needs.

- ``GET /pipelines/{name}/history`` and ``GET /history``: the short in-memory history
  (:class:`~service.runtime.observability.history.History`) the console's charts draw,
  in the OpenAPI document like every JSON endpoint.
- ``GET /pipelines/{name}/tail``: server-sent events with the newest records of the
  pipeline's result, late-data and dead-letter topics
  (:class:`~service.runtime.kafka.tail.TopicTail`). Not in the OpenAPI document: the stream
  does not end, and OpenAPI 3.1 has no way to describe its events.

Reads follow the API's rule (open, like status and metrics; ``SERVICE_API_TOKEN`` guards
mutations only). The console needs no build step: plain files in ``console/`` next to
this package, served as they are.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, HTTPException, Query, Request
from fastapi.responses import RedirectResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from service.api.routes.deps import services
from service.api.routes.pipelines import Name
from service.runtime.kafka.tail import TopicTail, open_tails

router = APIRouter(tags=["console"])

STATIC_DIR = Path(__file__).resolve().parent.parent / "console"
MAX_TAILS = 16
"""Live tails open at once in this process (each is a Kafka consumer); more get 429."""
KEEP_ALIVE_S = 15.0

SinceMs = Annotated[int | None, Query(description="Only samples taken after this time (epoch ms).")]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "no pipeline of that name"}}


class _ConsoleFiles(StaticFiles):
    """The console's files; 405 answers say which methods there are (``Allow``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD"):
            raise HTTPException(405, headers={"Allow": "GET, HEAD"})
        await super().__call__(scope, receive, send)


def mount_static(app: FastAPI) -> None:
    app.mount("/ui", _ConsoleFiles(directory=STATIC_DIR, html=True), name="console")


@router.get("/", include_in_schema=False)
@router.get("/ui", include_in_schema=False)
async def to_console() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get(
    "/history",
    summary="Every pipeline's recent samples on this replica (throughput, watermark, timers)",
)
async def history(request: Request, since_ms: SinceMs = None) -> dict[str, Any]:
    found = services(request).history
    return {
        "interval_ms": int(found.interval_s * 1000),
        "capacity": found.capacity,
        "pipelines": {name: found.series(name, since_ms) for name in found.pipelines()},
    }


@router.get(
    "/pipelines/{name}/history",
    summary="A pipeline's recent samples on this replica (throughput, watermark, timers)",
    responses=_NOT_FOUND,
)
async def pipeline_history(
    name: Name, request: Request, since_ms: SinceMs = None
) -> dict[str, Any]:
    found = services(request)
    found.registry.get(name)  # 404 for no such pipeline
    return {
        "name": name,
        "interval_ms": int(found.history.interval_s * 1000),
        "capacity": found.history.capacity,
        "samples": found.history.series(name, since_ms),
    }


@router.get("/pipelines/{name}/tail", include_in_schema=False)
async def pipeline_tail(name: Name, request: Request) -> StreamingResponse:
    """``event: topics`` once (kind -> topic), then ``event: records`` with
    ``{"records": [...], "skipped": n}`` as records arrive (oldest first in a batch)."""
    found = services(request)
    spec = found.registry.get(name)["spec"]
    sink = spec["sink"]
    topics = {"result": sink["topic"]}
    if sink.get("late_topic"):
        topics["late"] = sink["late_topic"]
    topics["dead_letter"] = sink.get("dead_letter_topic") or f"{sink['topic']}.dlq"
    if open_tails() >= MAX_TAILS:
        raise HTTPException(429, f"{MAX_TAILS} live tails are open here already")

    async def events() -> AsyncIterator[str]:
        async with TopicTail(found.cluster, topics) as tail:
            yield _event("topics", topics)
            quiet_since = time.monotonic()
            async for batch in tail.batches():
                if batch.records or batch.skipped:
                    yield _event("records", {"records": batch.records, "skipped": batch.skipped})
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since > KEEP_ALIVE_S:
                    yield ": keep-alive\n\n"  # finds a client that left without a word
                    quiet_since = time.monotonic()
                if await request.is_disconnected():
                    return

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _event(kind: str, data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"
