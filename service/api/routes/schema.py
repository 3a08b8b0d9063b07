"""``GET /schema/pipeline``: the JSON Schema of the pipeline spec, for editors and UIs."""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import APIRouter

from service.api.spec import PipelineSpec

router = APIRouter(tags=["schema"])


@cache
def pipeline_schema() -> dict[str, Any]:
    """Computed once: the models cannot change while the process runs."""
    schema = PipelineSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


@router.get("/schema/pipeline", summary="JSON Schema of the pipeline spec")
async def get_pipeline_schema() -> dict[str, Any]:
    return pipeline_schema()
