"""Liveness and readiness probes.

``/healthz`` only says the event loop answers (a restart would not fix anything else);
``/readyz`` says whether this replica should get traffic: the broker answers, every
stored pipeline has been loaded and (with ``SERVICE_WORKERS`` above 1) every worker
runs; when not, ``reason`` says why (e.g. the TLS or SASL failure, or the missing ACL).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: broker reachable and pipelines loaded",
    responses={503: {"description": "not ready; the body says which check failed"}},
)
async def readyz(request: Request) -> JSONResponse:
    found = getattr(request.app.state, "services", None)
    checks: dict[str, Any]
    reason: str | None = None
    if found is None:
        checks = {"started": False, "broker": False, "pipelines_loaded": False}
        reason = "the service is starting or stopping"
    else:
        runtime, workers = found.runtime, found.workers
        restarting = 0 if workers is None else len(workers.slots) - workers.running
        checks = {
            "started": True,
            "broker": found.store.reachable() and (runtime is None or runtime.ready),
            "pipelines_loaded": found.store.loaded,
        }
        if workers is not None:  # a worker restarting (crash-looping) is worth seeing
            checks["workers"] = restarting == 0
        # The cause an operator can act on (a rejected password, an untrusted
        # certificate, a missing ACL); never a secret.
        reason = (runtime.broker_problem if runtime is not None else None) or found.store.problem
        if reason is None and restarting:
            reason = f"{restarting} worker(s) restarting"
    ready = all(checks.values())
    body: dict[str, Any] = {"status": "ready" if ready else "not ready", "checks": checks}
    if not ready:
        body["reason"] = reason or (
            "the pipeline store is not read yet"
            if checks["broker"]
            else "the broker is not reachable"
        )
    return JSONResponse(body, status_code=200 if ready else 503)
