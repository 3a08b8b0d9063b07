"""The normalisation both engines' rows of a Nexmark query and its reference pass through
before they are compared (benchmarks/nexmark/check.py): Flink's decimal beside
Clockwork's double, Flink's timestamps beside milliseconds."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from benchmarks.nexmark.check import cell, normalised


def test_the_euro_price_of_flink_and_of_clockwork_is_one_cell() -> None:
    price = 99_999_937  # near the generator's largest, where a double's ulp is largest
    assert cell(Decimal("0.908") * price) == cell(0.908 * price) == 90799942.796


def test_a_flink_timestamp_is_its_epoch_milliseconds_in_utc() -> None:
    assert cell(datetime(1970, 1, 1, 0, 0, 11, 1000)) == 11_001


def test_normalised_rows_sort_after_their_cells_are_normalised() -> None:
    rows = normalised([(1, Decimal("10.5")), (1, 9.25)])
    assert rows == [(1, 10.5), (1, 9.25)]
