"""The Nexmark reference answers (benchmarks/nexmark/reference.py) and the normalisation
both engines' rows pass through (benchmarks/nexmark/check.py), on a few bids made by
hand: the edges the generated events seldom reach (a session gap of exactly 10 s, Flink's
decimal beside Clockwork's double); and the bench's word on the checks. The queries' rows
against both engines are in tests/integration/test_nexmark_flink.py."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from benchmarks.nexmark.bench import verdict
from benchmarks.nexmark.check import COLUMNS, cell, changelog_folded, folded, normalised
from benchmarks.nexmark.generate import Event, NexmarkConfig, by_kind
from benchmarks.nexmark.queries import QUERIES
from benchmarks.nexmark.reference import (
    REFERENCES,
    q1,
    q4,
    q4_joined,
    q5_bids,
    q6,
    q7_max_price,
    q11,
)


def _bids(*bids: tuple[int, int, int]) -> dict[str, list[Event]]:
    """Events holding only these bids: ``(bidder, price, dateTime)``, all on auction 1230."""
    made = [
        Event("bid", 1230, {"auction": 1230, "bidder": b, "price": p, "dateTime": t, "extra": ""})
        for b, p, t in bids
    ]
    return {"person": [], "auction": [], "bid": made}


def test_every_query_has_a_reference_and_its_columns() -> None:
    names = {q.name for q in QUERIES}
    assert set(REFERENCES) == names
    assert set(COLUMNS) == names


def test_every_reference_answers_the_generated_events_in_rows_of_its_columns() -> None:
    events = by_kind(NexmarkConfig(events=3000, rate=100, seed=33))
    for name, answer in REFERENCES.items():
        rows = answer(events)
        assert rows, name
        assert {len(r) for r in rows} == {len(COLUMNS[name])}, name
        assert rows == sorted(rows, key=repr), name


def test_a_session_takes_a_bid_exactly_a_gap_after_the_last_and_ends_a_gap_after_it() -> None:
    # Flink's SESSION window merges windows that meet (checked in PyFlink 2.3: bids 10 s
    # apart are one session, 10.001 s apart two).
    rows = q11(_bids((1, 5, 1_000), (1, 5, 11_000), (2, 5, 1_000), (2, 5, 11_001)))
    assert rows == sorted(
        [(1, 2, 1_000, 21_000), (2, 1, 1_000, 11_000), (2, 1, 11_001, 21_001)], key=repr
    )


def test_sliding_windows_hold_a_bid_in_each_of_the_five_windows_covering_it() -> None:
    rows = q5_bids(_bids((1, 5, 13_500)))
    starts = [4_000, 6_000, 8_000, 10_000, 12_000]
    assert rows == sorted([(1230, 1, s, s + 10_000) for s in starts], key=repr)


def test_a_tumbling_window_keeps_its_highest_price() -> None:
    rows = q7_max_price(_bids((1, 5, 1_000), (1, 9, 9_999), (1, 7, 10_000)))
    assert rows == [(7, 10_000, 20_000), (9, 0, 10_000)]


def test_the_euro_price_of_flink_and_of_clockwork_is_one_cell() -> None:
    price = 99_999_937  # near the generator's largest, where a double's ulp is largest
    (row,) = q1(_bids((1, price, 0)))
    assert row[2] == Decimal("90799942.796")
    assert cell(row[2]) == cell(0.908 * price) == 90799942.796


def test_a_flink_timestamp_is_its_epoch_milliseconds_in_utc() -> None:
    assert cell(datetime(1970, 1, 1, 0, 0, 11, 1000)) == 11_001


def test_normalised_rows_sort_after_their_cells_are_normalised() -> None:
    rows = normalised([(1, Decimal("10.5")), (1, 9.25)])
    assert rows == [(1, 10.5), (1, 9.25)]


def test_the_bench_says_whose_rows_are_not_the_references() -> None:
    assert verdict([True, True], {"Flink": True}) == ", both the reference's"
    assert verdict([True, False], {"Flink": True}) == ", NOT the reference's: Clockwork"
    assert verdict([True], {"Flink": False}) == ", NOT the reference's: Flink"
    assert verdict([False], {"Flink": False}) == ", NOT the reference's: Clockwork, Flink"


def test_the_bench_names_each_flink_source_whose_rows_are_not_the_references() -> None:
    flinks = {"Flink (files)": True, "Flink (Kafka)": False}
    assert verdict([True], flinks) == ", NOT the reference's: Flink (Kafka)"
    assert verdict([True], {**flinks, "Flink (Kafka)": True}) == ", all the reference's"


def _auction(
    aid: int, seller: int, category: int, at: int, expires: int, reserve: int = 0
) -> Event:
    record = {"id": aid, "seller": seller, "category": category, "dateTime": at}
    return Event("auction", aid, {**record, "expires": expires, "reserve": reserve})


def _bid(auction: int, price: int, at: int) -> Event:
    record = {"auction": auction, "bidder": 1, "price": price, "dateTime": at, "extra": ""}
    return Event("bid", auction, record)


def test_q4_takes_bids_from_the_auctions_time_to_its_end_both_included() -> None:
    events = {
        "person": [],
        "auction": [_auction(1, 7, 10, at=100, expires=200)],
        "bid": [_bid(1, 5, 99), _bid(1, 6, 100), _bid(1, 7, 200), _bid(1, 8, 201)],
    }
    assert q4_joined(events) == [(1, 10, 6), (1, 10, 7)]


def test_q4_averages_the_closing_prices_of_a_categorys_auctions() -> None:
    events = {
        "person": [],
        "auction": [_auction(1, 7, 10, 0, 100), _auction(2, 7, 10, 0, 100)],
        "bid": [_bid(1, 4, 10), _bid(1, 9, 20), _bid(2, 2, 30)],
    }
    assert q4(events) == [(10, 5.5)]


def test_q6_averages_a_sellers_last_ten_winning_bids_by_time() -> None:
    """Beam's winning bid: at or above the reserve, before the end (excluded), a bid
    from before the auction's time included; the last 10 by the winning bid's time."""
    auctions = [_auction(a, 7, 10, at=1000 + a, expires=5000, reserve=10) for a in range(12)]
    bids = [_bid(a, 100 + a, at=2000 + a) for a in range(12)]
    bids += [_bid(0, 1000, at=5000), _bid(1, 9, at=3000), _bid(2, 500, at=900)]
    events = {"person": [], "auction": auctions, "bid": bids}
    # auction 2's winner is the early bid (500 at 900): it is the oldest, so left out
    last = [100 + a for a in range(12) if a != 2][-10:]
    assert q6(events) == [(7, sum(last) / 10)]


def test_an_upsert_stream_folds_to_each_keys_newest_value_and_a_tombstone_deletes() -> None:
    stream = [(b"a", {"v": 1}), (b"b", {"v": 2}), (b"a", {"v": 3}), (b"b", None)]
    assert folded(stream) == [{"v": 3}]


def test_a_flink_changelog_folds_to_the_rows_it_did_not_take_back() -> None:
    rows = [[10, 1.0], [10, 1.0], [10, 2.5], [11, 4.0], [11, 4.0]]
    kinds = ["INSERT", "UPDATE_BEFORE", "UPDATE_AFTER", "INSERT", "DELETE"]
    assert changelog_folded(rows, kinds) == [(10, 2.5)]


def test_the_bench_says_flink_did_not_run_a_query_it_does_not_run() -> None:
    assert verdict([True], {}) == ", the reference's (Flink: not run)"
    assert verdict([False], {}) == ", NOT the reference's: Clockwork"
