"""Tuples as snapshots hold them: live state keys tuples (hashable), checkpoints and
snapshots are plain JSON data, where a tuple is a list. One pair of conversions for every
core module that checkpoints tuple-keyed state (timer namespaces, combiner partitions)."""

from __future__ import annotations

from typing import Any

__all__ = ["hashable", "plain"]


def plain(value: Any) -> Any:
    """``value`` with every tuple in it a list (the snapshot's form)."""
    if isinstance(value, tuple):
        return [plain(part) for part in value]
    return value


def hashable(value: Any) -> Any:
    """``value`` with every list in it a tuple (the live, hashable form)."""
    if isinstance(value, list):
        return tuple(hashable(part) for part in value)
    return value
