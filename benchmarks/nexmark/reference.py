"""Straightforward Python answers of the Nexmark queries over the generated events (#33):
no state, no watermark, no pruning; what a query's output must be, row for row.

Each takes :func:`~benchmarks.nexmark.generate.by_kind`'s events and returns the rows
as tuples of the query's columns (the Flink text's), sorted, so the benchmark and the
tests compare Clockwork's (and Flink's) rows with them. Times are epoch milliseconds,
as the events hold them (a window's bounds too).

No late event is dropped here, and none has to be: the generator's event times never
decrease (event ``n`` is at ``base + n / rate``) and each kind is read in that order,
from one partition or file, so no event is ever behind a watermark (both engines' lag
4 s behind the newest event seen).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from benchmarks.nexmark.generate import Event

Row = tuple[Any, ...]
WINDOW_MS = 10_000
"""q7's and q8's tumbling window."""
HOP_SIZE_MS, HOP_SLIDE_MS = 10_000, 2_000
"""q5's sliding window."""
SESSION_GAP_MS = 10_000
"""q11's session gap."""
EUROS_PER_DOLLAR = Decimal("0.908")
"""q1's rate: a SQL decimal literal, so ``0.908 * price`` is exact (Flink's ``DECIMAL``)."""


def _bids(events: dict[str, list[Event]]) -> list[dict[str, Any]]:
    return [e.record for e in events["bid"]]


def q0(events: dict[str, list[Event]]) -> list[Row]:
    """Every bid as it is: ``auction, bidder, price, dateTime, extra``."""
    rows = [
        (b["auction"], b["bidder"], b["price"], b["dateTime"], b["extra"]) for b in _bids(events)
    ]
    return sorted(rows, key=repr)


def q1(events: dict[str, list[Event]]) -> list[Row]:
    """Every bid with its price times 0.908, exact (a ``Decimal``, as Flink's ``DECIMAL``;
    Clockwork's is a double: :func:`benchmarks.nexmark.check.cell` brings both to one
    float): ``auction, bidder, price, dateTime, extra``."""
    rows = [
        (b["auction"], b["bidder"], EUROS_PER_DOLLAR * b["price"], b["dateTime"], b["extra"])
        for b in _bids(events)
    ]
    return sorted(rows, key=repr)


def q2(events: dict[str, list[Event]]) -> list[Row]:
    """The bids on every 123rd auction: ``auction, price``."""
    rows = [(b["auction"], b["price"]) for b in _bids(events) if b["auction"] % 123 == 0]
    return sorted(rows, key=repr)


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


def _bids_while_open(events: dict[str, list[Event]]) -> list[tuple[dict[str, Any], int]]:
    """Each bid on an auction from the auction's time to its end, both included, as
    ``(auction, price)``: q4's join."""
    auctions = {a.record["id"]: a.record for a in events["auction"]}
    found = []
    for bid in _bids(events):
        auction = auctions.get(bid["auction"])
        if auction is not None and auction["dateTime"] <= bid["dateTime"] <= auction["expires"]:
            found.append((auction, bid["price"]))
    return found


def q4_joined(events: dict[str, list[Event]]) -> list[Row]:
    """q4's join: every bid on an auction while it is open: ``id, category, price``."""
    rows = [(a["id"], a["category"], price) for a, price in _bids_while_open(events)]
    return sorted(rows, key=repr)


def _closing_prices(events: dict[str, list[Event]]) -> dict[int, tuple[int, int]]:
    """Per auction with a bid while it was open: ``(its highest such bid, category)``."""
    best: dict[int, tuple[int, int]] = {}
    for auction, price in _bids_while_open(events):
        held = best.get(auction["id"])
        if held is None or price > held[0]:
            best[auction["id"]] = (price, auction["category"])
    return best


def q4_max(events: dict[str, list[Event]]) -> list[Row]:
    """q4's inner query: each auction's closing price (its highest bid while it was
    open), with its category: ``id, final, category``."""
    rows = [(aid, final, category) for aid, (final, category) in _closing_prices(events).items()]
    return sorted(rows, key=repr)


def q4(events: dict[str, list[Event]]) -> list[Row]:
    """Average closing price per category, over the auctions that had a bid while open:
    ``category, final`` (a float, as Clockwork's ``AVG`` and Flink's over a ``DOUBLE``)."""
    per: dict[int, list[int]] = {}
    for final, category in _closing_prices(events).values():
        per.setdefault(category, []).append(final)
    rows = [(category, sum(finals) / len(finals)) for category, finals in per.items()]
    return sorted(rows, key=repr)


LAST_AUCTIONS = 10
"""q6's window: a seller's last 10 winning bids."""


def q6(events: dict[str, list[Event]]) -> list[Row]:
    """Beam's Query6, once every auction has closed: per seller, the average price of its
    last 10 winning bids: ``seller, avg_price`` (a float; Beam rounds it to a long).

    An auction's winning bid (Beam's WinningBids): of its bids before its end
    (``expires``, excluded) at or above its reserve, the highest price, the earliest on a
    tie (then the first generated); a bid from before the auction was created counts too
    (Beam's auction window takes it). A seller's last 10: its winning bids by the bid's
    time, then price (Beam's ``ASCENDING_TIME_THEN_PRICE``), the 10 greatest."""
    auctions = {a.record["id"]: a.record for a in events["auction"]}
    winning: dict[int, dict[str, Any]] = {}
    for bid in _bids(events):
        auction = auctions.get(bid["auction"])
        if (
            auction is None
            or bid["dateTime"] >= auction["expires"]
            or bid["price"] < auction["reserve"]
        ):
            continue
        held = winning.get(auction["id"])
        if (
            held is None
            or bid["price"] > held["price"]
            or (bid["price"] == held["price"] and bid["dateTime"] < held["dateTime"])
        ):
            winning[auction["id"]] = bid
    per: dict[int, list[tuple[int, int]]] = {}
    for aid, bid in winning.items():
        per.setdefault(auctions[aid]["seller"], []).append((bid["dateTime"], bid["price"]))
    rows = []
    for seller, found in per.items():
        last = sorted(found)[-LAST_AUCTIONS:]
        rows.append((seller, sum(price for _, price in last) / len(last)))
    return sorted(rows, key=repr)


def _hop_starts(t: int) -> range:
    """The starts of q5's sliding windows holding time ``t``: every multiple of the slide
    in ``(t - size, t]``."""
    return range(t - t % HOP_SLIDE_MS, t - HOP_SIZE_MS, -HOP_SLIDE_MS)


def _bids_per_auction_and_hop(events: dict[str, list[Event]]) -> dict[int, dict[int, int]]:
    """Per sliding window's start, the bids per auction in it."""
    counts: dict[int, dict[int, int]] = {}
    for bid in _bids(events):
        for start in _hop_starts(bid["dateTime"]):
            per = counts.setdefault(start, {})
            per[bid["auction"]] = per.get(bid["auction"], 0) + 1
    return counts


def q5_bids(events: dict[str, list[Event]]) -> list[Row]:
    """q5's first stage: per auction and sliding window (10 s, every 2 s) holding a bid
    on it, the bids: ``auction, num, window_start, window_end``."""
    rows = [
        (auction, n, start, start + HOP_SIZE_MS)
        for start, per in _bids_per_auction_and_hop(events).items()
        for auction, n in per.items()
    ]
    return sorted(rows, key=repr)


def q5(events: dict[str, list[Event]]) -> list[Row]:
    """Per sliding window (10 s, every 2 s), the auctions with the most bids (every one
    tied at the maximum, as Flink's q5): ``auction, num``."""
    rows: list[Row] = []
    for per in _bids_per_auction_and_hop(events).values():
        most = max(per.values())
        rows.extend((auction, n) for auction, n in per.items() if n == most)
    return sorted(rows, key=repr)


def q7_max_price(events: dict[str, list[Event]]) -> list[Row]:
    """q7's first stage: per 10 s tumbling window holding a bid, the highest price:
    ``maxprice, window_start, window_end``."""
    best: dict[int, int] = {}
    for bid in _bids(events):
        start = bid["dateTime"] - bid["dateTime"] % WINDOW_MS
        best[start] = max(best.get(start, bid["price"]), bid["price"])
    rows = [(price, start, start + WINDOW_MS) for start, price in best.items()]
    return sorted(rows, key=repr)


def q7(events: dict[str, list[Event]]) -> list[Row]:
    """Per 10 s tumbling window, the bid with the highest price (ties: the earliest,
    then the first generated): ``auction, price, bidder, dateTime, extra``."""
    best: dict[int, dict[str, Any]] = {}
    for bid in _bids(events):
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


def _sessions(times: list[int]) -> list[list[int]]:
    """``times`` cut into sessions: a time more than the gap after the one before it
    starts a new session."""
    sessions: list[list[int]] = []
    for t in sorted(times):
        if sessions and t - sessions[-1][-1] <= SESSION_GAP_MS:
            sessions[-1].append(t)
        else:
            sessions.append([t])
    return sessions


def q11(events: dict[str, list[Event]]) -> list[Row]:
    """Per bidder and session (Flink's ``SESSION`` window, 10 s gap: a bid at ``t`` is the
    window ``[t, t + gap]``, and windows that meet, ends included, are one), the bids:
    ``bidder, bid_count, window_start, window_end``; a session starts at its first bid's
    time and ends a gap after its last's."""
    times: dict[int, list[int]] = {}
    for bid in _bids(events):
        times.setdefault(bid["bidder"], []).append(bid["dateTime"])
    rows = [
        (bidder, len(session), session[0], session[-1] + SESSION_GAP_MS)
        for bidder, found in times.items()
        for session in _sessions(found)
    ]
    return sorted(rows, key=repr)


REFERENCES: dict[str, Callable[[dict[str, list[Event]]], list[Row]]] = {
    "q0": q0,
    "q1": q1,
    "q2": q2,
    "q3": q3,
    "q4_joined": q4_joined,
    "q4_max": q4_max,
    "q4": q4,
    "q5_bids": q5_bids,
    "q5": q5,
    "q6": q6,
    "q7_max_price": q7_max_price,
    "q7": q7,
    "q8": q8,
    "q11": q11,
}
"""Every query's reference, by name."""
