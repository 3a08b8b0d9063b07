"""The SQL front end checked against Flink SQL (#32): the same query, on the same events,
gives the same rows in Clockwork (through the broker, over the REST API, as a user runs
it) and in Flink SQL (PyFlink's local MiniCluster), compared row for row.

The forms: a tumbling, a hopping and a session window aggregate, an interval (left) join,
an event-time temporal (left) join and a tumbling window (full) join. The events of each
case come from a seeded generator plus hand-placed probes at the edges the two engines
could disagree on: a record one millisecond from a window's watermark (Flink SQL's watermark is the
``WATERMARK`` expression itself, ``max(ts) - n``), a tie at a window's last millisecond
under ``WATERMARK FOR ts AS ts``, a session that closes before a record that would have
extended it, join bounds hit exactly and missed by one millisecond, a rate version
valid at exactly the order's time and orders before any version.

How Flink reads the events: from JSON-lines files (the ``filesystem`` connector and the
``json`` format ship with the ``apache-flink`` package), not from Kafka. Flink's Kafka
connector is a separate jar with its own version line; the files hold exactly the
records of the topics, in the same order, so nothing is lost by leaving it out, and a
bounded file makes Flink emit its final watermark at the end, as Clockwork's ``bounded =
true`` does. Order is what decides lateness, so each window case reads one
single-partition topic (Clockwork) or one file with parallelism 1 (Flink), both with a
watermark after every record (``watermark_interval = 0``; Flink's
``pipeline.auto-watermark-interval: 0``). The join cases read two inputs, which both
engines interleave as it comes; their events are in order within each input, so no row
is late in either and the interleaving cannot change the result.

The queries are the same text but for two forms Flink writes differently: its window
functions take ``TABLE t`` and ``DESCRIPTOR(ts)`` (``TABLE(TUMBLE(TABLE orders,
DESCRIPTOR(ts), ...))``; a session's key is its ``PARTITION BY``), and its time column
must be a ``TIMESTAMP_LTZ(3)``: the files carry the epoch milliseconds as ``ts_ms`` and
Flink's table computes ``ts AS TO_TIMESTAMP_LTZ(ts_ms, 3)``, so the queries name ``ts``
in both.

One Flink process (one JVM) serves the whole session (:mod:`tests.integration.flink_sql`),
and each case's Flink rows are computed once, whichever broker runs first.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.server import (
    app_settings,
    create_topic,
    eventually,
    produce,
    running_app,
    wait_ready,
)
from tests.integration.flink_sql import FlinkSql
from tests.integration.kafka_utils import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.flink]

BASE = 1_700_000_000_000
"""A multiple of every window size here, so window bounds read as offsets from it."""


@dataclass(frozen=True)
class Input:
    """One source: its columns (besides ``ts``), key, watermark delay and events."""

    name: str
    columns: str
    key: str
    watermark: str
    """The ``WATERMARK FOR ts AS ...`` expression, the same text in both engines."""
    events: list[dict[str, Any]]
    versioned: bool = False
    """Flink's temporal join needs the right side declared a versioned table (a primary
    key); Clockwork's takes the join's key."""

    def clockwork(self, topic: str) -> str:
        return (
            f"CREATE SOURCE {self.name} ({self.columns}, ts BIGINT, "
            f"WATERMARK FOR ts AS {self.watermark}) WITH (topic = '{topic}', bounded = true, "
            f"partitioned_by = '{self.key}', watermark_interval = 0)"
        )

    def flink(self, path: Path) -> str:
        key = f", PRIMARY KEY ({self.key}) NOT ENFORCED" if self.versioned else ""
        return (
            f"CREATE TABLE {self.name} ({self.columns}, ts_ms BIGINT, "
            f"ts AS TO_TIMESTAMP_LTZ(ts_ms, 3), WATERMARK FOR ts AS {self.watermark}{key}) "
            f"WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json')"
        )


@dataclass(frozen=True)
class Case:
    name: str
    inputs: tuple[Input, ...]
    query: str
    """The ``SELECT``, with ``{window}`` (or the names of :attr:`windows`) where it names
    a window table function."""
    windows: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Each window function of the query as Clockwork and as Flink write it."""
    key: str = ""
    """A window aggregate's group key: the column of the result record's ``key``."""
    flink_differs: dict[str, str] = field(default_factory=dict)
    """Columns whose value Flink computes otherwise by a documented choice (docs/sql.md),
    with how: ``"int"``, Flink's AVG of an integer column is an integer (truncated)."""

    def clockwork_sql(self, topics: dict[str, str], sink: str) -> str:
        sources = ";\n".join(i.clockwork(topics[i.name]) for i in self.inputs)
        query = self.query.format(**{k: cw for k, (cw, _) in self.windows.items()})
        return f'{sources};\nINSERT INTO "{sink}"\n{query};'

    def flink_sql(self, paths: dict[str, Path]) -> tuple[list[str], str]:
        query = self.query.format(**{k: flink for k, (_, flink) in self.windows.items()})
        return [i.flink(paths[i.name]) for i in self.inputs], query


def _orders(seed: int, probes: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """~90 orders 230 ms apart, some up to 3.4 s behind (past a 2 s bound: late), then
    ``probes`` (customer, offset from BASE) in the order given."""
    rng = random.Random(seed)
    times = [
        (f"c{rng.randrange(1, 4)}", i * 230 - rng.choice((0,) * 6 + (400, 1200, 1900, 2600, 3400)))
        for i in range(90)
    ]
    return [
        {
            "customer": customer,
            "product": f"p{rng.randrange(4)}",
            "amount": round(rng.uniform(1, 50), 2),
            "qty": rng.randrange(1, 6),
            "ts": BASE + offset,
        }
        for customer, offset in [*times, *probes]
    ]


ORDER_COLUMNS = "customer VARCHAR, product VARCHAR, amount DOUBLE, qty BIGINT"

TUMBLING = Case(
    "tumbling",
    (
        Input(
            "orders",
            ORDER_COLUMNS,
            "customer",
            "ts - INTERVAL '2' SECOND",
            # The watermark after (c1, 51999) is 49999 in Flink SQL: [40000, 50000)
            # closes, and (c2, 49000) is late; at 49998 it would still be open.
            _orders(1, [("c1", 41_000), ("c2", 49_999), ("c1", 51_999), ("c2", 49_000)]),
        ),
    ),
    "SELECT customer, window_start, window_end, COUNT(*) AS n, SUM(amount) AS total, "
    "MIN(amount) AS lo, MAX(amount) AS hi, AVG(amount) AS mean, AVG(qty) AS mean_qty, "
    "COUNT(DISTINCT product) AS products FROM {window} WHERE qty > 1 "
    "GROUP BY customer, window_start, window_end",
    {
        "window": (
            "TUMBLE(orders, ts, INTERVAL '10' SECOND)",
            "TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '10' SECOND))",
        )
    },
    key="customer",
    flink_differs={"mean_qty": "int"},
)

HOPPING = Case(
    "hopping",
    (
        Input(
            "orders",
            ORDER_COLUMNS,
            "customer",
            "ts",
            # Under WATERMARK FOR ts AS ts, the first (c1, 44999) makes the watermark
            # 44999: the window ending at 45000 closes, and the second is late for it
            # (not for the two later windows it belongs to).
            _orders(2, [("c1", 41_000), ("c1", 44_999), ("c1", 44_999), ("c2", 46_000)]),
        ),
    ),
    "SELECT customer, window_start, window_end, COUNT(*) AS n, SUM(qty) AS q "
    "FROM {window} GROUP BY customer, window_start, window_end",
    {
        "window": (
            "HOP(orders, ts, INTERVAL '5' SECOND, INTERVAL '15' SECOND)",
            "TABLE(HOP(TABLE orders, DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '15' SECOND))",
        )
    },
    key="customer",
)

SESSIONS = Case(
    "session",
    (
        Input(
            "orders",
            ORDER_COLUMNS,
            "customer",
            "ts - INTERVAL '1' SECOND",
            # c1's session [40000, 45000) closes at the watermark 44999, after (c2,
            # 45999); then (c1, 44500) would have extended it, and starts its own.
            _orders(
                3,
                [("c1", 40_000), ("c1", 42_000), ("c2", 45_999), ("c1", 44_500), ("c3", 50_000)],
            ),
        ),
    ),
    "SELECT customer, window_start, window_end, COUNT(*) AS n, SUM(qty) AS q "
    "FROM {window} GROUP BY customer, window_start, window_end",
    {
        "window": (
            "SESSION(orders, ts, INTERVAL '3' SECOND)",
            "TABLE(SESSION(TABLE orders PARTITION BY customer, DESCRIPTOR(ts), "
            "INTERVAL '3' SECOND))",
        )
    },
    key="customer",
)


def _orders_and_payments() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Orders 500 ms apart; 0 to 3 payments each at offsets around the join's bounds
    (-1000 and +5000 hit, -1001 and +5001 miss); each input in time order."""
    rng = random.Random(4)
    orders, payments = [], []
    for n in range(40):
        ts = BASE + n * 500
        order_id = f"o{rng.randrange(12)}"
        orders.append({"order_id": order_id, "amount": float(n), "ts": ts})
        for offset in rng.sample((-1001, -1000, 0, 1700, 5000, 5001), rng.randrange(4)):
            payments.append({"order_id": order_id, "paid": n + offset / 10_000, "ts": ts + offset})
    payments.sort(key=lambda p: p["ts"])
    return orders, payments


_ORDERS, _PAYMENTS = _orders_and_payments()

INTERVAL_JOIN = Case(
    "interval-join",
    (
        Input("orders", "order_id VARCHAR, amount DOUBLE", "order_id", "ts", _ORDERS),
        Input(
            "payments",
            "order_id VARCHAR, paid DOUBLE",
            "order_id",
            "ts - INTERVAL '1' SECOND",
            _PAYMENTS,
        ),
    ),
    "SELECT o.order_id AS order_id, o.amount AS amount, p.paid AS paid "
    "FROM orders o LEFT JOIN payments p ON o.order_id = p.order_id "
    "AND p.ts BETWEEN o.ts - INTERVAL '1' SECOND AND o.ts + INTERVAL '5' SECOND",
)


def _orders_and_rates() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rates of three currencies changing every few seconds (EUR's first version comes
    late, so early EUR orders have none); orders 300 ms apart, some at exactly a
    version's time."""
    rng = random.Random(5)
    rates = []
    for currency, first in (("USD", 0), ("GBP", 1_000), ("EUR", 6_000)):
        for version, offset in enumerate(range(first, 20_000, rng.randrange(2_000, 4_000))):
            rates.append({"currency": currency, "rate": 1 + version / 8, "ts": BASE + offset})
    rates.sort(key=lambda r: r["ts"])
    versions = [r["ts"] for r in rates]
    orders = []
    for n in range(50):
        ts = BASE + n * 300 if n % 7 else rng.choice(versions)
        orders.append(
            {
                "order_id": f"o{n}",
                "currency": rng.choice(("USD", "GBP", "EUR")),
                "amount": float(n),
                "ts": ts,
            }
        )
    orders.sort(key=lambda o: o["ts"])
    return orders, rates


_RATE_ORDERS, _RATES = _orders_and_rates()

TEMPORAL_JOIN = Case(
    "temporal-join",
    (
        Input(
            "orders",
            "order_id VARCHAR, currency VARCHAR, amount DOUBLE",
            "currency",
            "ts - INTERVAL '1' SECOND",
            _RATE_ORDERS,
        ),
        Input(
            "rates",
            "currency VARCHAR, rate DOUBLE",
            "currency",
            "ts - INTERVAL '1' SECOND",
            _RATES,
            versioned=True,
        ),
    ),
    "SELECT o.order_id AS order_id, o.amount AS amount, r.rate AS rate "
    "FROM orders o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.ts AS r "
    "ON o.currency = r.currency",
)

WINDOW_JOIN = Case(
    "window-join",
    INTERVAL_JOIN.inputs,
    "SELECT o.order_id AS order_id, p.order_id AS paid_order, o.amount AS amount, "
    "p.paid AS paid FROM {orders} o FULL JOIN {payments} p ON o.order_id = p.order_id "
    "AND o.window_start = p.window_start AND o.window_end = p.window_end",
    {
        name: (
            f"TUMBLE({name}, ts, INTERVAL '5' SECOND)",
            f"(SELECT * FROM TABLE(TUMBLE(TABLE {name}, DESCRIPTOR(ts), INTERVAL '5' SECOND)))",
        )
        for name in ("orders", "payments")
    },
)

SELECT = Case(
    "select",
    # Every record passes at once (no state: nothing is late), filtered and computed.
    (Input("orders", ORDER_COLUMNS, "customer", "ts - INTERVAL '2' SECOND", _orders(7, [])),),
    "SELECT customer, product, amount * qty AS spent, qty FROM orders "
    "WHERE qty > 2 AND amount < 40",
)

CASES = (TUMBLING, HOPPING, SESSIONS, INTERVAL_JOIN, TEMPORAL_JOIN, WINDOW_JOIN, SELECT)

Row = tuple[Any, ...]


def _cell(value: Any) -> Any:
    return round(value, 6) if isinstance(value, float) else value


def _flink_row(case: Case, columns: list[str], values: list[Any]) -> Row:
    row = dict(zip(columns, values, strict=True))
    return tuple(_cell(row[c]) for c in columns)


def _clockwork_row(case: Case, columns: list[str], record: dict[str, Any]) -> Row:
    if case.key:  # a window result: {key, window, result}
        assert (record["fire"], record["seq"]) == ("on_time", 0), record
        found = {
            case.key: record["key"],
            "window_start": record["window"]["start"],
            "window_end": record["window"]["end"],
            **record["result"],
        }
    else:  # a join row, or a plain select's record: the select list is its value
        found = record["value"]
    for column, how in case.flink_differs.items():
        if how == "int":  # Flink's AVG of integers is an integer, truncated
            found[column] = int(found[column])
    return tuple(_cell(found[c]) for c in columns)


@pytest.fixture(scope="session")
def flink_answers(
    flink: FlinkSql, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[list[str], list[Row]]]]:
    """Per case, Flink's columns and rows; filled by the first test of the case."""
    answers: dict[str, tuple[list[str], list[Row]]] = {}
    yield answers


def _flink_rows(
    case: Case,
    flink: FlinkSql,
    answers: dict[str, tuple[list[str], list[Row]]],
    folder: Path,
) -> tuple[list[str], list[Row]]:
    if case.name not in answers:
        paths = {}
        for source in case.inputs:
            path = folder / f"{source.name}.json"
            with path.open("w") as out:
                for event in source.events:
                    row = {k: v for k, v in event.items() if k != "ts"}
                    out.write(json.dumps({**row, "ts_ms": event["ts"]}) + "\n")
            paths[source.name] = path
        statements, query = case.flink_sql(paths)
        columns, values = flink.query(statements, query)
        answers[case.name] = (
            columns,
            sorted((_flink_row(case, columns, v) for v in values), key=repr),
        )
    return answers[case.name]


async def _clockwork_records(case: Case, bootstrap_servers: str) -> list[dict[str, Any]]:
    """The case's SQL posted to the service, run to the end of its bounded inputs; every
    record of its result topic (none a tombstone)."""
    topic = await run_case(case, bootstrap_servers)
    return [json.loads(r.value) for r in await read_topic(bootstrap_servers, topic)]


async def run_case(case: Case, bootstrap_servers: str) -> str:
    """The case's SQL posted to the service and run to the end of its bounded inputs;
    its result topic, every result written."""
    suffix = uuid.uuid4().hex[:8]
    name = f"flink-{case.name}-{suffix}"
    topics = {i.name: f"{name}.{i.name}" for i in case.inputs}
    for source in case.inputs:
        await create_topic(bootstrap_servers, topics[source.name], partitions=1)
        await produce(
            bootstrap_servers,
            topics[source.name],
            [(str(e[source.key]), e) for e in source.events],
        )
    async with (
        running_app(app_settings(bootstrap_servers)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        await wait_ready(client)
        sql = case.clockwork_sql(topics, f"{name}.out")
        created = await client.post("/pipelines", json={"name": name, "sql": sql})
        assert created.status_code == 201, created.text

        async def finished() -> bool:
            status = (await client.get(f"/pipelines/{name}/status")).json()
            assert status["state"] != "failed", status
            return bool(status["state"] == "finished")

        await eventually(finished, timeout_s=90)
    # Finished: every result is written (the sink flushed before the state changed).
    return f"{name}.out"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_a_sql_pipeline_gives_the_rows_of_the_same_query_in_flink_sql(
    case: Case,
    bootstrap_servers: str,
    flink: FlinkSql,
    flink_answers: dict[str, tuple[list[str], list[Row]]],
    tmp_path: Path,
) -> None:
    columns, want = _flink_rows(case, flink, flink_answers, tmp_path)
    assert want, "Flink gave no rows: the case checks nothing"
    records = await _clockwork_records(case, bootstrap_servers)
    got = sorted((_clockwork_row(case, columns, r) for r in records), key=repr)
    missing = sorted(set(want) - set(got), key=repr)
    extra = sorted(set(got) - set(want), key=repr)
    assert got == want, f"Flink only: {missing}\nClockwork only: {extra}"
