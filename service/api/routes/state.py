"""``GET /pipelines/{name}/state/{key}`` and ``GET /pipelines/{name}/state``: pull
queries, a pipeline's live state by key, from any replica (docs/pull-queries.md; the
routing is :mod:`service.api.state_queries`). Behind the token like every data read
(``middleware.DATA_READS``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response

from service.api.routes.deps import services
from service.api.routes.pipelines import Name
from service.api.state_queries import DEFAULT_LIMIT, MAX_LIMIT, StateQueries

router = APIRouter(prefix="/pipelines", tags=["state"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "no pipeline of that name"},
    409: {
        "description": "the pipeline keeps no state a query can read (a join, a map, "
        "a finished bounded pipeline)"
    },
    422: {"description": "a key or bound longer than 8192 bytes, or a bad parameter"},
    503: {
        "description": "the state cannot be read now (starting, restoring, a rebalance, "
        "the owner unknown or not answering): retry after Retry-After seconds",
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    },
}


def _queries(request: Request) -> StateQueries:
    found = services(request).queries
    assert found is not None  # made with the services
    return found


@router.get(
    "/{name}/state/{key:path}",
    summary="A key's current state: open windows, the row, the ranks or the queryable states",
    responses=_ERRORS,
)
async def key_state(
    name: Name,
    key: Annotated[str, Path(description="The key, percent-encoded (a / as %2F).")],
    request: Request,
) -> Response:
    reply = await _queries(request).lookup(name, key, request.headers)
    return reply.response()


@router.get(
    "/{name}/state",
    summary="The keys from..to (to excluded) with their state, in key order, a page at a time",
    responses=_ERRORS,
)
async def scan_state(
    name: Name,
    request: Request,
    from_key: Annotated[
        str | None, Query(alias="from", description="The first key (included).")
    ] = None,
    to_key: Annotated[str | None, Query(alias="to", description="The end (excluded).")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Keys per page.")] = DEFAULT_LIMIT,
) -> Response:
    reply = await _queries(request).scan(name, from_key, to_key, limit, request.headers)
    return reply.response()
