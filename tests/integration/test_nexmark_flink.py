"""The Nexmark queries Clockwork's SQL runs, checked against Flink SQL (#33): each
script of ``benchmarks/nexmark/sql`` posted to the service, as a user runs it, on the
generator's events (:mod:`benchmarks.nexmark.generate`) through the broker, and the same
query in Flink SQL on the same events (JSON-lines files, as in test_sql_flink.py),
compared row for row; and with the straightforward Python answer of
:mod:`benchmarks.nexmark.reference` too, each side's cells normalised as the bench's
(:func:`benchmarks.nexmark.check.cell`).

The events: 3,000 (60 persons, 180 auctions, 2,760 bids) at 100 events/s of event time,
so the 30 s they span hold several 10 s windows and sessions (the reference's 10,000
events/s would put them all in one window). Each kind in one single-partition topic
(one file for Flink), in event-time order, as the generator writes them.

Flink reading Kafka, as the bench's "Flink (Kafka)" column runs it (issue #51): a few
queries with Flink's tables over the generator's topics on the suite's Apache Kafka
broker (:func:`benchmarks.nexmark.queries.flink_kafka_tables`, the connector jar of
``make flink-kafka``), bounded, their rows the reference's. Not on Tansu: Flink's Kafka
source does not run against it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.nexmark.check import (
    COLUMNS,
    changelog_folded,
    clockwork_rows,
    difference,
    folded,
    normalised,
    reference,
)
from benchmarks.nexmark.generate import KINDS, NexmarkConfig, by_kind, produce
from benchmarks.nexmark.jobs import connector_jars
from benchmarks.nexmark.queries import (
    QUERIES,
    Query,
    flink_kafka_tables,
    flink_table,
    pipeline,
    stages,
)
from tests.api.server import app_settings, eventually, running_app, wait_ready
from tests.integration.flink_sql import FlinkSql
from tests.integration.kafka_utils import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.flink]

CONFIG = NexmarkConfig(events=3000, rate=100, seed=33)
Row = tuple[Any, ...]


@pytest.fixture(scope="module")
def event_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each kind's events as Flink reads them: JSON lines, ``dateTime`` as ``dateTime_ms``."""
    folder = tmp_path_factory.mktemp("nexmark")
    paths = {}
    for kind, found in by_kind(CONFIG).items():
        paths[kind] = folder / f"{kind}.json"
        with paths[kind].open("w") as out:
            for e in found:
                record = {k: v for k, v in e.record.items() if k != "dateTime"}
                out.write(json.dumps({**record, "dateTime_ms": e.record["dateTime"]}) + "\n")
    return paths


@pytest.fixture(scope="module")
def flink_answers() -> Iterator[dict[str, tuple[list[str], list[Row]]]]:
    """Per query, Flink's columns and sorted rows; filled by the query's first test."""
    yield {}


def _flink_rows(
    query: Query,
    flink: FlinkSql,
    answers: dict[str, tuple[list[str], list[Row]]],
    files: dict[str, Path],
) -> tuple[list[str], list[Row]]:
    if query.name not in answers:
        tables = [flink_table(kind, files[kind]) for kind in query.tables]
        if query.updating:  # its changelog folded into the final table
            columns, values, kinds = flink.changelog(tables, query.flink)
            values = changelog_folded(values, kinds)
        else:
            columns, values = flink.query(tables, query.flink)
        answers[query.name] = (columns, normalised(values))
    return answers[query.name]


async def _clockwork_records(query: Query, bootstrap_servers: str) -> list[dict[str, Any]]:
    """The query's script posted to the service, run to the end of its bounded input
    (after the queries whose results it reads, each run to its end first); every record
    of its result topic (an updating query's: its upserts folded into its table)."""
    prefix = f"nexmark-{uuid.uuid4().hex[:8]}"
    await produce(bootstrap_servers, {k: f"{prefix}.{k}" for k in KINDS}, CONFIG)
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        for stage in stages(query):
            name = f"{prefix}-{stage.name.replace('_', '-')}"
            created = await client.post("/pipelines", json=pipeline(stage, prefix, name))
            assert created.status_code == 201, created.text

            async def finished(name: str = name) -> bool:
                status = (await client.get(f"/pipelines/{name}/status")).json()
                assert status["state"] != "failed", status
                return bool(status["state"] == "finished")

            await eventually(finished, timeout_s=90)
    # Finished: every result is written (the sink flushed before the state changed).
    out = f"{prefix}.{query.name}"
    found = await read_topic(bootstrap_servers, out)
    if query.updating:
        return folded((r.key, None if r.value is None else json.loads(r.value)) for r in found)
    return [json.loads(r.value) for r in found]


FLINK_RUNS = [q for q in QUERIES if q.flink]
BEAM_ONLY = [q for q in QUERIES if not q.flink]
"""q6: Beam's Query6, which Flink does not run (its text's OVER window over an updating
join: Flink's OVER window cannot take retractions), checked against the reference."""


@pytest.mark.parametrize("query", FLINK_RUNS, ids=[q.name for q in FLINK_RUNS])
async def test_a_nexmark_query_gives_the_rows_of_flink_sql(
    query: Query,
    bootstrap_servers: str,
    flink: FlinkSql,
    flink_answers: dict[str, tuple[list[str], list[Row]]],
    event_files: dict[str, Path],
) -> None:
    columns, want = _flink_rows(query, flink, flink_answers, event_files)
    assert len(want) > 1, f"Flink gave {len(want)} rows: the query checks little"
    assert columns == list(COLUMNS[query.name])
    records = await _clockwork_records(query, bootstrap_servers)
    for record in records:  # a window's result: fired once, on time
        if "window" in record and "result" in record:
            assert (record["fire"], record["seq"]) == ("on_time", 0), record
    got = clockwork_rows(query, records)
    missing = sorted(set(want) - set(got), key=repr)
    extra = sorted(set(got) - set(want), key=repr)
    assert got == want, f"Flink only: {missing[:20]}\nClockwork only: {extra[:20]}"
    answer = reference(query, by_kind(CONFIG))
    assert got == answer, difference(got, answer)


@pytest.mark.parametrize("query", BEAM_ONLY, ids=[q.name for q in BEAM_ONLY])
async def test_a_nexmark_query_flink_does_not_run_gives_the_references_rows(
    query: Query, bootstrap_servers: str
) -> None:
    answer = reference(query, by_kind(CONFIG))
    assert len(answer) > 1, f"the reference gives {len(answer)} rows: the query checks little"
    got = clockwork_rows(query, await _clockwork_records(query, bootstrap_servers))
    assert got == answer, difference(got, answer)


FROM_KAFKA = [q for q in QUERIES if q.name in ("q3", "q4", "q5")]
"""Flink reading Kafka: a join of two topics (q3), an updating query (q4, its changelog
folded) and sliding windows joined with their maximum (q5)."""


@pytest.mark.requires_broker("flink_kafka_source")
@pytest.mark.parametrize("query", FROM_KAFKA, ids=[q.name for q in FROM_KAFKA])
async def test_flink_reading_the_topics_from_kafka_gives_the_references_rows(
    query: Query, bootstrap_servers: str, flink: FlinkSql
) -> None:
    prefix = f"nexmark-{uuid.uuid4().hex[:8]}"
    await produce(bootstrap_servers, {k: f"{prefix}.{k}" for k in KINDS}, CONFIG)
    tables = [
        statement
        for kind in query.tables
        for statement in flink_kafka_tables(
            kind, f"{prefix}.{kind}", bootstrap_servers, f"{prefix}-flink"
        )
    ]
    config = {"pipeline.jars": ";".join(j.as_uri() for j in connector_jars())}
    if query.updating:  # its changelog folded into the final table
        columns, values, kinds = flink.changelog(tables, query.flink, config)
        values = changelog_folded(values, kinds)
    else:
        columns, values = flink.query(tables, query.flink, config)
    assert columns == list(COLUMNS[query.name])
    answer = reference(query, by_kind(CONFIG))
    assert len(answer) > 1, f"the reference gives {len(answer)} rows: the query checks little"
    got = normalised(values)
    assert got == answer, difference(got, answer)
