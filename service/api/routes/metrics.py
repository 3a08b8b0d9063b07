"""``GET /metrics``: the runtime's registry plus this process's own metrics.

The runtime's metrics live in its own registry (no surprise collectors from imported
libraries); process and platform metrics (CPU, memory, file descriptors, Python version)
come from a second registry built once here, and the two texts are concatenated (they
share no metric family).
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from service.runtime.observability.metrics import REGISTRY

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
async def metrics() -> Response:
    body = generate_latest(REGISTRY) + generate_latest(PROCESS_REGISTRY)
    return Response(content=body, media_type=CONTENT_TYPE_LATEST)
