"""Joins on a real broker, the rest of issue 31's integration tests: every ``how`` of the
interval and window joins against a reference over the whole inputs; late rows of each
side to the late topic, named by their input; a dead letter of each input named by it;
and a second replica joining mid-join (a rebalance), exact after de-duplication by id.

The inputs are test_joins.py's: 600 orders and their payments on two topics of other
widths, each within its out-of-orderness, routed through one shuffle to the join's key.
"""

from __future__ import annotations

import signal
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

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
from tests.integration.replicas import Replica, replicas
from tests.integration.test_joins import (
    BASE,
    BOUND_MS,
    INTERVAL_LEFT,
    bounded_inputs,
    interval_left,
    join_definition,
    pair_of,
    run_join,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

Pair = tuple[str, int | None, int | None]
Orders = list[dict[str, Any]]


def interval_rows(orders: Orders, payments: Orders, how: str, upper: int) -> set[Pair]:
    """An interval join's rows (bounds 0 and ``upper``) over the whole inputs."""
    rows: set[Pair] = set()
    paid: set[int] = set()
    for o in orders:
        matched = False
        for p in payments:
            if p["order"] == o["order_id"] and o["ts"] <= p["paid_at"] <= o["ts"] + upper:
                rows.add((o["order_id"], o["n"], p["n"]))
                matched = True
                paid.add(p["n"])
        if not matched and how in ("left", "full"):
            rows.add((o["order_id"], o["n"], None))
    if how in ("right", "full"):
        rows |= {(p["order"], None, p["n"]) for p in payments if p["n"] not in paid}
    return rows


def window_rows(orders: Orders, payments: Orders, how: str, size: int) -> set[tuple[int, Pair]]:
    """A tumbling window join's rows over the whole inputs, as (window start, pair)."""
    by_window: dict[tuple[str, int], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for o in orders:
        by_window[(o["order_id"], o["ts"] - o["ts"] % size)][0].append(o["n"])
    for p in payments:
        by_window[(p["order"], p["paid_at"] - p["paid_at"] % size)][1].append(p["n"])
    rows: set[tuple[int, Pair]] = set()
    for (key, start), (lefts, rights) in by_window.items():
        if how in ("semi", "anti"):
            if bool(rights) == (how == "semi"):
                rows |= {(start, (key, o, None)) for o in lefts}
            continue
        rows |= {(start, (key, o, p)) for o in lefts for p in rights}
        if not rights and how in ("left", "full"):
            rows |= {(start, (key, o, None)) for o in lefts}
        if not lefts and how in ("right", "full"):
            rows |= {(start, (key, None, p)) for p in rights}
    return rows


@pytest.mark.parametrize("how", ["inner", "left", "right", "full"])
async def test_every_how_of_the_interval_join_gives_the_reference_rows(
    bootstrap_servers: str, how: str
) -> None:
    operator = {**INTERVAL_LEFT, "how": how, "between": {"lower_ms": 0, "upper_ms": 20_000}}
    rows, (orders, payments, _) = await run_join(bootstrap_servers, operator)
    assert sorted(map(pair_of, rows), key=str) == sorted(
        interval_rows(orders, payments, how, 20_000), key=str
    )
    by_n = {o["n"]: o for o in orders}
    by_pn = {p["n"]: p for p in payments}
    for row in rows:  # a pair at the later time, a padded row at its own
        _, o, p = pair_of(row)
        times = [by_n[o]["ts"]] if o is not None else []
        times += [by_pn[p]["paid_at"]] if p is not None else []
        assert row["ts"] == max(times)


@pytest.mark.parametrize("how", ["inner", "left", "right", "full", "semi", "anti"])
async def test_every_how_of_the_window_join_gives_the_reference_rows(
    bootstrap_servers: str, how: str
) -> None:
    operator = {
        "type": "join",
        "kind": "window",
        "how": how,
        "assigner": {"type": "tumbling", "size_ms": 10_000},
    }
    rows, (orders, payments, _) = await run_join(bootstrap_servers, operator)
    got = sorted(((r["window"]["start"], pair_of(r)) for r in rows), key=str)
    assert got == sorted(window_rows(orders, payments, how, 10_000), key=str)
    assert all(r["ts"] == r["window"]["end"] - 1 for r in rows)
    if how in ("semi", "anti"):
        assert all(r["value"]["right"] is None for r in rows)


async def test_late_rows_of_each_side_go_to_the_late_topic_named_by_their_input(
    bootstrap_servers: str,
) -> None:
    """Once the join's watermark passed them, an order and a payment arrive: each goes
    to the late topic with the headers clockwork.input (its input) and clockwork.reason
    (late), and neither is joined. A record of each input that does not decode goes to
    the dead-letter topic named by its input too."""
    name = unique("joinlate")
    await create_topic(bootstrap_servers, f"{name}.orders", 1)
    await create_topic(bootstrap_servers, f"{name}.payments", 1)
    orders = [{"order_id": f"o{n}", "ts": BASE + n * 1_000, "n": n} for n in range(20)]
    payments = [{"order": f"o{n}", "paid_at": BASE + n * 1_000 + 500, "n": n} for n in range(20)]
    await produce(
        bootstrap_servers, f"{name}.orders", [json_record(0, o["order_id"], o) for o in orders]
    )
    await produce(
        bootstrap_servers, f"{name}.payments", [json_record(0, p["order"], p) for p in payments]
    )
    operator = {**INTERVAL_LEFT, "how": "inner", "between": {"lower_ms": 0, "upper_ms": 1_000}}
    definition = replace(join_definition(name, operator), bounded=False)
    runtime = Runtime(runtime_settings(bootstrap_servers))
    await runtime.start()
    runtime.start_pipeline(definition)
    try:
        # each input's watermark is its max_ts - 2 s - 1; the join's is the smaller
        watermark = BASE + 19 * 1_000 - BOUND_MS - 1

        async def passed() -> bool:
            current = runtime.status(name).watermark
            return current is not None and current >= watermark

        await wait_until(passed, timeout_s=60)
        late_order = {"order_id": "o3", "ts": BASE + 3_000, "n": 100}
        late_payment = {"order": "o4", "paid_at": BASE + 4_000, "n": 100}
        await produce(bootstrap_servers, f"{name}.orders", [json_record(0, "o3", late_order)])
        await produce(bootstrap_servers, f"{name}.payments", [json_record(0, "o4", late_payment)])
        await produce(bootstrap_servers, f"{name}.orders", [(0, b"o5", b"{not json", None)])
        await produce(bootstrap_servers, f"{name}.payments", [(0, b"o6", b"[1,", None)])

        async def sent(topic: str) -> bool:
            return len(await read_topic(bootstrap_servers, topic)) >= 2

        await wait_until(lambda: sent(f"{name}.late"), timeout_s=60)
        await wait_until(lambda: sent(f"{name}.dlq"), timeout_s=60)
    finally:
        await runtime.shutdown()
    late = [dict(r.headers) for r in await read_topic(bootstrap_servers, f"{name}.late")]
    assert sorted(h["clockwork.input"] for h in late) == [b"orders", b"payments"]
    assert all(h["clockwork.reason"] == b"late" for h in late)
    dead = [dict(r.headers) for r in await read_topic(bootstrap_servers, f"{name}.dlq")]
    assert sorted((h["clockwork.input"], h["clockwork.reason"]) for h in dead) == [
        (b"orders", b"decode_error"),
        (b"payments", b"decode_error"),
    ]
    rows = await read_json(bootstrap_servers, f"{name}.out")
    assert 100 not in {r["value"]["left"]["n"] for r in rows}
    assert 100 not in {r["value"]["right"]["n"] for r in rows}


async def test_a_replica_joining_mid_join_leaves_every_row_once_after_dedupe(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """One replica runs an interval left join over the first 40 % of both inputs; a
    second joins the group (the source and shuffle partitions are rebalanced between
    them, handed over through their checkpoints); both finish the bounded input. After
    de-duplication by id, exactly the reference's rows."""
    name = unique("joinrebal")
    orders, payments, order_records, payment_records, ends = await bounded_inputs(
        bootstrap_servers, name, 13
    )
    first_orders, first_payments = len(order_records) * 2 // 5, len(payment_records) * 2 // 5
    options = {"bounded": ends, "join": INTERVAL_LEFT}
    with replicas(bootstrap_servers, name, f"{name}.orders", tmp_path, 1, **options) as (first,):
        await produce(bootstrap_servers, f"{name}.orders", order_records[:first_orders])
        await produce(bootstrap_servers, f"{name}.payments", payment_records[:first_payments])

        async def first_part_joined() -> bool:
            parts = first.status()["partitions"]
            shuffled = [p for p in parts if p["stage"] == "shuffled"]
            return len(parts) == 2 + 3 + 3 and all(p["offset"] and p["lag"] == 0 for p in shuffled)

        await wait_until(first_part_joined, timeout_s=60)
        second = Replica(bootstrap_servers, name, f"{name}.orders", tmp_path / "r1.json", **options)
        try:

            async def both_hold_partitions() -> bool:
                held = [r.status()["partitions"] for r in (first, second)]
                return all({p["stage"] for p in parts} >= {"route", "shuffled"} for parts in held)

            await wait_until(both_hold_partitions, timeout_s=60)
            await produce(bootstrap_servers, f"{name}.orders", order_records[first_orders:])
            await produce(bootstrap_servers, f"{name}.payments", payment_records[first_payments:])

            async def both_finished() -> bool:
                return first.exited and second.exited

            await wait_until(both_finished, timeout_s=120)
        finally:
            second.stop(signal.SIGTERM)
    assert first.status()["state"] == second.status()["state"] == "finished"
    everything = await read_json(bootstrap_servers, f"{name}.out")
    rows = list({r["id"]: r for r in everything}.values())
    assert sorted(map(pair_of, rows), key=str) == sorted(interval_left(orders, payments), key=str)
    assert await read_topic(bootstrap_servers, f"{name}.dlq") == []
    assert await read_topic(bootstrap_servers, f"{name}.late") == []


async def test_a_skewed_input_holds_the_join_back_until_it_catches_up(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Every order arrives before any payment (the payments input far behind in event
    time): the join's watermark is the payments', so no order is emitted padded while
    its payments may still come; once they do, exactly the reference's rows."""
    name = unique("joinskew")
    orders, payments, order_records, payment_records, ends = await bounded_inputs(
        bootstrap_servers, name, 17
    )
    options = {"bounded": ends, "join": INTERVAL_LEFT}
    with replicas(bootstrap_servers, name, f"{name}.orders", tmp_path, 1, **options) as (one,):
        await produce(bootstrap_servers, f"{name}.orders", order_records)

        async def orders_joined() -> bool:
            """Every order routed and read by the keyed stage."""
            parts = one.status()["partitions"]
            shuffled = [p for p in parts if p["stage"] == "shuffled"]
            routed = [p for p in parts if p["topic"] == f"{name}.orders"]
            return (
                len(shuffled) == 3
                and all(p["offset"] == p["end_offset"] and p["lag"] == 0 for p in routed)
                # rows read (a frame's count as the records they were; markers too)
                and sum(p["records_in"] for p in shuffled) >= len(order_records)
                and all(p["lag"] == 0 for p in shuffled)
            )

        await wait_until(orders_joined, timeout_s=60)
        assert await read_topic(bootstrap_servers, f"{name}.out") == []  # nothing padded
        await produce(bootstrap_servers, f"{name}.payments", payment_records)

        async def finished() -> bool:
            return one.exited

        await wait_until(finished, timeout_s=90)
    rows = list({r["id"]: r for r in await read_json(bootstrap_servers, f"{name}.out")}.values())
    assert sorted(map(pair_of, rows), key=str) == sorted(interval_left(orders, payments), key=str)
    assert await read_topic(bootstrap_servers, f"{name}.late") == []
