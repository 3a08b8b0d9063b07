"""The console in a real browser (Debian's Chromium through Playwright) against the real
service on the embedded broker: what a person does with it, checked as they would see it.

Every wait is on a condition of the page (Playwright's ``expect`` and
``wait_for_function``), never a fixed sleep. On failure the ``browser`` fixture saves a
screenshot of every open page to a temporary directory named in the report.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from playwright.async_api import Page, expect

from tests.api.server import app_settings, create_topic, eventually, running_app, wait_ready
from tests.console.browser import Browser

pytestmark = pytest.mark.integration

TIMEOUT_MS = 30_000
expect.set_options(timeout=TIMEOUT_MS)


@dataclass
class Service:
    url: str
    bootstrap: str
    client: httpx.AsyncClient


@pytest.fixture
async def service(bootstrap_servers: str) -> AsyncIterator[Service]:
    """The service; ask for it before ``browser``, so the browser (and its live tail
    stream) is closed before the server stops."""
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        yield Service(url, bootstrap_servers, client)


def window_spec(name: str, source: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [source], "start_from": "earliest"},
        "key": {"field": "user"},
        "timestamp": {"field": "ts", "format": "epoch_millis"},
        "watermark": {"max_out_of_orderness_ms": 0, "interval_ms": 0},
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 1000},
            "aggregations": {
                "orders": {"fn": "count"},
                "revenue": {"fn": "sum", "field": "amount"},
            },
        },
        "sink": {"topic": f"{name}.out", "late_topic": f"{name}.late"},
    }


async def send(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    key: str = "u1",
    headers: list[tuple[str, bytes]] | None = None,
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for value in values:
            await producer.send(topic, key=key.encode(), value=value, headers=headers)
        await producer.flush()
    finally:
        await producer.stop()


def orders(*timestamps: int) -> list[bytes]:
    return [json.dumps({"user": "u1", "ts": ts, "amount": 2.5}).encode() for ts in timestamps]


BAD_SQL = """CREATE SOURCE orders (
  "user" VARCHAR, amount DOUBLE, ts BIGINT,
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (topic = '{source}');

INSERT INTO "bad.out"
SELECT "user", window_start, window_end, SUM(amont) AS revenue
FROM TUMBLE(orders, ts, INTERVAL '1' SECOND)
GROUP BY "user", window_start, window_end;
"""

JOIN_SQL = """CREATE SOURCE orders (id VARCHAR, ts BIGINT, WATERMARK FOR ts AS ts)
WITH (topic = '{left}', start_from = 'earliest');
CREATE SOURCE payments (id VARCHAR, ts BIGINT, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
WITH (topic = '{right}', start_from = 'earliest');

INSERT INTO "{name}.out"
SELECT o.id, p.ts - o.ts AS delay
FROM orders o JOIN payments p
  ON o.id = p.id
 AND p.ts BETWEEN o.ts AND o.ts + INTERVAL '1' MINUTE;
"""


async def type_spec(page: Page, spec: dict[str, Any] | str) -> str:
    text = spec if isinstance(spec, str) else json.dumps(spec, indent=2)
    await page.locator("#spec-text").fill(text)
    return text


def line_of(lines: list[str], path: list[Any]) -> int:
    """The line (from 1) of the deepest field of ``path`` in the indented JSON text."""
    found = 0
    for part in path:
        after = [i for i, text in enumerate(lines) if i > found and f'"{part}":' in text]
        if not after:
            break
        found = after[0]
    return found + 1


async def last_watermark(page: Page) -> int:
    value = await page.locator('svg[data-chart="watermark_lag"]').get_attribute(
        "data-last-watermark"
    )
    return int(value or 0)


async def test_create_watch_pause_resume_refuse_and_delete(
    service: Service, browser: Browser
) -> None:
    suffix = uuid.uuid4().hex[:8]
    source, name = f"orders-{suffix}", f"console-{suffix}"
    await create_topic(service.bootstrap, source, partitions=1)
    page = await browser.new_page()

    # Open the console: / leads to it, and it lists no pipeline yet.
    await page.goto(f"{service.url}/")
    await expect(page).to_have_url(f"{service.url}/ui/")
    await expect(page.locator("#pipelines")).to_be_visible()
    await expect(page.get_by_text("No pipelines yet")).to_be_visible()

    # Create a pipeline through the form.
    await page.get_by_role("link", name="New pipeline").click()
    await expect(page.locator("#editor-status")).to_have_text("Valid against /schema/pipeline")
    await type_spec(page, window_spec(name, source))
    await expect(page.locator("#editor-status")).to_have_text("Valid against /schema/pipeline")
    await page.get_by_role("button", name="Create pipeline").click()
    await expect(page).to_have_url(f"{service.url}/ui/#/pipelines/{name}")
    await expect(page.locator("#state [data-state]")).to_have_text("running")

    # Results arrive in the live tail, as formatted JSON with key and timestamp.
    base = (int(time.time() * 1000) - 10_000) // 1000 * 1000  # a window's start
    await send(service.bootstrap, source, orders(base, base + 100, base + 1500))
    result = page.locator('#tail article[data-kind="result"]').first
    await expect(result).to_be_visible()
    await expect(result.locator("code.key")).to_have_text("u1")
    value = json.loads(await result.locator("pre.value").inner_text())
    assert value["pipeline"] == name
    assert value["result"] == {"orders": 2, "revenue": 5.0}
    # ... and a record that is not JSON goes to the dead-letter topic, headers and all.
    await send(service.bootstrap, source, [b"not json"])
    dead = page.locator('#tail article[data-kind="dead_letter"]').first
    await expect(dead).to_be_visible()
    await expect(dead.locator(".headers")).to_contain_text("clockwork.reason")

    # The watermark chart moves with event time.
    await page.wait_for_function(
        """() => Number(document.querySelector('svg[data-chart="watermark_lag"]')
                       ?.dataset.lastWatermark) > 0"""
    )
    before = await last_watermark(page)
    await send(service.bootstrap, source, orders(base + 4000))
    await page.wait_for_function(
        f"""() => Number(document.querySelector('svg[data-chart="watermark_lag"]')
                        .dataset.lastWatermark) > {before}"""
    )
    assert (
        int(await page.locator('svg[data-chart="watermark_lag"]').get_attribute("data-points") or 0)
        > 1
    )
    # A payload key shuffles: the source's partition, then the shuffle's, by stage.
    for stage in ("route", "shuffled"):
        await expect(
            page.locator(f'#partitions section[data-stage="{stage}"] tr[data-partition]')
        ).to_have_count(1)

    # Pause and resume.
    await page.get_by_role("button", name="Pause").click()
    await expect(page.locator("#state [data-state]")).to_have_text("paused")
    assert (await service.client.get(f"/pipelines/{name}")).json()["paused"] is True
    await page.get_by_role("button", name="Resume").click()
    await expect(page.locator("#state [data-state]")).to_have_text("running")
    assert (await service.client.get(f"/pipelines/{name}")).json()["paused"] is False

    # An invalid spec: every problem the service names is shown next to its field.
    await page.get_by_role("link", name="New pipeline").click()
    bad = window_spec("Bad Name", source)
    bad["operator"]["assigner"] = {"type": "sliding", "size_ms": 0, "slide_ms": 10}
    bad["operator"]["aggregations"] = {"total": {"fn": "sum"}}
    bad["sink"] = {"topic": source}
    text = await type_spec(page, bad)
    await page.get_by_role("button", name="Create pipeline").click()
    refused = (await service.client.post("/pipelines", json=bad)).json()["detail"]
    assert len(refused) >= 4
    markers = page.locator(".problem[data-source=server]")
    await expect(markers).to_have_count(len(refused))
    lines = text.split("\n")
    for problem in refused:
        path = ".".join(str(part) for part in problem["loc"][1:])
        marker = page.locator(f'.problem[data-source=server][data-path="{path}"]')
        await expect(marker).to_be_visible()
        await expect(marker).to_contain_text(problem["msg"])
        assert await marker.get_attribute("data-line") == str(line_of(lines, problem["loc"][1:]))
    assert [p["name"] for p in (await service.client.get("/pipelines")).json()] == [name]

    # An invalid SQL script, as it is typed: each problem at its line; the list's
    # line:column moves the cursor there.
    await page.get_by_role("button", name="SQL", exact=True).click()
    script = BAD_SQL.format(source=source)
    await page.locator("#sql-text").fill(script)
    compiled = await service.client.post("/sql/compile", json={"sql": script})
    problem = compiled.json()["detail"][0]
    assert (problem["type"], problem["line"]) == ("sql_unknown_column", 7)
    marker = page.locator(".problem[data-source=compile]")
    await expect(marker).to_have_count(1)
    await expect(marker).to_have_attribute("data-line", "7")
    await expect(marker).to_contain_text(problem["msg"])
    gutter = page.locator('[data-editor="sql-text"] .gutter [data-line="7"]')
    await expect(gutter).to_have_class("bad")
    await page.locator("#problems li button.where").click()
    lines = script.split("\n")
    offset = sum(len(row) + 1 for row in lines[:6]) + problem["column"] - 1
    assert lines[6][problem["column"] - 1 :].startswith("amont")
    await page.wait_for_function(
        f"() => document.activeElement.id === 'sql-text'"
        f" && document.activeElement.selectionStart === {offset}"
    )

    # Delete, after a confirmation.
    await page.goto(f"{service.url}/ui/#/pipelines/{name}")
    await page.get_by_role("button", name="Delete").click()
    await page.locator("#confirm-ok").click()
    await expect(page).to_have_url(f"{service.url}/ui/#/")
    await expect(page.locator(f'tr[data-pipeline="{name}"]')).to_have_count(0)
    assert (await service.client.get(f"/pipelines/{name}")).status_code == 404


async def test_with_a_token_the_console_asks_for_it_before_it_shows_data(
    bootstrap_servers: str, browser: Browser
) -> None:
    suffix = uuid.uuid4().hex[:8]
    source, name = f"orders-{suffix}", f"secret-{suffix}"
    await create_topic(bootstrap_servers, source, partitions=1)
    settings = app_settings(bootstrap_servers, api_token="console-token")
    auth = {"Authorization": "Bearer console-token"}
    async with running_app(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30, headers=auth) as client:
            await wait_ready(client)
            created = await client.post("/pipelines", json=window_spec(name, source))
            assert created.status_code == 201, created.text
        page = await browser.new_page()
        # The list asks before it shows anything; a wrong token is asked again.
        await page.goto(f"{url}/ui/")
        await expect(page.locator("#token-dialog")).to_be_visible()
        await expect(page.locator("#token-reason")).to_contain_text("to show its data")
        await expect(page.locator(f'tr[data-pipeline="{name}"]')).to_have_count(0)
        await page.locator("#token-input").fill("wrong")
        await page.locator("#token-ok").click()
        await expect(page.locator("#token-reason")).to_contain_text("refused")
        await expect(page.locator(f'tr[data-pipeline="{name}"]')).to_have_count(0)
        await page.locator("#token-input").fill("console-token")
        await page.locator("#token-ok").click()
        await expect(page.locator(f'tr[data-pipeline="{name}"]')).to_have_count(1)
        await expect(page.locator("#token-dialog")).not_to_be_visible()

        # The pipeline's page and its live tail (no EventSource: it cannot send the
        # token) use it without asking again.
        await page.goto(f"{url}/ui/#/pipelines/{name}")
        await expect(page.locator("#tail-info")).to_contain_text("live:")
        await expect(page.locator("#token-dialog")).not_to_be_visible()
        await page.close()  # its live tail too, before the server stops


async def test_with_a_token_and_open_reads_the_console_asks_once_for_changes(
    bootstrap_servers: str, browser: Browser
) -> None:
    suffix = uuid.uuid4().hex[:8]
    source, name = f"orders-{suffix}", f"guarded-{suffix}"
    await create_topic(bootstrap_servers, source, partitions=1)
    settings = app_settings(bootstrap_servers, api_token="console-token", api_read_open=True)
    async with running_app(settings) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            await wait_ready(client)
        page = await browser.new_page()
        # Reading needs no token: the list shows without a question.
        await page.goto(f"{url}/ui/")
        await expect(page.get_by_text("No pipelines yet")).to_be_visible()
        await expect(page.locator("#token-dialog")).not_to_be_visible()

        # The first change asks for the token; a wrong one is asked again.
        await page.get_by_role("link", name="New pipeline").click()
        await type_spec(page, window_spec(name, source))
        await page.get_by_role("button", name="Create pipeline").click()
        await expect(page.locator("#token-dialog")).to_be_visible()
        await page.locator("#token-input").fill("wrong")
        await page.locator("#token-ok").click()
        await expect(page.locator("#token-reason")).to_contain_text("refused")
        await page.locator("#token-input").fill("console-token")
        await page.locator("#token-ok").click()
        await expect(page).to_have_url(f"{url}/ui/#/pipelines/{name}")

        # Later changes use it without asking.
        await page.get_by_role("button", name="Pause").click()
        await expect(page.locator("#state [data-state]")).to_have_text("paused")
        await expect(page.locator("#token-dialog")).not_to_be_visible()
        await page.get_by_role("button", name="Delete").click()
        await page.locator("#confirm-ok").click()
        await expect(page).to_have_url(f"{url}/ui/#/")
        await page.close()  # its live tail too, before the server stops


async def test_a_sql_join_creates_its_pipeline_whose_page_shows_the_script_and_both_inputs(
    service: Service, browser: Browser
) -> None:
    suffix = uuid.uuid4().hex[:8]
    left, right, name = f"orders-{suffix}", f"payments-{suffix}", f"join-{suffix}"
    for topic in (left, right):
        await create_topic(service.bootstrap, topic, partitions=1)
    page = await browser.new_page()
    await page.goto(f"{service.url}/ui/#/new")
    await page.get_by_role("button", name="SQL", exact=True).click()
    await page.locator("#pipeline-name").fill(name)
    script = JOIN_SQL.format(left=left, right=right, name=name)
    await page.locator("#sql-text").fill(script)
    await expect(page.locator("#editor-status")).to_have_text("Compiles (POST /sql/compile)")
    await page.locator("#compiled summary").click()
    compiled = json.loads(await page.locator("#compiled-spec").inner_text())
    assert sorted(compiled["inputs"]) == ["orders", "payments"]
    await page.get_by_role("button", name="Create pipeline").click()
    await expect(page).to_have_url(f"{service.url}/ui/#/pipelines/{name}")

    # The view shows the script as written, and the spec it compiled to on demand.
    await expect(page.locator("#sql-script")).to_have_text(script)
    await page.locator("#compiled-view summary").click()
    shown = json.loads(await page.locator("#spec").inner_text())
    assert shown == (await service.client.get(f"/pipelines/{name}")).json()["spec"]

    # Both inputs with their topics and watermarks (WATERMARK FOR ts AS ts - n: the
    # newest ts less n), and the join's W, their minimum.
    base = int(time.time() * 1000) - 60_000
    await send(service.bootstrap, left, [json.dumps({"id": "o1", "ts": base + 5000}).encode()])
    await send(service.bootstrap, right, [json.dumps({"id": "o1", "ts": base + 3000}).encode()])
    orders_row = page.locator('#inputs tr[data-input="orders"]')
    payments_row = page.locator('#inputs tr[data-input="payments"]')
    await expect(orders_row.locator('[data-field="topics"]')).to_have_text(left)
    await expect(payments_row.locator('[data-field="topics"]')).to_have_text(right)
    await expect(orders_row.locator('[data-field="watermark"]')).to_have_attribute(
        "data-value", str(base + 5000)
    )
    await expect(payments_row.locator('[data-field="watermark"]')).to_have_attribute(
        "data-value", str(base + 3000 - 1000)
    )
    await expect(page.locator('#inputs [data-field="join_watermark"]')).to_have_attribute(
        "data-value", str(base + 3000 - 1000)
    )


async def test_the_tail_shows_a_late_record_s_own_headers_and_a_binary_one_as_hex(
    service: Service, browser: Browser
) -> None:
    """A shuffled pipeline (keyed by a payload field): a record behind the watermark
    reaches the late topic with its producer's headers, where the live tail shows a
    header value that is not UTF-8 as hex (0x, marked), a text one as text, the
    documented clockwork.* ones, and not the shuffle's internal header."""
    suffix = uuid.uuid4().hex[:8]
    source, name = f"orders-{suffix}", f"late-{suffix}"
    await create_topic(service.bootstrap, source, partitions=1)
    created = await service.client.post("/pipelines", json=window_spec(name, source))
    assert created.status_code == 201, created.text
    page = await browser.new_page()
    await page.goto(f"{service.url}/ui/#/pipelines/{name}")
    await expect(page.locator("#state [data-state]")).to_have_text("running")

    base = (int(time.time() * 1000) - 60_000) // 1000 * 1000
    await send(service.bootstrap, source, orders(base + 5000))
    await page.wait_for_function(
        f"""() => Number(document.querySelector('svg[data-chart="watermark_lag"]')
                        ?.dataset.lastWatermark) >= {base + 4999}"""
    )
    binary = [("trace", b"t-1"), ("blob", b"\xff\x00\xfe")]
    await send(service.bootstrap, source, orders(base), headers=binary)

    late = page.locator('#tail article[data-kind="late"]').first
    await expect(late).to_be_visible()
    blob = late.locator('li[data-header="blob"] .header-value')
    await expect(blob).to_have_text("0xff00fe")
    await expect(blob).to_have_class(re.compile(r"\bhex\b"))
    trace = late.locator('li[data-header="trace"] .header-value')
    await expect(trace).to_have_text("t-1")
    await expect(trace).not_to_have_class(re.compile(r"\bhex\b"))
    await expect(late.locator('li[data-header="clockwork.reason"] .header-value')).to_have_text(
        "late"
    )
    await expect(late.locator('li[data-header="clockwork.shuffle"]')).to_have_count(0)
    shown = await late.locator(".headers li").evaluate_all(
        "items => items.map(item => item.dataset.header)"
    )
    assert shown == [
        "trace",
        "blob",
        "clockwork.pipeline",
        "clockwork.reason",
        "clockwork.watermark",
        "clockwork.timestamp",
    ]
    await page.close()  # its live tail too, before the server stops


async def test_a_pipeline_page_looks_up_a_key_and_a_table_shows_its_rows(
    service: Service, browser: Browser
) -> None:
    """The "look up a key" box shows a window's partial aggregate as of where it is, and
    a key with no state as not found; a running aggregate's page lists its rows by key,
    refreshing as new records change them."""
    suffix = uuid.uuid4().hex[:8]
    source, name, table = f"orders-{suffix}", f"lookup-{suffix}", f"totals-{suffix}"
    await create_topic(service.bootstrap, source, partitions=1)
    spec = window_spec(name, source)
    spec["operator"]["assigner"]["size_ms"] = 3_600_000
    assert (await service.client.post("/pipelines", json=spec)).status_code == 201
    totals = {
        "name": table,
        "source": {"topics": [source], "start_from": "earliest"},
        "key": {"field": "user"},
        "operator": {
            "type": "aggregate",
            "aggregations": {"orders": {"fn": "count"}},
            "emit_interval_ms": 100,
        },
        "sink": {"topic": f"{table}.out"},
    }
    assert (await service.client.post("/pipelines", json=totals)).status_code == 201
    base = int(time.time() * 1000) // 3_600_000 * 3_600_000
    await send(service.bootstrap, source, orders(base + 1, base + 2))

    page = await browser.new_page()
    await page.goto(f"{service.url}/ui/#/pipelines/{name}")
    await expect(page.locator("#table-rows")).to_have_count(0)  # not a table pipeline
    result = page.locator("#lookup-result")
    info = page.locator("#lookup-info")

    async def both_counted() -> bool:
        answer = await service.client.get(f"/pipelines/{name}/state/u1")
        state = answer.json().get("state") if answer.status_code == 200 else None
        return bool(state) and state["windows"][0]["result"]["orders"] == 2

    await eventually(both_counted)
    await page.locator("#lookup-key").fill("u1")
    await page.locator("#lookup-go").click()
    await expect(info).to_have_attribute("data-found", "true")
    assert json.loads(await result.text_content() or "")["windows"][0]["result"] == {
        "orders": 2,
        "revenue": 5.0,
    }
    await page.locator("#lookup-key").fill("nobody/?")
    await page.locator("#lookup-go").click()
    await expect(info).to_have_attribute("data-found", "false")
    await expect(result).to_be_hidden()

    await page.goto(f"{service.url}/ui/#/pipelines/{table}")
    await expect(page.locator('#table-rows tr[data-key="u1"] td').nth(1)).to_have_text("2")
    await send(service.bootstrap, source, orders(base + 3))
    await expect(page.locator('#table-rows tr[data-key="u1"] td').nth(1)).to_have_text("3")
