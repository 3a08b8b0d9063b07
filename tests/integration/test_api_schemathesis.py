"""Schemathesis against the running service: every check, stateless and stateful.

The service runs as in production with a token (so the bearer scheme is in the OpenAPI
document and ``ignored_auth`` has something to check) on each broker. Schemathesis
runs its CLI in a subprocess (the full engine: the coverage, fuzzing and stateful phases,
``--checks all``) with ``tests/api/schemathesis_hooks.py``, which only teaches the
generator the rules no JSON Schema can state, for positive cases (docs/pipeline-spec.md,
"What the schema says, and what it cannot"), and what the broker under test lacks
(exactly-once on Tansu, which the service rightly refuses); no check is left out or
reconfigured.

Then every pipeline the run created and left must be running (or paused, or finished):
a spec the service accepted and its runtime refuses is a spec the API should have refused.

Without ``CLOCKWORK_SCHEMATHESIS_SEED`` (``make test``) the run is deterministic
(``--generation-deterministic``: the same examples every run, so the same code gets the
same verdict), and every operation of the document must have been requested. With it
(``make fuzz``, a fresh seed each time, printed with the command that repeats the run)
the search is random from that seed. ``CLOCKWORK_SCHEMATHESIS_EXAMPLES`` (default 60 per
operation) sets the examples.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.api.server import app_settings, running_app, wait_ready
from tests.conftest import MISSING_FEATURES

pytestmark = [pytest.mark.integration, pytest.mark.fuzz]

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "schemathesis-token"


async def test_schemathesis_finds_no_failure(
    bootstrap_servers: str, broker_name: str, tmp_path: Path
) -> None:
    settings = app_settings(bootstrap_servers, api_token=TOKEN, kafka_fetch_max_wait_ms=20)
    events = tmp_path / "events.ndjson"
    command = [
        str(Path(sys.executable).with_name("st")),
        "--config-file",
        str(ROOT / "tests" / "api" / "schemathesis.toml"),
        "run",
        "--checks",
        "all",
        "--header",
        f"Authorization: Bearer {TOKEN}",
        "--max-examples",
        os.environ.get("CLOCKWORK_SCHEMATHESIS_EXAMPLES", "60"),
        "--workers",
        "1",
        "--request-timeout",
        "30",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--report",
        "ndjson",
        "--report-ndjson-path",
        str(events),
    ]
    seed = os.environ.get("CLOCKWORK_SCHEMATHESIS_SEED")
    command += ["--generation-deterministic"] if seed is None else ["--seed", seed]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.api.schemathesis_hooks",
        "CLOCKWORK_SCHEMATHESIS_BROKER_LACKS": ",".join(MISSING_FEATURES[broker_name]),
        "PYTHONPATH": str(ROOT),
    }
    async with (
        running_app(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        process = await asyncio.create_subprocess_exec(
            *command,
            f"{url}/openapi.json",
            cwd=tmp_path,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await process.communicate()
        report = output.decode(errors="replace")
        assert process.returncode == 0, report
        requests, checks, requested = _tally(events)
        mode = "deterministic" if seed is None else f"seed {seed}"
        print(f"\nschemathesis ({mode}): {requests} requests, {sum(checks.values())} checks")
        for (check, status), count in sorted(checks.items()):
            print(f"  {check}: {count} {status}")
        print("\n".join(report.splitlines()[-3:]))
        assert requests > 0
        assert not [name for name, status in checks if status != "success"], checks
        doc = (await client.get("/openapi.json")).json()
        operations = {(m.upper(), path) for path, ops in doc["paths"].items() for m in ops}
        assert operations - requested == set(), "operations the run never requested"

        auth = {"Authorization": f"Bearer {TOKEN}"}  # a data read needs the token
        pipelines = (await client.get("/pipelines", headers=auth)).json()
        # A source topic that does not exist is not a refused spec: the topic may come
        # later, and the pipeline says so in its status (on a broker that creates no
        # topic on request, as Apache Kafka here, every generated topic is such a one).
        failed = {
            p["name"]: (p["status"]["reason"], p["spec"])
            for p in pipelines
            if p["status"]["state"] == "failed"
            and "source topic(s) do not exist" not in (p["status"]["reason"] or "")
        }
        assert failed == {}, "accepted specs that the runtime refuses"


def _tally(events: Path) -> tuple[int, Counter[tuple[str, str]], set[tuple[str, str]]]:
    """Requests sent, check results by (check, status), and the operations (method, path
    template) requested, from the run's event log."""
    requests = 0
    checks: Counter[tuple[str, str]] = Counter()
    requested: set[tuple[str, str]] = set()
    for line in events.read_text().splitlines():
        finished = json.loads(line).get("ScenarioFinished")
        if finished is None:
            continue
        recorder = finished["recorder"]
        interactions = recorder.get("interactions", {})
        requests += len(interactions)
        for case_id in interactions:
            case = recorder["cases"][case_id]["value"]
            requested.add((case["method"].upper(), case["path"]))
        for results in recorder.get("checks", {}).values():
            checks.update((result["name"], result["status"]) for result in results)
    return requests, checks, requested
