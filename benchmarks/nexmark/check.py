"""Clockwork's result records of a Nexmark query as the rows of its Python reference
(:mod:`benchmarks.nexmark.reference`), so the bench checks every run's output at its own
size, not only the tests' 3,000 events."""

from __future__ import annotations

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
    got = sorted((as_row(query, r) for r in records), key=repr)
    return got == REFERENCES[query.name](events)
