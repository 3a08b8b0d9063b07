"""Lookup joins on a real broker (issue 31 point 4): the orders enriched with a customers
table that every replica reads whole before the orders start, and follows live; built
from the spec. A table update is seen by the orders that come after it; a table over
``max_rows`` fails the pipeline with that reason.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from prometheus_client import CollectorRegistry

from service.pipeline_spec.build import build_definition
from service.pipeline_spec.models import validate_spec
from service.runtime.definition import PipelineDefinition
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.metrics import build_metrics
from service.runtime.observability.status import PipelineState
from tests.integration.kafka_utils import (
    create_topic,
    json_record,
    produce,
    read_json,
    read_topic,
    runtime_settings,
    unique,
    wait_until,
)
from tests.integration.test_shuffle import run_to_finish

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BASE = 1_700_000_000_000


def lookup_definition(
    name: str,
    how: str = "left",
    max_rows: int = 100,
    bounded: bool = False,
    delivery: str = "at_least_once",
) -> PipelineDefinition:
    spec = validate_spec(lookup_spec(name, how, max_rows, bounded, delivery), ())
    return build_definition(spec, ())


def lookup_spec(
    name: str,
    how: str = "left",
    max_rows: int = 100,
    bounded: bool = False,
    delivery: str = "at_least_once",
) -> dict[str, Any]:
    """The orders of ``<name>.orders`` enriched with the customers of ``<name>.customers``."""
    return {
        "name": name,
        "inputs": {
            "orders": {
                "source": {"topics": [f"{name}.orders"], "bounded": bounded},
                "key": {"field": "customer"},
                "timestamp": {"field": "ts"},
                "watermark": {"max_out_of_orderness_ms": 1000, "interval_ms": 50},
            },
            # keyed by the Kafka key; a null value deletes it
            "customers": {"source": {"topics": [f"{name}.customers"]}},
        },
        "operator": {
            "type": "join",
            "kind": "lookup",
            "how": how,
            "left": "orders",
            "right": "customers",
            "max_rows": max_rows,
            "select": {"n": "orders.n", "who": "customers.name"},
        },
        "sink": {"topic": f"{name}.out", "dead_letter_topic": f"{name}.dlq"},
        "delivery": delivery,
    }


def customer(partition: int, key: str, name: str | None) -> Any:
    if name is None:
        return (partition, key.encode(), None, None)  # a tombstone
    return json_record(partition, key, {"name": name})


def order(n: int, who: str) -> Any:
    return json_record(n % 2, who, {"customer": who, "ts": BASE + n * 1_000, "n": n})


async def topics(bootstrap: str, name: str) -> None:
    await create_topic(bootstrap, f"{name}.orders", 2)
    await create_topic(bootstrap, f"{name}.customers", 3)


def joined(rows: list[dict[str, Any]]) -> dict[int, str | None]:
    return {r["value"]["n"]: r["value"]["who"] for r in rows}


async def test_a_bounded_lookup_join_enriches_every_order_with_the_loaded_table(
    bootstrap_servers: str,
) -> None:
    """The table is read whole before any order: each order meets its customer's newest
    row (a deleted one: padded), in one stage over the orders' partitions, no shuffle."""
    name = unique("lookup")
    await topics(bootstrap_servers, name)
    table = [customer(i % 3, f"c{i}", f"name{i}") for i in range(10)]
    table += [customer(1, "c1", "renamed"), customer(0, "c9", None)]  # c9 is deleted
    table.append((2, b"c5", b"{not json", None))  # a dead letter, named as the table's
    await produce(bootstrap_servers, f"{name}.customers", table)
    orders = [order(n, f"c{n % 12}") for n in range(60)]  # c10 and c11 are no customers
    orders.append(json_record(0, None, {"ts": BASE, "n": 99}))  # no customer: a dead letter
    await produce(bootstrap_servers, f"{name}.orders", orders)
    registry = CollectorRegistry()
    status = await run_to_finish(bootstrap_servers, lookup_definition(name, bounded=True), registry)
    names = {f"c{i}": f"name{i}" for i in range(9)} | {"c1": "renamed"}
    rows = await read_json(bootstrap_servers, f"{name}.out")
    assert joined(rows) == {n: names.get(f"c{n % 12}") for n in range(60)}
    assert len(rows) == 60 and len({r["id"] for r in rows}) == 60
    assert all(r["kind"] == "lookup" for r in rows)
    assert all(r["ts"] == BASE + r["value"]["n"] * 1_000 for r in rows)
    assert status.stages == ()  # one stage: the table is never shuffled
    assert {p.topic for p in status.partitions} == {f"{name}.orders"}
    assert status.lookup_table is not None
    assert (status.lookup_table.rows, status.lookup_table.loaded) == (9, True)
    labels = {"pipeline": name, "input": "customers"}
    assert registry.get_sample_value("clockwork_lookup_table_rows", labels) == 9.0
    assert registry.get_sample_value("clockwork_lookup_table_loaded", labels) == 1.0
    dead = await read_topic(bootstrap_servers, f"{name}.dlq")
    assert sorted(
        (headers["clockwork.reason"], headers["clockwork.input"])
        for headers in (dict(r.headers) for r in dead)
    ) == [(b"decode_error", b"customers"), (b"missing_key", b"orders")]


async def test_a_table_update_is_seen_by_the_orders_after_it_and_max_rows_fails(
    bootstrap_servers: str,
) -> None:
    """Followed live: an order after an update (a new row, a new version, a tombstone)
    meets the updated table; the table growing past ``max_rows`` fails the pipeline with
    that reason, and it keeps failing while the table is too large."""
    name = unique("lookuplive")
    await topics(bootstrap_servers, name)
    await produce(bootstrap_servers, f"{name}.customers", [customer(0, "c1", "Ann")])
    runtime = Runtime(
        runtime_settings(bootstrap_servers), metrics=build_metrics(CollectorRegistry())
    )
    await runtime.start()
    runtime.start_pipeline(lookup_definition(name, max_rows=3))
    try:
        status = runtime.status

        async def table_at(updates: int) -> bool:
            table = status(name).lookup_table
            return table is not None and table.loaded and table.updates >= updates

        async def outputs(count: int) -> bool:
            return len(await read_json(bootstrap_servers, f"{name}.out")) >= count

        await wait_until(lambda: table_at(1), timeout_s=60)
        await produce(bootstrap_servers, f"{name}.orders", [order(0, "c1"), order(1, "c2")])
        await wait_until(lambda: outputs(2), timeout_s=60)
        # a new row, a new version, then (after more orders) a tombstone: c1's version
        # and tombstone on one partition, as a keyed producer puts them
        updates = [customer(1, "c2", "Bea"), customer(0, "c1", "Ann B."), customer(0, "c1", None)]
        await produce(bootstrap_servers, f"{name}.customers", updates[:2])
        await wait_until(lambda: table_at(3), timeout_s=60)
        await produce(bootstrap_servers, f"{name}.orders", [order(2, "c1"), order(3, "c2")])
        await wait_until(lambda: outputs(4), timeout_s=60)
        await produce(bootstrap_servers, f"{name}.customers", updates[2:])
        await wait_until(lambda: table_at(4), timeout_s=60)
        await produce(bootstrap_servers, f"{name}.orders", [order(4, "c1")])
        await wait_until(lambda: outputs(5), timeout_s=60)
        rows = await read_json(bootstrap_servers, f"{name}.out")
        assert joined(rows) == {0: "Ann", 1: None, 2: "Ann B.", 3: "Bea", 4: None}
        assert status(name).state is PipelineState.RUNNING

        # past max_rows: c2 plus three new keys is four
        more = [customer(i % 3, f"x{i}", "X") for i in range(3)]
        await produce(bootstrap_servers, f"{name}.customers", more)

        async def failed() -> bool:
            return status(name).state is PipelineState.FAILED

        await wait_until(failed, timeout_s=60)
        reason = status(name).reason or ""
        assert "LookupTableFull" in reason and "max_rows=3" in reason, reason
        await produce(bootstrap_servers, f"{name}.orders", [order(5, "c2")])
        # it reads the table again after its backoff, and fails again: nothing is joined
        # against a table that misses rows

        async def failed_again() -> bool:
            return runtime.runner(name).restarts >= 2 and await failed()

        await wait_until(failed_again, timeout_s=60)
        assert len(await read_json(bootstrap_servers, f"{name}.out")) == 5
    finally:
        await runtime.shutdown()


@pytest.mark.requires_broker("create_partitions")
async def test_a_partition_added_to_the_table_topic_is_read_from_its_start(
    bootstrap_servers: str,
) -> None:
    """Found within the discovery interval and read whole; the partitions read before
    go on where they were (the table counts each record once)."""
    name = unique("lookupgrow")
    await topics(bootstrap_servers, name)
    await produce(bootstrap_servers, f"{name}.customers", [customer(0, "c1", "Ann")])
    settings = runtime_settings(bootstrap_servers, table_partition_discovery_s=0.2)
    runtime = Runtime(settings, metrics=build_metrics(CollectorRegistry()))
    await runtime.start()
    runtime.start_pipeline(lookup_definition(name))
    try:
        status = runtime.status

        async def table_at(updates: int) -> bool:
            table = status(name).lookup_table
            return table is not None and table.loaded and table.updates >= updates

        await wait_until(lambda: table_at(1), timeout_s=60)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
        await admin.start()
        try:
            await admin.create_partitions({f"{name}.customers": NewPartitions(total_count=4)})
        finally:
            await admin.close()
        await produce(bootstrap_servers, f"{name}.customers", [customer(3, "c7", "Zed")])
        await wait_until(lambda: table_at(2), timeout_s=60)
        await produce(bootstrap_servers, f"{name}.orders", [order(0, "c7"), order(1, "c1")])

        async def outputs() -> bool:
            return len(await read_json(bootstrap_servers, f"{name}.out")) >= 2

        await wait_until(outputs, timeout_s=60)
        assert joined(await read_json(bootstrap_servers, f"{name}.out")) == {0: "Zed", 1: "Ann"}
        table = status(name).lookup_table
        assert table is not None and (table.rows, table.updates) == (2, 2)
    finally:
        await runtime.shutdown()


@pytest.mark.requires_broker("transactions")
async def test_an_exactly_once_lookup_join_commits_every_row_once(
    bootstrap_servers: str,
) -> None:
    """With ``exactly_once`` each left partition commits its rows in its transactions;
    the table is read ``read_committed``: a read_committed reader sees each row once."""
    name = unique("lookupeos")
    await topics(bootstrap_servers, name)
    await produce(
        bootstrap_servers,
        f"{name}.customers",
        [customer(i % 3, f"c{i}", f"n{i}") for i in range(5)],
    )
    await produce(bootstrap_servers, f"{name}.orders", [order(n, f"c{n % 6}") for n in range(40)])
    definition = lookup_definition(name, how="inner", bounded=True, delivery="exactly_once")
    await run_to_finish(bootstrap_servers, definition)
    rows = await read_json(bootstrap_servers, f"{name}.out", "read_committed")
    assert joined(rows) == {n: f"n{n % 6}" for n in range(40) if n % 6 != 5}
    assert len(rows) == len({r["id"] for r in rows}) == len(joined(rows))
