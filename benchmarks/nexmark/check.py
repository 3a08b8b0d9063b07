"""Both engines' rows of a Nexmark query set beside its Python reference
(:mod:`benchmarks.nexmark.reference`), so the bench checks every run's output at its own
size, not only the tests' 3,000 events: Clockwork's result records (:func:`as_row`) and
Flink's collected rows, each cell brought to one form first (:func:`cell`)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from benchmarks.nexmark.generate import Event
from benchmarks.nexmark.queries import Query
from benchmarks.nexmark.reference import REFERENCES, Row

COLUMNS = {
    "q0": ("auction", "bidder", "price", "dateTime", "extra"),
    "q1": ("auction", "bidder", "price", "dateTime", "extra"),
    "q2": ("auction", "price"),
    "q3": ("name", "city", "state", "id"),
    "q4_joined": ("id", "category", "price"),
    "q4_max": ("id", "final", "category"),
    "q4": ("category", "final"),
    "q5_bids": ("auction", "num", "window_start", "window_end"),
    "q5": ("auction", "num"),
    "q6": ("seller", "avg_price"),
    "q7_max_price": ("maxprice", "window_start", "window_end"),
    "q7": ("auction", "price", "bidder", "dateTime", "extra"),
    "q8": ("id", "name", "starttime"),
    "q11": ("bidder", "bid_count", "window_start", "window_end"),
}
"""The reference's columns per query, in its rows' order (Flink's result columns)."""

EPOCH = datetime(1970, 1, 1)
FLOAT_PLACES = 6
"""q1's price: Flink's is an exact ``DECIMAL``, Clockwork's a double (``0.908 * price``
off by an ulp at most); both are the same float once rounded to this many places."""


def cell(value: Any) -> Any:
    """One cell in the form every side is compared in: a decimal or a float rounded to
    :data:`FLOAT_PLACES` (a float), a timestamp as epoch milliseconds (Flink's window
    bounds are ``TIMESTAMP(3)`` values, ``datetime``s or pandas' ``Timestamp``s, taken as
    UTC, the session's time zone; Clockwork's and the reference's are milliseconds
    already), anything else as it is."""
    if isinstance(value, datetime):
        naive = value if value.tzinfo is None else value.astimezone(UTC).replace(tzinfo=None)
        return (naive - EPOCH) // timedelta(milliseconds=1)
    if isinstance(value, Decimal):
        value = float(value)
    return round(value, FLOAT_PLACES) if isinstance(value, float) else value


def normalised(rows: Iterable[Iterable[Any]]) -> list[Row]:
    """``rows`` with each cell :func:`cell`'s, sorted as the reference's are (again: a
    decimal's and a float's ``repr`` sort differently)."""
    return sorted((tuple(cell(v) for v in row) for row in rows), key=repr)


def as_row(query: Query, record: dict[str, Any]) -> Row:
    """A result record's cells in the reference's column order: a plain select's or a
    join's record holds them in ``value``; a window's in its ``result``, ``window`` and
    ``key``; a running aggregate's (an upsert) in its ``result`` and ``key``."""
    if "result" not in record:
        return tuple(record["value"][c] for c in COLUMNS[query.name])
    found = dict(record["result"])
    if "window" in record:
        found["window_start"] = record["window"]["start"]
        found["window_end"] = record["window"]["end"]
    if query.key:
        found[query.key] = int(record["key"])
    return tuple(found[c] for c in COLUMNS[query.name])


def folded(records: Iterable[tuple[Any, dict[str, Any] | None]]) -> list[dict[str, Any]]:
    """An upsert stream's table: per Kafka key (records in offset order, as a key's are in
    its partition) the newest value, a tombstone (``None``) deleting the key."""
    table: dict[Any, dict[str, Any]] = {}
    for key, value in records:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    return list(table.values())


def changelog_folded(rows: Iterable[Iterable[Any]], kinds: Iterable[str]) -> list[Row]:
    """A Flink changelog's table: ``+I`` and ``+U`` add their row, ``-U`` and ``-D`` take
    one such row away (a multiset: a changelog takes back a row it added)."""
    table: dict[Row, int] = {}
    for row, kind in zip(rows, kinds, strict=True):
        found = tuple(row)
        if kind in ("INSERT", "UPDATE_AFTER"):
            table[found] = table.get(found, 0) + 1
        elif table.get(found, 0) > 1:
            table[found] -= 1
        elif table.pop(found, None) is None:
            raise ValueError(f"the changelog takes back {found}, which it never added")
    return [row for row, n in table.items() for _ in range(n)]


def clockwork_rows(query: Query, records: Iterable[dict[str, Any]]) -> list[Row]:
    """Clockwork's result records as rows, normalised, to set beside :func:`reference`'s."""
    return normalised(as_row(query, r) for r in records)


def reference(query: Query, events: dict[str, list[Event]]) -> list[Row]:
    """The reference's rows of ``query``, normalised: what either engine's rows
    (:func:`clockwork_rows`; Flink's through :func:`normalised`) must equal."""
    return normalised(REFERENCES[query.name](events))


def difference(got: list[Row], want: list[Row], shown: int = 3) -> str:
    """What tells ``got`` from ``want`` (both normalised), in a line: the counts and a few
    rows only one side has."""
    only_got = sorted(set(got) - set(want), key=repr)[:shown]
    only_want = sorted(set(want) - set(got), key=repr)[:shown]
    return (
        f"{len(got):,} rows, the reference {len(want):,}; only here: {only_got}; "
        f"only the reference's: {only_want}"
    )
