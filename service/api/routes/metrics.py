"""``GET /metrics``: the runtime's registry plus this process's own metrics; with workers,
every worker's too (merged, each labelled ``worker``: :mod:`service.workers.exposition`).

The runtime's metrics live in its own registry (no surprise collectors from imported
libraries); process and platform metrics (CPU, memory, file descriptors, Python version)
come from a second registry built once here, and the two texts are concatenated (they
share no metric family).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from service.runtime.observability.metrics import REGISTRY
from service.workers.exposition import fetch_metrics, merged_exposition

router = APIRouter(tags=["metrics"])

PROCESS_REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=PROCESS_REGISTRY)
PlatformCollector(registry=PROCESS_REGISTRY)


@router.get(
    "/metrics",
    summary="Prometheus metrics (text format)",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
async def metrics(request: Request) -> Response:
    body = generate_latest(REGISTRY) + generate_latest(PROCESS_REGISTRY)
    services = getattr(request.app.state, "services", None)
    pool = services.workers if services is not None else None
    if pool is not None:
        own = body + generate_latest(pool.registry)
        texts = await asyncio.gather(*(fetch_metrics(slot.port) for slot in pool.slots))
        body = merged_exposition(
            own.decode(),
            [(slot.index, text) for slot, text in zip(pool.slots, texts, strict=True) if text],
        )
    return Response(content=body, media_type=CONTENT_TYPE_LATEST)
