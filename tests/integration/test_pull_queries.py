"""Pull queries (docs/pull-queries.md) on a real server and broker: every lookup equals
the oracle's partial aggregates at the offset and watermark the answer names, asked of
the replica that holds the key and of the one that does not (routed), and of a replica
with two workers; a paused pipeline answers as of where it stopped; keys that do not
exist, that need encoding, or that are longer than 1 KB answer plainly; the token guards
them; a scan pages through every key in order."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from service.core.partitioner import partition_for
from tests.api.server import app_settings, create_topic, eventually, running_app, wait_ready
from tests.integration.kafka_utils import json_record, produce
from tests.integration.test_api_replicas import in_process_replica, process_replica, service_process

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

PARTITIONS = 2
WINDOW_MS = 10_000
KEYS = ["user-1", "user/2", "ü ñ?&#%=+", "k" * 1100, "user-5", "user-6"]


def window_spec(name: str, source: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [source]},
        "timestamp": {"field": "ts"},
        "watermark": {"max_out_of_orderness_ms": 1000, "interval_ms": 50},
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": WINDOW_MS},
            "aggregations": {"n": {"fn": "count"}, "total": {"fn": "sum", "field": "amount"}},
        },
        "sink": {"topic": f"{name}.out"},
    }


Sent = list[tuple[str, int, int, int, int]]
"""``(key, ts, amount, partition, offset)`` of every record sent."""


async def send(bootstrap: str, topic: str, sent: Sent, wave: int, count: int) -> None:
    """``count`` records over :data:`KEYS`, each in the partition Kafka's default
    partitioner gives its key, timestamps rising per key (none is ever late)."""
    offsets: dict[int, int] = defaultdict(int)
    for _, _, _, partition, offset in sent:
        offsets[partition] = max(offsets[partition], offset + 1)
    records = []
    for i in range(count):
        key = KEYS[i % len(KEYS)]
        ts = wave * 30_000 + i * 400
        amount = i % 7 + 1
        partition = partition_for(key.encode(), PARTITIONS)
        records.append(json_record(partition, key, {"ts": ts, "amount": amount}))
        sent.append((key, ts, amount, partition, offsets[partition]))
        offsets[partition] += 1
    await produce(bootstrap, topic, records)


def oracle(sent: Sent, key: str, offset: int, watermark: int | None) -> list[dict[str, Any]]:
    """The key's windows not fired at ``watermark``, over its records before ``offset``."""
    windows: dict[int, list[int]] = defaultdict(list)
    for k, ts, amount, _, at in sent:
        if k == key and at < offset:
            start = ts - ts % WINDOW_MS
            if watermark is None or start + WINDOW_MS - 1 > watermark:
                windows[start].append(amount)
    return [
        {"start": s, "end": s + WINDOW_MS, "result": {"n": len(xs), "total": sum(xs)}, "fires": 0}
        for s, xs in sorted(windows.items())
    ]


def url_of(name: str, key: str) -> str:
    return f"/pipelines/{name}/state/{quote(key, safe='')}"


async def lookup(client: httpx.AsyncClient, name: str, key: str) -> dict[str, Any] | None:
    response = await client.get(url_of(name, key))
    if response.status_code == 503:
        assert response.headers["retry-after"] == "1"
        return None
    assert response.status_code == 200, response.text
    return dict(response.json())


def check(answer: dict[str, Any], sent: Sent, key: str) -> None:
    """The answer equals the oracle at the offset and watermark it names."""
    as_of = answer["as_of"]
    assert as_of["partition"] == partition_for(key.encode(), PARTITIONS)
    expected = oracle(sent, key, as_of["offset"] or 0, as_of["watermark"])
    assert answer["key"] == key
    assert answer["kind"] == "window"
    assert answer["found"] is bool(expected)
    assert (answer["state"] or {"windows": []})["windows"] == expected


async def settled(clients: list[httpx.AsyncClient], name: str, sent: Sent) -> list[Any]:
    """Every key's answer from every client, once each names the offset of the last
    record sent to its partition and a second round answers the same (the watermark, a
    minimum over the partitions recomputed on a timer, may move after the last record is
    in); each checked against the oracle on the way."""
    ends: dict[int, int] = defaultdict(int)
    for _, _, _, partition, offset in sent:
        ends[partition] = max(ends[partition], offset + 1)
    previous: list[Any] = []

    async def all_caught_up() -> list[Any] | None:
        answers = []
        for client in clients:
            for key in KEYS:
                answer = await lookup(client, name, key)
                if answer is None:
                    return None
                check(answer, sent, key)
                if answer["as_of"]["offset"] != ends[answer["as_of"]["partition"]]:
                    return None
                answers.append(answer)
        if answers != previous:  # caught up: the next round must answer the same
            previous[:] = answers
            return None
        return answers

    found: list[Any] = await eventually(all_caught_up, timeout_s=90)
    return found


async def test_lookups_through_either_of_two_replicas_equal_the_oracle_at_the_named_offset(
    bootstrap_servers: str,
) -> None:
    source = f"pq-{uuid.uuid4().hex[:8]}"
    name = source
    await create_topic(bootstrap_servers, source, partitions=PARTITIONS)
    settings = app_settings(bootstrap_servers, store_apply_timeout_ms=60000)
    sent: Sent = []
    async with in_process_replica(settings) as a, process_replica(settings) as (_, b):
        created = await a.post("/pipelines", json=window_spec(name, source))
        assert created.status_code == 201, created.text

        async def split() -> bool:
            counts = []
            for client in (a, b):
                status = (await client.get(f"/pipelines/{name}/status?scope=local")).json()
                counts.append(len(status["partitions"]))
            whole = (await a.get(f"/pipelines/{name}/status")).json()
            return counts == [1, 1] and len(whole["partitions"]) == PARTITIONS

        await eventually(split, timeout_s=90)
        await send(bootstrap_servers, source, sent, 0, 60)
        answers = await settled([a, b], name, sent)
        # each key answered by the replica that holds it, whichever was asked
        by_key: dict[str, set[str]] = defaultdict(set)
        for answer in answers:
            by_key[answer["key"]].add(answer["member"])
        assert all(len(members) == 1 for members in by_key.values()), by_key
        assert len({m for members in by_key.values() for m in members}) == 2

        # paused: the answers stay as of where it stopped, whatever arrives
        assert (await a.post(f"/pipelines/{name}/pause")).status_code == 200
        await eventually(lambda: _state_is(a, name, "paused"), timeout_s=30)
        await send(bootstrap_servers, source, sent, 1, 30)
        for client in (a, b):
            for key in KEYS:
                answer = await lookup(client, name, key)
                assert answer is not None
                check(answer, sent, key)
        assert (await a.post(f"/pipelines/{name}/resume")).status_code == 200
        await settled([a, b], name, sent)


async def _state_is(client: httpx.AsyncClient, name: str, state: str) -> bool:
    status = (await client.get(f"/pipelines/{name}/status")).json()
    return bool(status["state"] == state)


async def test_lookups_through_a_replica_of_two_workers_equal_the_oracle(
    bootstrap_servers: str,
) -> None:
    source = f"pq-{uuid.uuid4().hex[:8]}"
    name = source
    await create_topic(bootstrap_servers, source, partitions=PARTITIONS)
    settings = app_settings(bootstrap_servers, store_apply_timeout_ms=60000)
    sent: Sent = []
    async with (
        service_process(settings, workers=2) as replica,
        httpx.AsyncClient(base_url=replica.url, timeout=30) as client,
    ):
        await wait_ready(client, timeout_s=60)
        created = await client.post("/pipelines", json=window_spec(name, source))
        assert created.status_code == 201, created.text

        async def split() -> bool:
            whole = (await client.get(f"/pipelines/{name}/status")).json()
            workers = {p["owner"]["worker"] for p in whole["partitions"]}
            return len(whole["partitions"]) == PARTITIONS and workers == {1, 2}

        await eventually(split, timeout_s=90)
        await send(bootstrap_servers, source, sent, 0, 60)
        answers = await settled([client], name, sent)
        assert len({answer["member"] for answer in answers}) == 2


@asynccontextmanager
async def one_replica_with_a_window(
    bootstrap: str, api_token: str | None = None
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """One replica serving a new window pipeline (created through the API, with the token
    when one is set) over a new topic of that name: the client and the name."""
    name = f"pq-{uuid.uuid4().hex[:8]}"
    await create_topic(bootstrap, name, partitions=PARTITIONS)
    settings = app_settings(bootstrap, api_token=api_token)
    auth = {"Authorization": f"Bearer {api_token}"} if api_token else {}
    async with (
        running_app(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        created = await client.post("/pipelines", json=window_spec(name, name), headers=auth)
        assert created.status_code == 201
        yield client, name


async def test_a_key_not_found_a_long_key_and_an_unknown_pipeline_answer_plainly(
    bootstrap_servers: str,
) -> None:
    async with one_replica_with_a_window(bootstrap_servers) as (client, name):

        async def answered() -> httpx.Response | None:
            response = await client.get(url_of(name, "nobody"))
            return response if response.status_code == 200 else None

        response = await eventually(answered, timeout_s=60)
        body = response.json()
        assert body["found"] is False and body["state"] is None and body["kind"] == "window"
        assert body["as_of"]["partition"] == partition_for(b"nobody", PARTITIONS)
        too_long = await client.get(url_of(name, "x" * 8193))
        assert too_long.status_code == 422
        assert too_long.json()["detail"][0]["type"] == "key_too_long"
        unknown = await client.get(url_of("no-such-pipeline", "k"))
        assert unknown.status_code == 404
        assert "no-such-pipeline" in unknown.json()["detail"]


async def test_a_scan_pages_through_every_key_in_order(bootstrap_servers: str) -> None:
    sent: Sent = []
    async with one_replica_with_a_window(bootstrap_servers) as (client, name):
        await send(bootstrap_servers, name, sent, 0, 60)
        await settled([client], name, sent)
        keys: list[str] = []
        params: dict[str, Any] = {"limit": 4}
        while True:
            page = await client.get(f"/pipelines/{name}/state", params=params)
            assert page.status_code == 200, page.text
            body = page.json()
            assert sorted(a["partition"] for a in body["as_of"]) == list(range(PARTITIONS))
            for row in body["rows"]:
                end = {a["partition"]: a for a in body["as_of"]}
                as_of = end[partition_for(row["key"].encode(), PARTITIONS)]
                assert row["state"]["windows"] == oracle(
                    sent, row["key"], as_of["offset"], as_of["watermark"]
                )
            keys += [row["key"] for row in body["rows"]]
            if body["next"] is None:
                break
            params = {"limit": 4, "from": body["next"]}
        assert keys == sorted(KEYS)
        window = await client.get(
            f"/pipelines/{name}/state", params={"from": "user-", "to": "user/"}
        )
        assert [r["key"] for r in window.json()["rows"]] == ["user-1", "user-5", "user-6"]


async def test_the_token_guards_pull_queries(bootstrap_servers: str) -> None:
    auth = {"Authorization": "Bearer s3cret"}
    async with one_replica_with_a_window(bootstrap_servers, api_token="s3cret") as (client, name):
        assert (await client.get(url_of(name, "k"))).status_code == 401
        assert (await client.get(f"/pipelines/{name}/state")).status_code == 401

        async def answered() -> bool:
            response = await client.get(url_of(name, "k"), headers=auth)
            return response.status_code == 200

        await eventually(answered, timeout_s=60)


async def test_during_a_takeover_after_kill_9_lookups_answer_503_or_the_oracle_never_else(
    bootstrap_servers: str,
) -> None:
    source = f"pq-{uuid.uuid4().hex[:8]}"
    name = source
    await create_topic(bootstrap_servers, source, partitions=PARTITIONS)
    settings = app_settings(bootstrap_servers, store_apply_timeout_ms=60000)
    sent: Sent = []
    async with in_process_replica(settings) as a, process_replica(settings) as (b, b_client):
        assert (await a.post("/pipelines", json=window_spec(name, source))).status_code == 201

        async def split() -> bool:
            whole = (await a.get(f"/pipelines/{name}/status")).json()
            members = {p["owner"]["member"] for p in whole["partitions"]}
            return len(whole["partitions"]) == PARTITIONS and len(members) == 2

        await eventually(split, timeout_s=90)
        await send(bootstrap_servers, source, sent, 0, 60)
        await settled([a, b_client], name, sent)
        b.process.kill()
        await b.process.wait()
        await send(bootstrap_servers, source, sent, 1, 30)

        async def taken_over() -> bool:
            for key in KEYS:
                answer = await lookup(a, name, key)  # 503, or equal to the oracle
                if answer is None:
                    return False
                check(answer, sent, key)
            status = (await a.get(f"/pipelines/{name}/status?scope=local")).json()
            return len(status["partitions"]) == PARTITIONS

        await eventually(taken_over, timeout_s=90)
        answers = await settled([a], name, sent)
        assert {answer["member"] for answer in answers} == {settings.instance_id}


async def test_post_query_in_sql_answers_as_the_rest_routes_do(bootstrap_servers: str) -> None:
    sent: Sent = []
    async with one_replica_with_a_window(bootstrap_servers) as (client, name):
        await send(bootstrap_servers, name, sent, 0, 60)
        await settled([client], name, sent)
        one = await client.post(
            "/query", json={"sql": f"""SELECT * FROM "{name}" WHERE key = 'user/2'"""}
        )
        assert one.status_code == 200, one.text
        assert one.json() == (await client.get(url_of(name, "user/2"))).json()
        some = await client.post(
            "/query",
            json={"sql": f"""SELECT * FROM "{name}" WHERE key BETWEEN 'user-1' AND 'user-5'"""},
        )
        assert [row["key"] for row in some.json()["rows"]] == ["user-1", "user-5"]
        bad = await client.post("/query", json={"sql": f'SELECT n FROM "{name}" WHERE k = 1'})
        assert bad.status_code == 422
        assert [(p["column"], p["type"]) for p in bad.json()["detail"]] == [
            (8, "sql_pull_query"),
            (8 + len(f'n FROM "{name}" WHERE '), "sql_pull_query"),
        ]


async def test_while_a_second_replica_joins_lookups_answer_503_or_the_oracle_never_else(
    bootstrap_servers: str,
) -> None:
    """A rebalance hands a partition over: every answer on the way, from either replica,
    is a 503 or the oracle's at the offset it names."""
    source = f"pq-{uuid.uuid4().hex[:8]}"
    name = source
    await create_topic(bootstrap_servers, source, partitions=PARTITIONS)
    settings = app_settings(bootstrap_servers, store_apply_timeout_ms=60000)
    sent: Sent = []
    async with in_process_replica(settings) as a:
        assert (await a.post("/pipelines", json=window_spec(name, source))).status_code == 201
        await send(bootstrap_servers, source, sent, 0, 60)
        await settled([a], name, sent)
        async with process_replica(settings) as (_, b):

            async def handed_over() -> bool:
                for client in (a, b):
                    for key in KEYS:
                        answer = await lookup(client, name, key)  # 503, or the oracle's
                        if answer is None:
                            return False
                        check(answer, sent, key)
                whole = (await a.get(f"/pipelines/{name}/status")).json()
                members = {p["owner"]["member"] for p in whole["partitions"]}
                return len(whole["partitions"]) == PARTITIONS and len(members) == 2

            await eventually(handed_over, timeout_s=90)
            await send(bootstrap_servers, source, sent, 1, 30)
            answers = await settled([a, b], name, sent)
            assert len({answer["member"] for answer in answers}) == 2


async def test_a_replica_reaches_a_worker_of_another_replica_through_that_replica(
    bootstrap_servers: str,
) -> None:
    """A lookup on a replica of one process, for a key a worker of another replica holds,
    goes through that replica's API to its worker, and equals the oracle."""
    source = f"pq-{uuid.uuid4().hex[:8]}"
    name = source
    await create_topic(bootstrap_servers, source, partitions=PARTITIONS)
    settings = app_settings(bootstrap_servers, store_apply_timeout_ms=60000)
    sent: Sent = []
    async with (
        service_process(settings, workers=2) as other,
        httpx.AsyncClient(base_url=other.url, timeout=30) as other_client,
    ):
        await wait_ready(other_client, timeout_s=60)
        async with in_process_replica(settings) as a:
            assert (await a.post("/pipelines", json=window_spec(name, source))).status_code == 201

            async def workers_hold_something() -> bool:
                whole = (await a.get(f"/pipelines/{name}/status")).json()
                replicas = {p["owner"]["replica"] for p in whole["partitions"]}
                return len(whole["partitions"]) == PARTITIONS and other.instance_id in replicas

            await eventually(workers_hold_something, timeout_s=90)
            await send(bootstrap_servers, source, sent, 0, 60)
            answers = await settled([a], name, sent)
            assert any(answer["member"].startswith(f"{other.instance_id}-w") for answer in answers)
