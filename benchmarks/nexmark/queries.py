"""The Nexmark queries Clockwork's SQL runs, and the same queries in Flink SQL (#33).

Each query is a script under ``sql/`` (what a user posts to ``/pipelines``), reading the
generator's topics ``nexmark.person``, ``nexmark.auction``, ``nexmark.bid``
(:mod:`benchmarks.nexmark.generate`) and writing ``nexmark.<query>``; :func:`script`
renames those topics for a run. Beside it, the query as Flink SQL writes it (its window
table functions) over tables of the same events, and which result column is the
record's ``key``.

q0-q2 are plain selects (the stateless ``map`` operator), q3 a regular join, q4 three
pipelines (an interval join with a where comparing the two sides, the closing price per
auction as a running ``MAX``, its upserts read as a table and averaged per category with
retractions), q5 two pipelines (bids per auction and sliding window, then a pipeline
over those results with ``MAX_BY``), q6 Beam's Query6 in four pipelines (Flink does not
run it: see its entry), q7 a window with ``MAX_BY``, q8 a semi window join selecting its
window's start (Flink's side runs nexmark-flink's q3, q4, q5, q7 and q8 texts). An
updating query's result (q4's, q6's) is a table: Clockwork's upserts and Flink's
changelog are folded before they are compared. :data:`MISSING` lists the queries of
q0-q8 Clockwork does not run (none now); none is approximated here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SQL = Path(__file__).resolve().parent / "sql"
SPECS = Path(__file__).resolve().parent / "specs"
"""The stages SQL cannot say yet, as JSON specs (q6's Top-N over upserts: a ``row_key``)."""

COLUMNS = {
    "person": "id BIGINT, name VARCHAR, emailAddress VARCHAR, creditCard VARCHAR, "
    "city VARCHAR, state VARCHAR, extra VARCHAR",
    "auction": "id BIGINT, itemName VARCHAR, description VARCHAR, initialBid BIGINT, "
    "reserve BIGINT, expires BIGINT, seller BIGINT, category BIGINT, extra VARCHAR",
    "bid": "auction BIGINT, bidder BIGINT, price BIGINT, extra VARCHAR",
}
"""Each table's columns besides its time column ``dateTime``."""


@dataclass(frozen=True)
class Query:
    name: str
    tables: tuple[str, ...]
    flink: str
    """The ``SELECT`` in Flink SQL, over tables named as the generator's kinds."""
    key: str = ""
    """The result column that is a window result's ``key`` (``""``: no key, ``all``)."""
    after: str = ""
    """The query whose result topic this one reads (q5's second stage reads q5_bids's):
    run it first, to its end (``""``: none)."""
    updating: bool = False
    """Its result is an updating table, not an append-only stream: Clockwork's an upsert
    stream (each Kafka key's newest record is its row, a tombstone deletes it), Flink's
    a changelog (``+I``/``-U``/``+U``/``-D``); each is folded before it is compared."""

    @property
    def path(self) -> Path:
        """Its script (``sql/<name>.sql``), or its JSON spec (``specs/<name>.json``)."""
        sql = SQL / f"{self.name}.sql"
        return sql if sql.exists() else SPECS / f"{self.name}.json"


def stages(query: Query) -> list[Query]:
    """The pipelines that run ``query``, in order: the queries whose results it reads
    (each ``after``, its own first), then itself."""
    by_name = {q.name: q for q in (*QUERIES, *STAGES)}
    chain = [query]
    while chain[0].after:
        chain.insert(0, by_name[chain[0].after])
    return chain


def script(query: Query, prefix: str) -> str:
    """The query's script (or JSON spec) reading ``<prefix>.<kind>`` and writing
    ``<prefix>.<query>``."""
    return (
        query.path.read_text()
        .replace("'nexmark.", f"'{prefix}.")
        .replace('"nexmark.', f'"{prefix}.')
    )


def pipeline(query: Query, prefix: str, name: str) -> dict[str, Any]:
    """What ``POST /pipelines`` takes for the query (:func:`script`'s topics): its
    script as ``{"name", "sql"}``, or its JSON spec named ``name``."""
    text = script(query, prefix)
    if query.path.suffix == ".sql":
        return {"name": name, "sql": text}
    return {"name": name, **json.loads(text)}


def flink_table(kind: str, path: Path) -> str:
    """Flink's table of one kind's events from a JSON-lines file, its ``dateTime`` a
    ``TIMESTAMP_LTZ(3)`` computed from the epoch milliseconds in ``dateTime_ms`` (quoted:
    Flink's parser takes a bare ``dateTime`` for its keyword), the watermark Nexmark's
    (nexmark-flink's DDL): 4 s of out-of-orderness."""
    return (
        f"CREATE TABLE {kind} ({COLUMNS[kind]}, dateTime_ms BIGINT, "
        f"`dateTime` AS TO_TIMESTAMP_LTZ(dateTime_ms, 3), "
        f"WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '4' SECOND) "
        f"WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'json')"
    )


def flink_kafka_tables(kind: str, topic: str, bootstrap: str, group: str) -> list[str]:
    """Flink's table of one kind's events from its Kafka topic, as :func:`flink_table`'s
    columns: the statements to run, in order. Flink's Kafka connector
    (``flink-sql-connector-kafka``), JSON values, read from the earliest offsets to those
    current when the job starts (``scan.bounded.mode = latest-offset``: the job ends at
    the end of the generator's events); every other option the connector's default.

    The topic's records hold ``dateTime`` as epoch milliseconds, and Flink's JSON format
    maps a field to the column of its name: the source table ``<kind>_kafka`` reads it as
    a ``BIGINT``, its rowtime ``rowtime`` with Nexmark's watermark, and the view
    ``<kind>`` renames them to the queries' ``dateTime_ms`` and ``dateTime`` (a view keeps
    its source's time attribute)."""
    names = [c.split()[0] for c in COLUMNS[kind].split(", ")]
    options = {
        "connector": "kafka",
        "topic": topic,
        "properties.bootstrap.servers": bootstrap,
        "properties.group.id": group,
        "scan.startup.mode": "earliest-offset",
        "scan.bounded.mode": "latest-offset",
        "format": "json",
    }
    with_clause = ", ".join(f"'{k}' = '{v}'" for k, v in options.items())
    return [
        f"CREATE TABLE {kind}_kafka ({COLUMNS[kind]}, `dateTime` BIGINT, "
        "rowtime AS TO_TIMESTAMP_LTZ(`dateTime`, 3), "
        "WATERMARK FOR rowtime AS rowtime - INTERVAL '4' SECOND) "
        f"WITH ({with_clause})",
        f"CREATE TEMPORARY VIEW {kind} AS SELECT {', '.join(names)}, "
        f"`dateTime` AS dateTime_ms, rowtime AS `dateTime` FROM {kind}_kafka",
    ]


QUERIES = (
    Query(
        "q0",
        ("bid",),
        "SELECT auction, bidder, price, dateTime_ms AS `dateTime`, extra FROM bid",
    ),
    Query(
        "q1",
        ("bid",),
        "SELECT auction, bidder, 0.908 * price AS price, dateTime_ms AS `dateTime`, extra FROM bid",
    ),
    Query("q2", ("bid",), "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0"),
    Query(
        "q3",
        ("auction", "person"),
        "SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P "
        "ON A.seller = P.id WHERE A.category = 10 "
        "AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')",
    ),
    Query(
        "q4_joined",
        ("auction", "bid"),
        # q4's join: each bid while its auction is open (nexmark-flink's condition, with
        # the times as epoch milliseconds)
        "SELECT A.id, A.category, B.price FROM auction A, bid B WHERE A.id = B.auction "
        "AND B.dateTime_ms BETWEEN A.dateTime_ms AND A.expires",
    ),
    Query(
        "q4_max",
        ("auction", "bid"),
        # q4's inner query: the closing price of each auction
        "SELECT A.id, MAX(B.price) AS final, A.category FROM auction A, bid B "
        "WHERE A.id = B.auction AND B.dateTime_ms BETWEEN A.dateTime_ms AND A.expires "
        "GROUP BY A.id, A.category",
        key="id",
        after="q4_joined",
        updating=True,
    ),
    Query(
        "q4",
        ("auction", "bid"),
        # nexmark-flink's q4, the times as epoch milliseconds and AVG over a DOUBLE
        # (Flink's AVG of a BIGINT truncates to a BIGINT; Clockwork's is a DOUBLE)
        "SELECT Q.category, AVG(CAST(Q.final AS DOUBLE)) AS final FROM (SELECT "
        "MAX(B.price) AS final, A.category FROM auction A, bid B WHERE A.id = B.auction "
        "AND B.dateTime_ms BETWEEN A.dateTime_ms AND A.expires GROUP BY A.id, A.category) Q "
        "GROUP BY Q.category",
        key="category",
        after="q4_max",
        updating=True,
    ),
    Query(
        "q5_bids",
        ("bid",),
        "SELECT auction, COUNT(*) AS num, window_start, window_end FROM TABLE(HOP(TABLE bid, "
        "DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) "
        "GROUP BY auction, window_start, window_end",
        key="auction",
    ),
    Query(
        "q5",
        ("bid",),
        # nexmark-flink's q5 (its window table function text): the bids per auction and
        # window joined with the maximum of those per window
        "SELECT AuctionBids.auction, AuctionBids.num FROM (SELECT auction, COUNT(*) AS num, "
        "window_start AS starttime, window_end AS endtime FROM TABLE(HOP(TABLE bid, "
        "DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) "
        "GROUP BY auction, window_start, window_end) AS AuctionBids JOIN (SELECT "
        "MAX(CountBids.num) AS maxn, CountBids.starttime, CountBids.endtime FROM (SELECT "
        "COUNT(*) AS num, window_start AS starttime, window_end AS endtime FROM TABLE(HOP("
        "TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND)) "
        "GROUP BY auction, window_start, window_end) AS CountBids "
        "GROUP BY CountBids.starttime, CountBids.endtime) AS MaxBids "
        "ON AuctionBids.starttime = MaxBids.starttime AND AuctionBids.endtime = MaxBids.endtime "
        "AND AuctionBids.num >= MaxBids.maxn",
        after="q5_bids",
    ),
    Query(
        "q6",
        ("auction", "bid"),
        # Flink does not run q6: nexmark-flink's text is an OVER window (ROWS BETWEEN 10
        # PRECEDING AND CURRENT ROW) over q4's updating join, and Flink's OVER window
        # cannot take retractions. q6 is Beam's Query6 (what Beam runs): per seller, the
        # average price of its last 10 winning bids (WinningBids: the highest bid at or
        # above the reserve before the auction's end, the earliest on a tie; "last" by
        # the bid's time, then price), updated as each auction's winning bid changes.
        # Four pipelines: the join (sql/q6_joined.sql), the winning bid per auction
        # (q6_winning.sql), a Top-N of 10 per seller by that bid's time over those
        # upserts (specs/q6_last10.json: a row_key, which SQL cannot say yet; it ranks
        # by Beam's order, time then price, as one 64-bit integer: (bid time - the
        # generator's base time) * 10^9 + price, exact for prices below 10^9 and times
        # within 106 days of the base), the average over the Top-N's rank rows read as
        # a table (q6.sql).
        "",
        key="seller",
        after="q6_last10",
        updating=True,
    ),
    Query(
        "q7_max_price",
        ("bid",),
        "SELECT MAX(price) AS maxprice, window_start, window_end FROM TABLE(TUMBLE(TABLE bid, "
        "DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND)) GROUP BY window_start, window_end",
    ),
    Query(
        "q7",
        ("bid",),
        # nexmark-flink's q7, but dateTime as epoch milliseconds (as the other queries
        # select it): the maximum per window joined back to the bids of that window
        "SELECT B.auction, B.price, B.bidder, B.dateTime_ms AS `dateTime`, B.extra "
        "FROM bid B JOIN (SELECT MAX(B1.price) AS maxprice, "
        "TUMBLE_ROWTIME(B1.`dateTime`, INTERVAL '10' SECOND) AS `dateTime` FROM bid B1 "
        "GROUP BY TUMBLE(B1.`dateTime`, INTERVAL '10' SECOND)) B1 ON B.price = B1.maxprice "
        "WHERE B.`dateTime` BETWEEN B1.`dateTime` - INTERVAL '10' SECOND AND B1.`dateTime`",
    ),
    Query(
        "q8",
        ("person", "auction"),
        # nexmark-flink's q8: each side's GROUP BY per 10 s window (distinct persons,
        # distinct sellers), joined on the id and the window's bounds
        "SELECT P.id, P.name, P.starttime FROM (SELECT P.id, P.name, "
        "TUMBLE_START(P.`dateTime`, INTERVAL '10' SECOND) AS starttime, "
        "TUMBLE_END(P.`dateTime`, INTERVAL '10' SECOND) AS endtime FROM person P "
        "GROUP BY P.id, P.name, TUMBLE(P.`dateTime`, INTERVAL '10' SECOND)) P "
        "JOIN (SELECT A.seller, TUMBLE_START(A.`dateTime`, INTERVAL '10' SECOND) AS starttime, "
        "TUMBLE_END(A.`dateTime`, INTERVAL '10' SECOND) AS endtime FROM auction A "
        "GROUP BY A.seller, TUMBLE(A.`dateTime`, INTERVAL '10' SECOND)) A "
        "ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime",
    ),
    Query(
        "q11",
        ("bid",),
        "SELECT bidder, COUNT(*) AS bid_count, window_start, window_end FROM TABLE(SESSION("
        "TABLE bid PARTITION BY bidder, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND)) "
        "GROUP BY bidder, window_start, window_end",
        key="bidder",
    ),
)

STAGES = (
    Query("q6_joined", ("auction", "bid"), ""),
    Query("q6_winning", ("auction", "bid"), "", after="q6_joined"),
    Query("q6_last10", ("auction", "bid"), "", after="q6_winning"),
)
"""q6's first stages, run only as its stages (no Flink text to check each against)."""

MISSING: dict[str, str] = {}
"""The queries of q0-q8 Clockwork does not run, with what each needs: none since q4
and q6 (#50)."""
