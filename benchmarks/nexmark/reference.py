"""Straightforward Python answers of the Nexmark queries over the generated events (#33):
no state, no watermark, no pruning; what a query's output must be, row for row.

Each takes :func:`~benchmarks.nexmark.generate.by_kind`'s events and returns the rows
as tuples of the query's columns (the Flink text's), sorted, so the benchmark and the
tests compare Clockwork's (and Flink's) rows with them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.nexmark.generate import Event

Row = tuple[Any, ...]
WINDOW_MS = 10_000
"""q7's and q8's tumbling window."""
HOP_SIZE_MS, HOP_SLIDE_MS = 10_000, 2_000
"""q5's sliding window."""


def q3(events: dict[str, list[Event]]) -> list[Row]:
    """Every auction of category 10 with its seller, when the seller lives in OR, ID or
    CA: ``name, city, state, id``."""
    people = [p.record for p in events["person"] if p.record["state"] in ("OR", "ID", "CA")]
    by_id: dict[int, list[dict[str, Any]]] = {}
    for person in people:
        by_id.setdefault(person["id"], []).append(person)
    rows = [
        (p["name"], p["city"], p["state"], a.record["id"])
        for a in events["auction"]
        if a.record["category"] == 10
        for p in by_id.get(a.record["seller"], ())
    ]
    return sorted(rows, key=repr)


def q5(events: dict[str, list[Event]]) -> list[Row]:
    """Per sliding window (10 s, every 2 s), the auctions with the most bids (every one
    tied at the maximum, as Flink's q5): ``auction, num``."""
    counts: dict[int, dict[int, int]] = {}
    for bid in (e.record for e in events["bid"]):
        t = bid["dateTime"]
        for start in range(t - t % HOP_SLIDE_MS, t - HOP_SIZE_MS, -HOP_SLIDE_MS):
            per = counts.setdefault(start, {})
            per[bid["auction"]] = per.get(bid["auction"], 0) + 1
    rows = []
    for per in counts.values():
        most = max(per.values())
        rows.extend((auction, n) for auction, n in per.items() if n == most)
    return sorted(rows, key=repr)


def q7(events: dict[str, list[Event]]) -> list[Row]:
    """Per 10 s tumbling window, the bid with the highest price (ties: the earliest,
    then the first generated): ``auction, price, bidder, dateTime, extra``."""
    best: dict[int, dict[str, Any]] = {}
    for bid in (e.record for e in events["bid"]):
        start = bid["dateTime"] - bid["dateTime"] % WINDOW_MS
        held = best.get(start)
        if (
            held is None
            or bid["price"] > held["price"]
            or (bid["price"] == held["price"] and bid["dateTime"] < held["dateTime"])
        ):
            best[start] = bid
    rows = [
        (b["auction"], b["price"], b["bidder"], b["dateTime"], b["extra"]) for b in best.values()
    ]
    return sorted(rows, key=repr)


def q8(events: dict[str, list[Event]]) -> list[Row]:
    """Per 10 s tumbling window, each distinct person (id, name) registered in it who is
    the seller of an auction of the same window: ``id, name, starttime``."""
    sellers = {
        (a.record["seller"], a.record["dateTime"] - a.record["dateTime"] % WINDOW_MS)
        for a in events["auction"]
    }
    rows = {
        (p["id"], p["name"], start)
        for p in (e.record for e in events["person"])
        if (p["id"], start := p["dateTime"] - p["dateTime"] % WINDOW_MS) in sellers
    }
    return sorted(rows, key=repr)


REFERENCES: dict[str, Callable[[dict[str, list[Event]]], list[Row]]] = {
    "q3": q3,
    "q5": q5,
    "q7": q7,
    "q8": q8,
}
"""The queries that have a reference here, by name."""
