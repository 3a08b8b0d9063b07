"""A bounded pipeline created over the REST API reads every source partition to the end
it had when the pipeline was created: the ends are pinned in the pipeline store, so
every replica and every restart stops at the same offsets."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.topics import partition_counts, topic_names
from tests.api.server import (
    TopicReader,
    app_settings,
    create_topic,
    eventually,
    produce,
    running_app,
)
from tests.api.server import wait_ready as wait_until_ready

pytestmark = pytest.mark.integration


def bounded_spec(name: str, source: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": {"topics": [source], "bounded": True},
        "key": {"field": "user"},
        "timestamp": {"field": "ts"},
        "operator": {
            "type": "window",
            "assigner": {"type": "tumbling", "size_ms": 1000},
            "aggregations": {"n": {"fn": "count"}},
        },
        "sink": {"topic": f"{name}.out"},
    }


async def test_a_bounded_pipeline_reads_to_the_ends_pinned_at_its_creation(
    bootstrap_servers: str,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    source, name = f"bounded-{suffix}", f"bounded-{suffix}"
    await create_topic(bootstrap_servers, source, partitions=2)
    first = [(f"u{i % 4}", {"user": f"u{i % 4}", "ts": 1000 + i}) for i in range(40)]
    await produce(bootstrap_servers, source, first)
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_until_ready(client)
        created = await client.post("/pipelines", json=bounded_spec(name, source))
        assert created.status_code == 201, created.text
        ends = created.json()["end_offsets"]
        assert sorted(ends) == sorted([[source, p, e] for p, e in enumerate(ends_of(ends))])
        assert sum(end for _, _, end in ends) == len(first)
        later = [(f"u{i % 4}", {"user": f"u{i % 4}", "ts": 1000 + i}) for i in range(40, 60)]
        await produce(bootstrap_servers, source, later)

        async def finished() -> Any:
            status = (await client.get(f"/pipelines/{name}/status")).json()
            return status if status["state"] == "finished" else None

        status = await eventually(finished, timeout_s=30)
    assert status["records_in"] == len(first)
    assert [p["offset"] for p in status["partitions"]] == [
        p["end_offset"] for p in status["partitions"]
    ]


def ends_of(ends: list[list[Any]]) -> list[int]:
    return [end for _, _, end in sorted(ends, key=lambda e: e[1])]


async def test_a_deleted_shuffled_pipeline_leaves_nothing_to_a_new_one_of_its_name(
    bootstrap_servers: str,
) -> None:
    """A payload key shuffles: the deleted pipeline's shuffle topic goes with it and the
    keyed stage's positions are forgotten, so a new pipeline of the same name routes
    only its own input (reading the old shuffle records would add the old users)."""
    suffix = uuid.uuid4().hex[:8]
    name, old_source, new_source = f"again-{suffix}", f"old-{suffix}", f"new-{suffix}"
    for topic in (old_source, new_source):
        await create_topic(bootstrap_servers, topic, partitions=2)
    await produce(
        bootstrap_servers,
        old_source,
        [(f"o{i}", {"user": f"old{i % 3}", "ts": 1000 + i}) for i in range(30)],
    )
    await produce(
        bootstrap_servers,
        new_source,
        [(f"o{i}", {"user": f"new{i % 2}", "ts": 1000 + i}) for i in range(20)],
    )
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_until_ready(client)

        await run_to_its_end(client, bounded_spec(name, old_source))
        assert f"clockwork.{name}.shuffle" in await topic_names(KafkaCluster(bootstrap_servers))
        assert (await client.delete(f"/pipelines/{name}")).status_code == 204

        async def shuffle_topic_gone() -> bool:
            return f"clockwork.{name}.shuffle" not in await topic_names(
                KafkaCluster(bootstrap_servers)
            )

        await eventually(shuffle_topic_gone)

        again = bounded_spec(name, new_source)
        again["sink"] = {"topic": f"{name}.again"}
        await run_to_its_end(client, again)
        async with TopicReader(bootstrap_servers, f"{name}.again") as reader:

            async def both_users() -> list[dict[str, Any]] | None:
                records = await reader.poll()
                return records if {r["key"] for r in records} >= {"new0", "new1"} else None

            results = await eventually(both_users)
    assert {r["key"]: r["result"]["n"] for r in results} == {"new0": 10, "new1": 10}


async def run_to_its_end(client: httpx.AsyncClient, spec: dict[str, Any]) -> dict[str, Any]:
    """Create the bounded pipeline and wait until it finished; the create's answer."""
    created = await client.post("/pipelines", json=spec)
    assert created.status_code == 201, created.text

    async def finished() -> bool:
        status = (await client.get(f"/pipelines/{spec['name']}/status")).json()
        return bool(status["state"] == "finished")

    await eventually(finished, timeout_s=30)
    return dict(created.json())


async def test_a_pipeline_re_created_wider_than_the_deleted_one_gets_a_state_epoch_of_its_own(
    bootstrap_servers: str,
) -> None:
    """The deleted pipeline's changelog stays, as wide as its source; a new pipeline of
    the same name shuffling to more partitions starts in the next state epoch, with a
    changelog of its own width, and counts exactly its own input. (It used to inherit the
    narrow changelog and fail its start forever on a broker that cannot add partitions.)"""
    suffix = uuid.uuid4().hex[:8]
    name, source = f"wider-{suffix}", f"wider-{suffix}"
    await create_topic(bootstrap_servers, source, partitions=2)
    records = [(f"u{i % 5}", {"user": f"u{i % 5}", "ts": 1000 + i}) for i in range(50)]
    await produce(bootstrap_servers, source, records)
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_until_ready(client)

        narrow = bounded_spec(name, source)
        narrow["key"] = {"field": "user", "partitioned": True}
        assert (await run_to_its_end(client, narrow))["state_epoch"] == 0
        assert (await client.delete(f"/pipelines/{name}")).status_code == 204

        wider = bounded_spec(name, source)
        wider["key"] = {"field": "user", "shuffle_partitions": 8}
        wider["sink"] = {"topic": f"{name}.wider"}
        assert (await run_to_its_end(client, wider))["state_epoch"] == 1
        async with TopicReader(bootstrap_servers, f"{name}.wider") as reader:

            async def every_user() -> list[dict[str, Any]] | None:
                results = await reader.poll()
                return results if len({r["key"] for r in results}) == 5 else None

            results = await eventually(every_user)
    assert sorted((r["key"], r["result"]["n"]) for r in results) == [
        (f"u{u}", 10) for u in range(5)
    ]
    widths = await partition_counts(
        KafkaCluster(bootstrap_servers),
        [f"clockwork.{name}.changelog", f"clockwork.{name}.E1.changelog"],
    )
    assert widths == {f"clockwork.{name}.changelog": 2, f"clockwork.{name}.E1.changelog": 8}
