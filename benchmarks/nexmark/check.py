"""Clockwork's result records of a Nexmark query as the rows of its Python reference
(:mod:`benchmarks.nexmark.reference`), so the bench checks every run's output at its own
size, not only the tests' 3,000 events; every side's cells brought to one form first
(:func:`cell`), here and in tests/integration/test_nexmark_flink.py."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from benchmarks.nexmark.generate import Event
from benchmarks.nexmark.queries import Query
from benchmarks.nexmark.reference import REFERENCES, Row

COLUMNS = {
    "q3": ("name", "city", "state", "id"),
    "q5": ("auction", "num"),
    "q7": ("auction", "price", "bidder", "dateTime", "extra"),
    "q8": ("id", "name", "starttime"),
}
"""The reference's columns per query, in its rows' order."""


EPOCH = datetime(1970, 1, 1)
FLOAT_PLACES = 6
"""q1's price: Flink's is an exact ``DECIMAL``, Clockwork's a double (``0.908 * price``
off by an ulp at most); both are the same float once rounded to this many places."""


def cell(value: Any) -> Any:
    """One cell in the form every side is compared in: a decimal or a float rounded to
    :data:`FLOAT_PLACES` (a float), a timestamp as epoch milliseconds (Flink's window
    bounds are ``TIMESTAMP(3)`` values, taken as UTC, the session's time zone; Clockwork's
    and the reference's are milliseconds already), anything else as it is."""
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
    ``key``."""
    if "result" not in record:
        return tuple(record["value"][c] for c in COLUMNS[query.name])
    found = {
        "window_start": record["window"]["start"],
        "window_end": record["window"]["end"],
        **record["result"],
    }
    if query.key:
        found[query.key] = int(record["key"])
    return tuple(found[c] for c in COLUMNS[query.name])


def matches(query: Query, records: list[dict[str, Any]], events: dict[str, list[Event]]) -> bool:
    """Whether the records are the reference's rows, row for row (order aside)."""
    got = normalised(as_row(query, r) for r in records)
    return got == normalised(REFERENCES[query.name](events))
