"""``GET /schema/pipeline``: the JSON Schema of the pipeline spec, for editors and UIs.

The schema depends on the configuration (the modules user functions may come from), so it
is built from the app's settings; :mod:`service.pipeline_spec.schema` says what it states.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from service.pipeline_spec.schema import pipeline_schema
from service.settings import Settings

router = APIRouter(tags=["schema"])


@router.get("/schema/pipeline", summary="JSON Schema of the pipeline spec")
async def get_pipeline_schema(request: Request) -> dict[str, Any]:
    settings: Settings = request.app.state.settings
    return pipeline_schema(settings.udf_modules)
