"""Seeded Nexmark-style bids and the expected results of the event-time pipelines.

A bid is ``{"auction": "a7", "bidder": "b1234", "price": 12.34, "ts": ...}``: event time
advances 1 ms per bid, a fraction of the bids are delayed by up to 1500 ms (inside the
pipelines' 2 s bound, so none is late: see benchmarks/workload.py for the argument).
Auctions are skewed (a few are hot: ``auction = int(auctions * r**3)``). Bidders come
in cohorts: every 30 s of event time a new random cohort of 100 bidders makes the bids,
so bidders have sessions with gaps, some merged across consecutive cohorts.

Pure: generation, expected sliding-window counts per auction, expected sessions per
bidder. Processing-time results depend on the wall clock: only their total is known.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class BidWorkload:
    events: int = 1_000_000
    auctions: int = 1000
    bidders: int = 5000
    cohort_size: int = 100
    cohort_ms: int = 30_000
    seed: int = 7
    base_ts_ms: int = 1_700_000_000_000
    delayed_fraction: float = 0.3
    max_delay_ms: int = 1500
    partitions: int = 4


class Bid(NamedTuple):
    auction: str
    bidder: str
    cents: int
    ts: int

    def to_json(self) -> bytes:
        return (
            f'{{"auction":"{self.auction}","bidder":"{self.bidder}",'
            f'"price":{self.cents // 100}.{self.cents % 100:02d},"ts":{self.ts}}}'
        ).encode()


def generate(w: BidWorkload) -> Iterator[Bid]:
    rng = random.Random(w.seed)
    rand = rng.random
    cohort: list[int] = []
    for i in range(w.events):
        if i % w.cohort_ms == 0:
            cohort = rng.sample(range(w.bidders), w.cohort_size)
        r = rand()
        delay = int(r / w.delayed_fraction * w.max_delay_ms) + 1 if r < w.delayed_fraction else 0
        auction = int(w.auctions * rand() ** 3)
        bidder = cohort[int(rand() * w.cohort_size)]
        yield Bid(f"a{auction}", f"b{bidder}", int(rand() * 20_000) + 100, w.base_ts_ms + i - delay)


def expected_sliding_counts(
    bids: list[Bid], size_ms: int = 10_000, slide_ms: int = 2000
) -> dict[tuple[str, int], int]:
    """``(auction, window start) -> bids`` for sliding windows (Flink's assignment)."""
    out: dict[tuple[str, int], int] = defaultdict(int)
    for bid in bids:
        last = bid.ts - bid.ts % slide_ms
        for start in range(last, bid.ts - size_ms, -slide_ms):
            out[(bid.auction, start)] += 1
    return dict(out)


def expected_sessions(
    bids: list[Bid], gap_ms: int = 10_000
) -> dict[tuple[str, int], tuple[int, int]]:
    """``(bidder, session start) -> (bids, session end)``; a session is ``[first ts,
    last ts + gap)``; two bids share one when at most ``gap`` apart (Flink merges
    windows that touch)."""
    by_bidder: dict[str, list[int]] = defaultdict(list)
    for bid in bids:
        by_bidder[bid.bidder].append(bid.ts)
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for bidder, stamps in by_bidder.items():
        stamps.sort()
        start, last, count = stamps[0], stamps[0], 0
        for ts in stamps:
            if ts > last + gap_ms:  # Flink merges sessions that touch
                out[(bidder, start)] = (count, last + gap_ms)
                start, count = ts, 0
            last, count = ts, count + 1
        out[(bidder, start)] = (count, last + gap_ms)
    return out
