"""Every ``clockwork.*`` header the service writes on a late record or a dead letter is
listed, with its meaning, in pipeline-spec.md's "Late records and dead letters"; the
shuffle's internal headers are not (they never leave the shuffle topic)."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from service.runtime.shuffle.records import MARKER, ROUTED

ROOT = Path(__file__).resolve().parent.parent
SPEC_DOC = ROOT / "docs" / "pipeline-spec.md"
SECTION = "## Late records and dead letters"


@cache
def documented_headers() -> frozenset[str]:
    """The headers in the first column of the section's table."""
    text = SPEC_DOC.read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return frozenset(re.findall(r"^\| `(clockwork\.[a-z_.]+)` \|", section, re.MULTILINE))


def written_headers() -> dict[str, str]:
    """Header name -> where: every ``HEADER_* = "clockwork.*"`` constant under service/."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "service").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Constant):
                continue
            value = node.value.value
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if (
                isinstance(value, str)
                and value.startswith("clockwork.")
                and any(t.startswith("HEADER_") for t in targets)
            ):
                found[value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return found


def test_every_header_the_service_writes_is_documented_with_its_meaning() -> None:
    written = written_headers()
    assert "clockwork.reason" in written  # the scan finds the sink's constants
    missing = {name: where for name, where in written.items() if name not in documented_headers()}
    assert missing == {}


def test_every_documented_header_is_one_the_service_writes() -> None:
    assert documented_headers() - set(written_headers()) == set()


def test_the_shuffle_s_internal_headers_are_not_output_headers() -> None:
    assert {ROUTED, MARKER} & (documented_headers() | set(written_headers())) == set()
