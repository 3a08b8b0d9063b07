"""Top-N end to end (#50): a spec built as the API builds it, bounded input; the result
topic is an upsert stream of rank rows whose records, folded by Kafka key
(``<key>|<rank>``, a tombstone deleting), equal the top N computed from all input.
Append-only through the shuffle, and with a row key over the Kafka key's partitions
(each row's versions in one partition, in order: its newest is well defined); with
exactly-once delivery too (a ``read_committed`` reader; brokers with transactions)."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest

from service.pipeline_spec.build import build_definition
from service.pipeline_spec.models import validate_spec
from service.runtime.lifecycle.manager import Runtime
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
from tests.integration.replicas import replicas
from tests.integration.test_replica_loss import PARTITIONS
from tests.integration.test_running_aggregates import crash_before_the_commit, run_to_the_end

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

BASE = 1_700_000_000_000
CATEGORIES = 12
PRODUCTS = 40
N = 3


def sales(count: int) -> list[dict[str, Any]]:
    """Sales with distinct revenues (no ties: arrival through a shuffle decides nothing)."""
    rng = random.Random(51)
    revenues = rng.sample(range(1, 1_000_000), count)
    return [
        {
            "category": f"c{rng.randrange(CATEGORIES)}",
            "product": f"p{rng.randrange(PRODUCTS)}",
            "revenue": revenues[i],
            "ts": BASE + i * 10,
        }
        for i in range(count)
    ]


def top_n(data: list[dict[str, Any]], keyed: bool) -> dict[str, dict[str, Any]]:
    """The oracle: per category, the N rows of the largest revenue (with a row key: each
    product's newest sale only); ``{"<category>|<rank>": row}``."""
    rows: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for i, sale in enumerate(data):
        rows[sale["category"]][sale["product"] if keyed else str(i)] = sale
    table: dict[str, dict[str, Any]] = {}
    for category, held in rows.items():
        ranked = sorted(held.values(), key=lambda r: -r["revenue"])
        for rank, row in enumerate(ranked[:N], start=1):
            table[f"{category}|{rank}"] = row
    return table


def spec(name: str, topic: str, delivery: str, keyed: bool) -> dict[str, Any]:
    operator: dict[str, Any] = {
        "type": "top_n",
        "order_by": {"field": "revenue", "desc": True},
        "n": N,
        "emit_interval_ms": 100,
    }
    data: dict[str, Any] = {
        "name": name,
        "source": {"topics": [topic], "bounded": True},
        "timestamp": {"field": "ts"},
        "operator": operator,
        "sink": {"topic": f"{name}.out"},
        "delivery": delivery,
    }
    if keyed:
        operator["row_key"] = "product"  # keyed by the Kafka key: the category
    else:
        data["key"] = {"field": "category"}  # not the Kafka key's partitioning: shuffled
    return data


@pytest.mark.parametrize("keyed", [False, True], ids=["append-only", "row-key"])
@pytest.mark.parametrize(
    "delivery",
    [
        "at_least_once",
        pytest.param("exactly_once", marks=pytest.mark.requires_broker("transactions")),
    ],
)
async def test_the_rank_rows_folded_by_key_equal_the_top_n_of_all_input(
    bootstrap_servers: str, delivery: str, keyed: bool
) -> None:
    name = unique("topn")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 3)
    data = sales(3000)
    if keyed:  # a category's sales in one partition, in order
        records = [json_record(int(e["category"][1:]) % 3, e["category"], e) for e in data]
    else:  # round-robin: the pipeline shuffles by its key
        records = [json_record(i % 3, None, e) for i, e in enumerate(data)]
    await produce(bootstrap_servers, topic, records)
    definition = build_definition(validate_spec(spec(name, topic, delivery, keyed), ()), ())
    await run_to_the_end(bootstrap_servers, definition)

    isolation = "read_committed" if delivery == "exactly_once" else "read_uncommitted"
    out = await read_topic(bootstrap_servers, f"{name}.out", isolation_level=isolation)
    table: dict[str, dict[str, Any]] = {}
    seqs: dict[str, list[int]] = defaultdict(list)
    for record in out:  # by partition and offset: each rank row's in its order
        key = record.key.decode()
        if record.value is None:
            table.pop(key, None)
            continue
        value = orjson.loads(record.value)
        assert set(value) == {"pipeline", "key", "result", "op", "seq", "id"}
        assert value["key"] == key and value["id"] == f"{name}|{key}"
        category, rank = key.rsplit("|", 1)
        assert value["result"]["partition"] == category
        assert value["result"]["rank"] == int(rank)
        seqs[key].append(value["seq"])
        table[key] = value["result"]["row"]
    assert table == top_n(data, keyed)
    assert all(s == list(range(len(s))) for s in seqs.values()), seqs


def fold(records: list[Any]) -> dict[str, dict[str, Any]]:
    """Rank rows folded by Kafka key (a tombstone deletes)."""
    table: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.value is None:
            table.pop(record.key.decode(), None)
        else:
            table[record.key.decode()] = orjson.loads(record.value)["result"]["row"]
    return table


async def folds_to(bootstrap: str, topic: str, isolation: str, want: dict[str, Any]) -> bool:
    try:
        records = await read_topic(bootstrap, topic, isolation_level=isolation)
    except TimeoutError:  # a transaction open for the whole read: look again
        return False
    return fold(records) == want


@pytest.mark.parametrize(
    "delivery",
    [
        "at_least_once",
        pytest.param("exactly_once", marks=pytest.mark.requires_broker("transactions")),
    ],
)
async def test_unbounded_input_emits_on_the_ticks_or_at_the_checkpoints(
    bootstrap_servers: str, delivery: str
) -> None:
    """No end of input: the rank rows come from the processing-time ticks (at least once)
    or from the checkpoints (exactly once), never from a final watermark; two waves of
    input, and after each the folded topic equals the top N so far."""
    name = unique("topnu")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    data = sales(1000)
    data_spec = spec(name, topic, delivery, keyed=False)
    data_spec["source"]["bounded"] = False
    definition = build_definition(validate_spec(data_spec, ()), ())
    isolation = "read_committed" if delivery == "exactly_once" else "read_uncommitted"
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    runtime.start_pipeline(definition)
    try:
        for begin, end in ((0, 600), (600, len(data))):
            wave = data[begin:end]
            await produce(
                bootstrap_servers, topic, [json_record(i % 2, None, e) for i, e in enumerate(wave)]
            )
            want = top_n(data[:end], keyed=False)
            caught_up = partial(folds_to, bootstrap_servers, f"{name}.out", isolation, want)
            await wait_until(caught_up, timeout_s=45, interval_s=0.3)
    finally:
        await runtime.shutdown()


TOP_N = {"type": "top_n", "order_by": {"field": "ts"}, "n": N, "emit_interval_ms": 100}
"""The latest rows of each key (by event time, up to 1.5 s out of order): the top N
changes all along the input, so every checkpoint has rank rows to write."""


@pytest.mark.requires_broker("transactions")
@pytest.mark.parametrize("at", [1, 2], ids=["first", "second"])
async def test_a_crash_before_the_commit_never_shows_a_rank_row_s_seq_twice(
    bootstrap_servers: str, tmp_path: Path, at: int
) -> None:
    """Exactly-once: the worker kills itself at its first (or second: one committed
    before it) checkpoint with outputs, after the broker took them and before the
    transaction committed. A read_committed reader never sees those rank rows; after the
    restart (from the committed state: rows, their arrival numbers, each rank's seq) it
    sees each rank row's seq 0, 1, 2, ... once, folding to the top N of all input."""
    name = unique("topneo")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    options: dict[str, Any] = {"delivery": "exactly_once", "top_n": TOP_N}
    # per key, one partition, in order: arrival is well defined
    data = await crash_before_the_commit(bootstrap_servers, name, topic, tmp_path, options, at)
    assert await read_json(bootstrap_servers, f"{name}.out"), "outputs came before the crash"
    held: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, e in data:
        held[e["user"]].append(e)
    want = {
        f"{user}|{rank}": row
        for user, rows in held.items()
        for rank, row in enumerate(sorted(rows, key=lambda r: -r["ts"])[:N], start=1)
    }  # sorted() is stable: ties stay in arrival order
    with replicas(bootstrap_servers, name, topic, tmp_path, 1, **options):
        caught_up = partial(folds_to, bootstrap_servers, f"{name}.out", "read_committed", want)
        await wait_until(caught_up, timeout_s=90, interval_s=0.3)
    committed = await read_json(bootstrap_servers, f"{name}.out", "read_committed")
    seqs: dict[str, list[int]] = defaultdict(list)
    for value in committed:
        seqs[value["key"]].append(value["seq"])
    assert all(s == list(range(len(s))) for s in seqs.values()), seqs
    everything = await read_json(bootstrap_servers, f"{name}.out")
    assert len(everything) > len(committed)  # the aborted rank rows are in the log
    assert max(Counter((v["key"], v["seq"]) for v in everything).values()) == 2
