"""A join's checkpoint: one entry per piece of state, and ``meta`` beside them.

Every join kind checkpoints the same way (semantics.md section 10, "State, recovery"):
an entry per piece of its state that changed since the last checkpoint (a key's rows of
one side, ``l:<key>`` / ``r:<key>``, or a window's rows of one key), None for a piece
that is gone, and the entry ``meta`` with the checkpoint version and the join's
watermark. :class:`CheckpointedJoin` holds that plumbing once: a join says what its
pieces are, how one is named, encoded and restored, and keeps the changed ones in
``_dirty``; snapshots are plain data (style.md), never pickle.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from service.core.time import MIN_TIMESTAMP
from service.operators.join.rows import JoinConfigError, Side

SNAPSHOT_VERSION = 1
META_ENTRY = "meta"
SIDE_PREFIXES = ("l:", "r:")
"""The entry of one key's state of one side: ``l:<key>`` or ``r:<key>``."""


def side_entry(side: int, key: str) -> str:
    """``l:<key>`` or ``r:<key>``."""
    return SIDE_PREFIXES[side] + key


def parse_side_entry(name: str) -> tuple[Side, str]:
    """The side and key of a :func:`side_entry`; JoinConfigError for any other name."""
    for side, prefix in zip(Side, SIDE_PREFIXES, strict=True):
        if name.startswith(prefix):
            return side, name[len(prefix) :]
    raise JoinConfigError(f"unknown join checkpoint entry {name!r}")


class CheckpointedJoin:
    """``snapshot``/``restore`` and their incremental forms over a join's pieces of
    state. A piece is whatever the join marks in ``_dirty`` (``(side, key)``,
    ``(window, key)``); the hooks below say what a piece is called and holds."""

    _watermark: int
    _dirty: set[Any]

    # -- hooks ----------------------------------------------------------------------------
    def _pieces(self) -> Iterable[Hashable]:
        """Every piece of state held now (a whole snapshot)."""
        raise NotImplementedError

    def _entry(self, piece: Any) -> str:
        """The checkpoint entry's name of ``piece``."""
        raise NotImplementedError

    def _encode(self, piece: Any) -> Any:
        """``piece`` as plain data, or None when the join holds nothing of it any more."""
        raise NotImplementedError

    def _clear(self) -> None:
        """Hold no state at all (before a whole snapshot is restored)."""
        raise NotImplementedError

    def _restore_entry(self, name: str, value: Any) -> None:
        """Take one entry back (``value`` None: the piece is gone)."""
        raise NotImplementedError

    # -- the plumbing ---------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        entries = {self._entry(piece): self._encode(piece) for piece in self._pieces()}
        entries[META_ENTRY] = self._meta()
        return entries

    def snapshot_changes(self) -> dict[str, Any]:
        """The pieces changed since the last call, and ``meta``."""
        changes = {self._entry(piece): self._encode(piece) for piece in self._dirty}
        self._dirty.clear()
        changes[META_ENTRY] = self._meta()
        return changes

    def restore(self, snapshot: dict[str, Any]) -> None:
        self._clear()
        self._dirty = set()
        self._watermark = MIN_TIMESTAMP
        self.restore_changes(snapshot.items())

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        """Apply checkpoint entries in order (the newest of each name wins)."""
        newest = dict(entries)
        meta = newest.pop(META_ENTRY, None)
        if meta is not None:
            if meta.get("version") != SNAPSHOT_VERSION:
                raise JoinConfigError(f"unknown join checkpoint version {meta.get('version')!r}")
            self._watermark = int(meta["watermark"])
        for name, value in newest.items():
            self._restore_entry(name, value)

    def _meta(self) -> dict[str, Any]:
        return {"version": SNAPSHOT_VERSION, "watermark": self._watermark}
