"""``POST /sql/compile``: the spec a SQL script compiles to, without creating anything.

For editors (the console checks a script as you type) and for reviewing what a script
will run: the answer is the JSON spec exactly as ``POST /pipelines`` would store it, or
the same 422 (every problem with its statement, line and column). docs/sql.md is the
reference of the language.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from service.api.registry import PipelineRegistry
from service.api.routes.deps import registry
from service.api.routes.pipelines import json_body, request_body

router = APIRouter(prefix="/sql", tags=["sql"])

Registry = Annotated[PipelineRegistry, Depends(registry)]


@router.post(
    "/compile",
    summary="Compile a SQL script to the pipeline spec (nothing is created)",
    openapi_extra=request_body("SqlCompile"),
    responses={
        401: {"description": "SERVICE_API_TOKEN is set and the bearer token is missing or wrong"},
        413: {"description": "the body is larger than SERVICE_MAX_BODY_BYTES"},
        422: {"description": "every problem of the script, each with statement, line and column"},
    },
)
async def compile_sql(request: Request, pipelines: Registry) -> dict[str, Any]:
    return pipelines.compile(await json_body(request))
