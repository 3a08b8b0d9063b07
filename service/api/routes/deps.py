"""How endpoints reach the service's parts: everything hangs off ``app.state``.

The lifespan (:mod:`service.api.app`) puts them there once the broker, the runtime and
the store follower are up; before that (or after shutdown) they answer 503.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import HTTPException, Request

from service.api.local_pipelines import LocalPipelines
from service.api.members import MemberBoard
from service.api.registry import PipelineRegistry
from service.api.store import PipelineStore
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.history import History
from service.settings import Settings
from service.workers.pool import WorkerPool


@dataclass(slots=True)
class Services:
    """The running parts of one app instance."""

    settings: Settings
    cluster: KafkaCluster
    """The broker and the security every client of a request (a tail) uses."""
    runtime: Runtime | None
    """The pipelines' runtime; None in a replica's API process that supervises workers."""
    store: PipelineStore
    registry: PipelineRegistry
    history: History
    """The console's short history of every pipeline here (charts)."""
    members: MemberBoard
    """Every replica's reports: the whole pipeline from any replica."""
    lost_after_ms: int
    """When a member's last report makes it lost: the group's session timeout (by then
    the group has moved its partitions) and two publish intervals."""
    local: LocalPipelines | None = None
    """The pipelines this process runs (None: it runs none, its workers do)."""
    workers: WorkerPool | None = None
    """The workers this process supervises (None: it runs the pipelines itself)."""


def services(request: Request) -> Services:
    found: Services | None = getattr(request.app.state, "services", None)
    if found is None:
        raise HTTPException(503, "the service is starting or stopping")
    return found


def registry(request: Request) -> PipelineRegistry:
    return services(request).registry


def lost_after_ms(found: Services) -> int:
    return found.lost_after_ms
