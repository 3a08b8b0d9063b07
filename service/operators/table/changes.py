"""Reading back a table operator's incremental checkpoint: its changelog entries (one per
changed key, ``<prefix><key>``, plus one metadata entry) as the newest value of each,
split into the metadata and the keys. The running aggregate and Top-N write the same
layout with their own prefixes and errors."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["newest_entries"]


def newest_entries(
    entries: Iterable[tuple[str, Any]], key_prefix: str, meta_entry: str, error: type[Exception]
) -> tuple[Any, list[tuple[str, Any]]]:
    """``(the newest metadata or None, [(key, its newest value: None when deleted)])``,
    keys in the order they were first written; ``error`` for an entry of neither kind."""
    newest: dict[str, Any] = {}
    for name, value in entries:
        newest[name] = value
    meta = newest.pop(meta_entry, None)
    keys: list[tuple[str, Any]] = []
    for name, value in newest.items():
        if not name.startswith(key_prefix):
            raise error(f"unknown checkpoint entry {name!r}")
        keys.append((name[len(key_prefix) :], value))
    return meta, keys
