"""``/cluster``: every member (replica) the reports know of, and what each holds."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request

from service.api.pipeline_view import cluster_members
from service.api.routes.deps import lost_after_ms, services

router = APIRouter(tags=["cluster"])


@router.get("/cluster", summary="Every member, alive or lost, and the partitions it holds")
async def cluster(request: Request) -> dict[str, Any]:
    found = services(request)
    board = found.members
    now = int(time.time() * 1000)
    local = found.registry.local_statuses()
    reports = [board.me(now, status) for status in local.values()] + board.reports()
    heartbeats = [board.me(now), *board.heartbeats()]
    members = cluster_members(heartbeats, reports, now, lost_after_ms(found))
    return {"member": board.member, "members": members}
