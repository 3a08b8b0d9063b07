"""``GET /pipelines/{name}/state/{key}`` and ``GET /pipelines/{name}/state``: pull
queries, a pipeline's live state by key, from any replica (docs/pull-queries.md; the
routing is :mod:`service.api.state_queries`). Behind the token like every data read
(``middleware.DATA_READS``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response

from service.api.registry import SpecInvalid
from service.api.routes.pipelines import Name, json_body, request_body
from service.api.state_queries import DEFAULT_LIMIT, MAX_LIMIT, StateQueries
from service.pipeline_spec.sql.problems import SqlError
from service.pipeline_spec.sql.pull_query import compile_pull_query

router = APIRouter(prefix="/pipelines", tags=["state"])
query_router = APIRouter(tags=["state"])

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
    """The app's pull queries (made with its services, beside them on ``app.state``, as
    they hold the services: the services do not hold them back)."""
    found: StateQueries | None = getattr(request.app.state, "queries", None)
    if found is None:
        raise HTTPException(503, "the service is starting or stopping")
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


@query_router.post(
    "/query",
    summary="A pull query in SQL: SELECT * FROM <pipeline> WHERE key = '...' (or a range)",
    openapi_extra=request_body("PullQuery"),
    responses={
        **_ERRORS,
        401: {"description": "SERVICE_API_TOKEN is set and the bearer token is missing or wrong"},
        413: {"description": "the body is larger than SERVICE_MAX_BODY_BYTES"},
        422: {"description": "every problem of the query, each with statement, line and column"},
    },
)
async def pull_query(request: Request) -> Response:
    """A key's state (as ``GET /pipelines/{name}/state/{key}`` answers) or a range of keys
    (as ``GET /pipelines/{name}/state`` does, ``LIMIT`` its page size)."""
    body = await json_body(request)
    sql = body.get("sql") if isinstance(body, dict) else None
    if not isinstance(sql, str) or set(body) != {"sql"} or not sql:
        raise SpecInvalid(
            [{"loc": ["sql"], "msg": 'the body is {"sql": "SELECT ..."}', "type": "sql_body"}]
        )
    try:
        query = compile_pull_query(sql)
    except SqlError as exc:
        raise SpecInvalid([problem.to_json() for problem in exc.problems]) from None
    queries = _queries(request)
    if query.key is not None:
        reply = await queries.lookup(query.pipeline, query.key, request.headers)
    else:
        limit = query.limit or DEFAULT_LIMIT
        reply = await queries.scan(
            query.pipeline, query.from_key, query.to_key, limit, request.headers
        )
    return reply.response()
