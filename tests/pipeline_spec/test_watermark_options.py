"""The issue-10 watermark options in the spec: accepted, validated, passed to the runtime."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.pipeline_spec.build import build_definition, state_fingerprint
from service.pipeline_spec.models import validate_spec
from tests.pipeline_spec.test_spec import ALLOWED, base, problems


def test_idle_advance_and_max_drift_reach_the_definition() -> None:
    spec = base()
    spec["watermark"]["idle_advance"] = True
    spec["watermark"]["max_drift_ms"] = 0  # 0 is valid: no partition may run ahead at all
    definition = build_definition(validate_spec(spec, ALLOWED), ALLOWED)
    assert definition.watermark.idle_advance is True
    assert definition.watermark.max_drift_ms == 0
    assert definition.watermark.idle_timeout_ms == 30000


def test_defaults_are_off() -> None:
    definition = build_definition(validate_spec(base(), ALLOWED), ALLOWED)
    assert definition.watermark.idle_advance is False
    assert definition.watermark.max_drift_ms is None


def test_max_drift_must_not_be_negative_or_a_string() -> None:
    spec = base()
    spec["watermark"]["max_drift_ms"] = -1
    assert problems(spec) == [(("watermark", "max_drift_ms"), "greater_than_equal")]
    spec["watermark"]["max_drift_ms"] = "5000"
    with pytest.raises(ValidationError):
        validate_spec(spec, ALLOWED)


def test_idle_advance_needs_idle_timeout() -> None:
    spec = base()
    del spec["watermark"]["idle_timeout_ms"]
    spec["watermark"]["idle_advance"] = True
    spec["watermark"]["max_drift_ms"] = -5
    assert sorted(problems(spec)) == sorted(
        [
            (("watermark", "idle_advance"), "idle_advance_without_timeout"),
            (("watermark", "max_drift_ms"), "greater_than_equal"),
        ]
    )


def test_the_options_keep_state_on_replace() -> None:
    """They change how the pipeline runs, not what its state is."""
    spec = base()
    before = state_fingerprint(validate_spec(spec, ALLOWED))
    spec["watermark"]["idle_advance"] = True
    spec["watermark"]["max_drift_ms"] = 10_000
    assert state_fingerprint(validate_spec(spec, ALLOWED)) == before
