"""``/pipelines``: the REST resource of contract.md.

Bodies (a JSON spec, or ``{"name", "sql"}``: a SQL script compiled to the spec, see
docs/sql.md) are read as raw JSON and validated by
:func:`service.pipeline_spec.models.validate_spec`
(not by FastAPI's parameter binding), because the spec's rules need the service's
allowed modules and must report every problem together; the OpenAPI document still shows
the spec's schema (``openapi_extra``). Errors map to statuses in :mod:`service.api.app`.
"""

from __future__ import annotations

import json
import math
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError

from service.api.registry import PipelineRegistry
from service.api.routes.deps import registry, services
from service.pipeline_spec.models import PIPELINE_NAME_PATTERN

router = APIRouter(prefix="/pipelines", tags=["pipelines"])

Registry = Annotated[PipelineRegistry, Depends(registry)]


def request_body(*schemas: str) -> dict[str, Any]:
    """An operation's JSON body: one of ``schemas`` (components of the document)."""
    refs = [{"$ref": f"#/components/schemas/{schema}"} for schema in schemas]
    schema = refs[0] if len(refs) == 1 else {"anyOf": refs}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


_SPEC_BODY = request_body("PipelineSpec", "SqlPipeline")
"""A JSON spec, or ``{"name", "sql"}`` (docs/sql.md)."""
_REPLACEMENT_BODY = request_body("PipelineReplacement", "SqlReplacement")
"""``PUT``: the name may be left out (the path gives it)."""
_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "no pipeline of that name"},
    401: {"description": "SERVICE_API_TOKEN is set and the bearer token is missing or wrong"},
    413: {"description": "the body is larger than SERVICE_MAX_BODY_BYTES"},
    422: {
        "description": "every problem of the spec, each with its field path (of a SQL "
        "script: each with its statement, line and column)"
    },
    503: {"description": "the pipeline store is unreachable"},
    504: {"description": "this replica did not apply the change in time"},
}


Name = Annotated[
    str, Path(pattern=PIPELINE_NAME_PATTERN, description="The pipeline's name (its spec's).")
]
"""A pipeline's name in the path: a name no spec can have is a 422, like the spec's."""

_EXACT_INTEGERS = 2**53
"""Up to here every integer has an exact double, so ``1.0`` and ``1`` are the same number."""


def _number(text: str) -> float | int:
    """A JSON number with a fraction or exponent, read by value: ``60000.0`` is the integer
    60000 (JSON and JSON Schema do not tell the two apart; the spec's integer fields are
    strict about Python types)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is out of range")
    return int(value) if value.is_integer() and abs(value) <= _EXACT_INTEGERS else value


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


async def json_body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw, parse_float=_number, parse_constant=_not_json)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise RequestValidationError(
            [{"loc": ["body"], "msg": f"invalid JSON: {exc}", "type": "json_invalid"}]
        ) from None


@router.post(
    "",
    status_code=201,
    summary="Create and start a pipeline",
    openapi_extra=_SPEC_BODY,
    responses={409: {"description": "a pipeline of that name exists"}, **_ERRORS},
)
async def create_pipeline(request: Request, pipelines: Registry) -> dict[str, Any]:
    return await pipelines.create(await json_body(request))


@router.get("", summary="List the pipelines")
async def list_pipelines(pipelines: Registry) -> list[dict[str, Any]]:
    return pipelines.list()


@router.get("/{name}", summary="A pipeline's spec and status", responses=_ERRORS)
async def get_pipeline(name: Name, pipelines: Registry) -> dict[str, Any]:
    return pipelines.get(name)


@router.put(
    "/{name}",
    summary="Replace a pipeline's spec",
    openapi_extra=_REPLACEMENT_BODY,
    responses={
        409: {"description": "the change cannot keep the state; retry with reset_state=true"},
        **_ERRORS,
    },
)
async def replace_pipeline(
    name: Name,
    request: Request,
    pipelines: Registry,
    reset_state: Annotated[
        bool, Query(description="Drop the pipeline's state when the change needs it.")
    ] = False,
) -> dict[str, Any]:
    return await pipelines.replace(name, await json_body(request), reset_state=reset_state)


@router.delete("/{name}", status_code=204, summary="Stop and remove a pipeline", responses=_ERRORS)
async def delete_pipeline(name: Name, pipelines: Registry) -> Response:
    await pipelines.delete(name)
    return Response(status_code=204)


@router.post("/{name}/pause", summary="Stop consuming; the state is kept", responses=_ERRORS)
async def pause_pipeline(name: Name, pipelines: Registry) -> dict[str, Any]:
    return await pipelines.set_paused(name, True)


@router.post("/{name}/resume", summary="Go on consuming", responses=_ERRORS)
async def resume_pipeline(name: Name, pipelines: Registry) -> dict[str, Any]:
    return await pipelines.set_paused(name, False)


@router.get(
    "/{name}/status",
    summary="State and per-partition progress: of the whole pipeline, or of this replica",
    responses=_ERRORS,
)
async def pipeline_status(
    name: Name,
    request: Request,
    pipelines: Registry,
    scope: Annotated[
        Literal["pipeline", "local"],
        Query(
            description="pipeline: every partition of every member, each with its owner "
            "(from the members' reports); local: this replica's part only"
        ),
    ] = "pipeline",
) -> dict[str, Any]:
    local = pipelines.status(name)  # 404 for no such pipeline
    if scope == "local":
        return {**local, "scope": "local"}
    found = services(request)
    return found.members.whole_status(name, int(time.time() * 1000), found.lost_after_ms)
