"""The console's static files: its examples are the docs' pipelines, and its one library
is the pinned version, with the licenses of everything its bundle contains."""

from __future__ import annotations

import json
import re

from service.pipeline_spec.models import validate_spec
from tests.console.examples import EXAMPLES, ROOT, expected_examples

CONSOLE = ROOT / "service" / "api" / "console"


def test_examples_are_the_readme_and_spec_reference_pipelines() -> None:
    assert json.loads(EXAMPLES.read_text(encoding="utf-8")) == expected_examples(), (
        "the docs changed: run `.venv/bin/python -m tests.console.examples`"
    )


def test_every_example_is_a_valid_spec() -> None:
    for example in expected_examples():
        validate_spec(example["spec"], ["examples"])


def test_the_vendored_validator_is_the_pinned_one_with_its_licenses() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    pinned = re.search(r"ajv-dist@(\S+)", makefile)
    assert pinned is not None
    bundle = (CONSOLE / "vendor" / "ajv2020.min.js").read_text(encoding="utf-8")
    assert bundle.startswith(f"/* ajv {pinned.group(1)} (ajv2020)")
    for package in ("ajv", "fast-deep-equal", "json-schema-traverse", "fast-uri"):
        assert (CONSOLE / "vendor" / f"LICENSE.{package}").read_text().strip(), package


def test_the_console_loads_nothing_from_elsewhere() -> None:
    for path in CONSOLE.rglob("*"):
        if path.suffix in (".html", ".js", ".css") and "vendor" not in path.parts:
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"(src|href)=[\"']?(https?:)?//", text), path
            assert "import(" not in text and "https://" not in text.replace(
                "http://www.w3.org", ""
            ), path
