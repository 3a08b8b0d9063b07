"""A pipeline written in SQL gives, through the broker, exactly the results of the same
pipeline written as JSON (#32): both created over the REST API on the same input, read
from their result topics, compared window by window; and the API returns the script."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.api.server import (
    TopicReader,
    app_settings,
    create_topic,
    eventually,
    produce,
    running_app,
    wait_ready,
)

pytestmark = pytest.mark.integration

SQL = """CREATE SOURCE orders (
  "user" VARCHAR, product VARCHAR, amount DOUBLE, status VARCHAR, ts BIGINT,
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (topic = '{source}', bounded = true);

INSERT INTO "{sink}"
SELECT "user", window_start, window_end, COUNT(*) AS orders,
       SUM(amount * 2) AS doubled, COUNT(DISTINCT product) AS products
FROM TUMBLE(orders, ts, INTERVAL '10' SECOND)
WHERE status = 'paid'
GROUP BY "user", window_start, window_end;
"""


def json_spec(name: str, source: str) -> dict[str, Any]:
    """The same pipeline as a user writes it in JSON."""
    return {
        "name": name,
        "source": {"topics": [source], "bounded": True},
        "steps": [{"filter": "status = 'paid'"}, {"set": {"doubled": "amount * 2"}}],
        "key": {"field": "user"},
        "timestamp": {"field": "ts", "format": "epoch_millis"},
        # WATERMARK FOR ts AS ts - INTERVAL '2' SECOND: Flink SQL's max(ts) - 2000, which
        # is the bound 1999 (docs/sql.md).
        "watermark": {"strategy": "bounded_out_of_orderness", "max_out_of_orderness_ms": 1999},
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 10000},
            "aggregations": {
                "orders": {"fn": "count"},
                "doubled": {"fn": "sum", "field": "doubled"},
                "products": {"fn": "count_distinct", "field": "product"},
            },
        },
        "sink": {"topic": f"{name}.out"},
    }


def orders() -> list[tuple[str, dict[str, Any]]]:
    """Out of order within the bound, some not paid, three users over several windows."""
    records = []
    for i in range(120):
        user = f"u{i % 3}"
        ts = 1_000_000 + i * 700 - (1500 if i % 4 == 0 else 0)
        records.append(
            (
                user,
                {
                    "user": user,
                    "product": f"p{i % 5}",
                    "amount": float(i % 7) + 0.5,
                    "status": "paid" if i % 3 != 1 or i % 2 == 0 else "open",
                    "ts": ts,
                },
            )
        )
    return records


def windows_expected(records: list[tuple[str, dict[str, Any]]]) -> set[tuple[str, int]]:
    """The (key, window start) of every window with a paid order."""
    return {
        (value["user"], value["ts"] // 10000 * 10000)
        for _, value in records
        if value["status"] == "paid"
    }


async def test_a_sql_pipeline_gives_the_results_of_the_same_pipeline_in_json(
    bootstrap_servers: str,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    source = f"sql-orders-{suffix}"
    sql_name, json_name = f"sql-{suffix}", f"json-{suffix}"
    await create_topic(bootstrap_servers, source, partitions=2)
    records = orders()
    await produce(bootstrap_servers, source, records)
    script = SQL.format(source=source, sink=f"{sql_name}.out")
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        compiled = await client.post("/sql/compile", json={"name": sql_name, "sql": script})
        assert compiled.status_code == 200, compiled.text
        created = await client.post("/pipelines", json={"name": sql_name, "sql": script})
        assert created.status_code == 201, created.text
        assert created.json()["spec"] == compiled.json()["spec"]
        assert (
            await client.post("/pipelines", json=json_spec(json_name, source))
        ).status_code == 201
        shown = (await client.get(f"/pipelines/{sql_name}")).json()
        assert shown["sql"] == script
        assert shown["spec"] == compiled.json()["spec"]

        expected = windows_expected(records)
        results = {}
        for name in (sql_name, json_name):
            async with TopicReader(bootstrap_servers, f"{name}.out") as reader:
                seen: dict[str, dict[str, Any]] = {}

                async def every_window(seen: dict[str, dict[str, Any]] = seen) -> bool:
                    for record in await reader.poll():
                        seen[record["id"].split("|", 1)[1]] = record
                    return len(seen) >= len(expected)

                await eventually(every_window, timeout_s=60)
                results[name] = {
                    window: (r["key"], r["window"], r["result"], r["fire"])
                    for window, r in seen.items()
                }
    assert results[sql_name] == results[json_name]
    assert {(key, window["start"]) for key, window, _, _ in results[sql_name].values()} == expected


NO_WATERMARK_HAVING_UNKNOWN_COLUMN = """CREATE SOURCE orders (
  "user" VARCHAR, amount DOUBLE, ts BIGINT
) WITH (topic = '{source}');
INSERT INTO "{sink}"
SELECT "user", window_start, window_end, SUM(no_such_column) AS revenue
FROM TUMBLE(orders, ts, INTERVAL '1' MINUTE)
GROUP BY "user", window_start, window_end
HAVING COUNT(*) > 1;
"""


async def test_the_422_of_a_sql_body_names_every_problem_at_its_place(
    bootstrap_servers: str,
) -> None:
    """Issue 47: a window over a source without WATERMARK, a HAVING and an unknown
    column; the 422 named the first two, the column only once the watermark was added."""
    suffix = uuid.uuid4().hex[:8]
    name = f"sql-problems-{suffix}"
    script = NO_WATERMARK_HAVING_UNKNOWN_COLUMN.format(
        source=f"sql-orders-{suffix}", sink=f"{name}.out"
    )
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        for path in ("/pipelines", "/sql/compile"):
            response = await client.post(path, json={"name": name, "sql": script})
            assert response.status_code == 422, (path, response.text)
            detail = response.json()["detail"]
            assert [(e["type"], e["statement"], e["line"], e["column"]) for e in detail] == [
                ("sql_unknown_column", 2, 5, 46),
                ("sql_no_watermark", 2, 6, 6),
                ("sql_unsupported", 2, 8, 1),
            ], path
            assert all(e["loc"] == ["body", "sql"] for e in detail)
        assert (await client.get(f"/pipelines/{name}")).status_code == 404
