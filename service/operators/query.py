"""Pull queries: what an operator holds of one key, or of a range of keys, as plain data.

The runtime answers ``GET /pipelines/{name}/state/{key}`` from the partition that owns
the key, between batches (docs/pull-queries.md). An operator that keeps keyed state a
user may read implements :class:`Queryable`; the answers are JSON-ready (dicts, lists,
str, int, float, bool, None), copies that share nothing mutable with the live state, and
describe the state as it is now: everything processed so far, nothing emitted or not.

- **Windows** (``window/fast.py``, ``window/general.py``): the key's windows held, by
  start: ``{"windows": [{"start", "end", "result", "fires"}]}``, ``result`` the
  aggregations' values over the window's records so far (what the window would emit if
  it fired now), ``fires`` how often it has fired (0: still open).
- **Running aggregate** (``table/running.py``, ``table/table_aggregate.py``): the key's
  row: ``{"result", "timestamp", "emitted"}``.
- **Top-N** (``table/top_n.py``): the partition key's ranks: ``{"ranks": [{"rank",
  "row"}]}``, best first.
- **Keyed process function** (``process/operator.py``): the states its function
  declares queryable (``queryable_state``), ``{"states": {name: value}}``.

A key with nothing held answers None. Keys are strings and a scan returns them in
string order (Python's, by code point).
"""

from __future__ import annotations

from collections.abc import Iterable
from heapq import nsmallest
from typing import Any, Protocol, runtime_checkable

__all__ = ["Queryable", "first_keys", "in_range"]


@runtime_checkable
class Queryable(Protocol):
    """An operator whose keyed state can be read by key (module docstring)."""

    query_kind: str
    """What its state is: ``window``, ``aggregate``, ``top_n`` or ``process``."""

    def query_key(self, key: str) -> dict[str, Any] | None:
        """The key's state now; None when the operator holds nothing of it."""
        ...

    def scan(
        self, from_key: str | None, to_key: str | None, limit: int
    ) -> list[tuple[str, dict[str, Any]]]:
        """Up to ``limit`` keys ``from_key <= key < to_key`` (None: unbounded) that hold
        state, in key order, each with :meth:`query_key`'s answer."""
        ...


def in_range(key: str, from_key: str | None, to_key: str | None) -> bool:
    return (from_key is None or key >= from_key) and (to_key is None or key < to_key)


def first_keys(
    keys: Iterable[str], from_key: str | None, to_key: str | None, limit: int
) -> list[str]:
    """The ``limit`` smallest distinct keys of ``keys`` in the range (O(n log limit))."""
    if limit <= 0:
        return []
    chosen = {key for key in keys if in_range(key, from_key, to_key)}
    return nsmallest(limit, chosen)
