"""The spec's build is the one place a spec becomes the runtime's definition."""

from __future__ import annotations

import dataclasses

from service.pipeline_spec.models import WatermarkSpec
from service.runtime.definition import WatermarkSettings


def test_the_runtimes_watermark_settings_are_the_models_fields_and_defaults() -> None:
    """The build copies the watermark field for field: a setting declared in the model
    and not in the runtime (or the other way round), or a default that differs, fails
    here rather than in a pipeline."""
    fields = {f.name for f in dataclasses.fields(WatermarkSettings)}
    assert fields == set(WatermarkSpec.model_fields)
    assert WatermarkSettings(**WatermarkSpec().model_dump()) == WatermarkSettings()
