"""The console's examples (service/api/console/examples.json): the README's pipeline and
those of docs/pipeline-spec.md, so what a user starts from is what the docs explain.

``python -m tests.console.examples`` rewrites the file from the docs; a test keeps the
two in step.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "service" / "api" / "console" / "examples.json"


def expected_examples() -> list[dict[str, Any]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = re.search(r"-XPOST localhost:8000/pipelines .*?-d '(\{.*?\})'", readme, re.S)
    if tour is None:
        raise LookupError("the README's tour no longer creates a pipeline with curl")
    docs = (ROOT / "docs" / "pipeline-spec.md").read_text(encoding="utf-8")
    specs = [json.loads(tour.group(1))]
    specs += [json.loads(block) for block in re.findall(r"```json\n(.*?)```", docs, re.S)]
    examples: list[dict[str, Any]] = []
    seen: set[str] = set()
    for spec in specs:
        if spec["name"] in seen:
            continue
        seen.add(spec["name"])
        operator = spec["operator"]
        if operator["type"] == "join":
            kind = f"{operator['kind']} {operator.get('how', 'inner')}"
        elif operator["type"] == "map":
            kind = "stateless"
        elif operator["type"] == "aggregate":
            kind = "running"
        elif operator["type"] == "top_n":
            kind = f"top {operator['n']}"
        else:
            kind = operator.get("assigner", {}).get("type") or operator["function"]
        examples.append(
            {"title": f"{spec['name']} ({spec['operator']['type']}, {kind})", "spec": spec}
        )
    return examples


if __name__ == "__main__":
    EXAMPLES.write_text(json.dumps(expected_examples(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {EXAMPLES}")
