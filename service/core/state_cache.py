"""A write-back cache bounded in bytes, in front of a key-value store (issue #53).

The pure half of the RocksDB state backend: which entries are held, which are dirty, when
one is evicted and what goes to the store. The store is passed in (:class:`BackingStore`);
``service/runtime/partition/rocksdb_store.py`` is the RocksDB one, the tests use a dict.

- **Entries** map a key (str) to plain JSON-able data (what a changelog entry holds). The
  cache holds them in LRU order (a dict: a hit moves the key to the end).
- **Bytes.** Each held entry is counted at its encoded size, as last measured by the store
  (when it was read or written), plus what holding it takes beyond that (the dict slots,
  the key, the live objects: :data:`ENTRY_OVERHEAD_BYTES` for plain data, a codec's own
  ``entry_overhead_bytes`` for its live objects), or :attr:`StateCache.new_entry_bytes`
  for one never encoded yet; no encoding on the hot path. A deleted key waiting to be
  written counts its key's length plus :data:`TOMBSTONE_BYTES`.
- **Dirty.** An entry set, or changed in place and marked with :meth:`StateCache.mark_dirty`,
  differs from the store until it is written. An operator changes an entry in place
  right after it got it, then marks it, with no other access of the cache in between.
- **Eviction.** When the held bytes exceed the bound, the least recently used entries
  go (never the one just used) until they are under 7/8 of it; the dirty among them,
  and the pending deletes, are written to the store in one batch with
  ``checkpoint=False``: the store is then ahead of the last checkpoint (the RocksDB
  store forgets its local checkpoint then).
- **Flush** (:meth:`StateCache.flush`): at a checkpoint, every dirty entry and pending
  delete in one batch with ``checkpoint=True``; after it, the store holds exactly the
  state. :meth:`StateCache.flush_in_steps` writes it in several batches, pausing between
  them, for a caller that lets other work run meanwhile.
- **A write that fails** (a full disk: the store raises) changes nothing here: the batch
  is built before the write and the entries leave the cache only after it, so an
  eviction's failure leaves the cache as it was (over its bound) and a flush's leaves
  every entry dirty. Nothing held is lost, whoever asked (the loop, a pull query).
- **Peeks** (:meth:`StateCache.peek`): a checkpoint reads each changed key's entry in
  the store's form without reading it into the cache (and evicting others for it).
- **Codecs** (:class:`StateCodec`): an operator whose per-key state is not plain data
  (tuples as dict keys, slotted objects) keeps its live objects in the cache and gives a
  codec; the store sees only ``codec.encode(value)``, and a miss returns
  ``codec.decode(stored)``. Encoding happens when an entry is written, never on a hit.
- **Named maps** (:class:`StateMaps`, :class:`NamespacedStore`): the runtime hands an
  operator one ``StateMaps``; an operator with several maps (a join's sides, a process
  function's states) asks it for each by a distinct name, and each named map lives in
  its own key range of the partition's one store.
- **Ordered scans** (:class:`OrderedStore`): a store whose keys can be read in order from
  a key on (RocksDB's iterator). A named map's store (:meth:`NamespacedStore.sibling`)
  gives an operator a map it reads in key order without a cache in front, as the stored
  timers do (``stored_timers.py``); :class:`MemoryStore` is the one on a dict, for tests.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import orjson

__all__ = [
    "DEFAULT_NEW_ENTRY_BYTES",
    "NAMESPACE_SEPARATOR",
    "TOMBSTONE_BYTES",
    "BackingStore",
    "MemoryStore",
    "NamespacedStore",
    "OrderedStore",
    "StateCache",
    "StateCodec",
    "StateMaps",
]

DEFAULT_NEW_ENTRY_BYTES = 400
"""The size counted for an entry never encoded yet (until the next write measures it), with
:data:`ENTRY_OVERHEAD_BYTES` (a codec's entries: its own overhead instead)."""
TOMBSTONE_BYTES = 64
"""Added to a pending delete's key length."""
ENTRY_OVERHEAD_BYTES = 300
"""Added to each held entry's encoded size: the dict slots, the key and the Python objects
(measured: a running aggregate's 200k keys of count and sum took ~350 B each in RSS, for
~15 B of JSON)."""


class BackingStore(Protocol):
    """What the cache reads from and writes to."""

    def load(self, key: str) -> tuple[Any, int] | None:
        """The stored value of ``key`` and its encoded size, or None when absent."""

    def write(self, entries: Mapping[str, Any], checkpoint: bool) -> Mapping[str, int]:
        """Write ``entries`` in one batch (None: delete the key); the encoded size of
        each value written. ``checkpoint``: the batch is a checkpoint's flush, after which
        the store holds the whole state; otherwise an eviction, ahead of the checkpoint."""

    def items(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        """Every stored ``(key, value)`` whose key starts with ``prefix``."""


class OrderedStore(BackingStore, Protocol):
    """A :class:`BackingStore` that reads its keys in order (bytewise, as UTF-8)."""

    def scan(self, start: str, limit: int, prefix: str = "") -> list[tuple[str, Any]]:
        """Up to ``limit`` stored ``(key, value)`` with ``key >= start`` and starting
        with ``prefix``, in key order."""
        ...


class MemoryStore:
    """An :class:`OrderedStore` on a dict (unit tests): values kept as given, each
    counted at the length of its ``repr``; scans sort the keys."""

    __slots__ = ("data", "writes")

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.writes: list[bool] = []
        """Each write's ``checkpoint`` flag, in order."""

    def load(self, key: str) -> tuple[Any, int] | None:
        if key not in self.data:
            return None
        value = self.data[key]
        return value, len(repr(value))

    def write(self, entries: Mapping[str, Any], checkpoint: bool) -> Mapping[str, int]:
        self.writes.append(checkpoint)
        sizes: dict[str, int] = {}
        for key, value in entries.items():
            if value is None:
                self.data.pop(key, None)
            else:
                self.data[key] = value
                sizes[key] = len(repr(value))
        return sizes

    def items(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        for key in sorted(self.data):
            if key.startswith(prefix):
                yield key, self.data[key]

    def scan(self, start: str, limit: int, prefix: str = "") -> list[tuple[str, Any]]:
        keys = sorted(k for k in self.data if k >= start and k.startswith(prefix))
        return [(key, self.data[key]) for key in keys[:limit]]


class StateCodec(Protocol):
    """Live per-key state to and from the plain data the store keeps (JSON-able).

    A codec may set ``entry_overhead_bytes``: what a held entry's live objects take in
    memory beyond its encoded size (measured, as ``tests/operators/test_held_bytes.py``
    does), so that the cache's bound is what its entries take (default
    :data:`ENTRY_OVERHEAD_BYTES`)."""

    def encode(self, value: Any) -> Any: ...

    def decode(self, data: Any) -> Any: ...


class StateMaps(Protocol):
    """Makes an operator's state maps on one partition's store (the rocksdb backend)."""

    def __call__(self, name: str = "", codec: StateCodec | None = None) -> StateCache:
        """The map ``name`` (one per name and operator; ``""``: the operator's only map,
        unprefixed); ``codec`` when its values are not plain JSON-able data."""
        ...


NAMESPACE_SEPARATOR = "\u0000"
"""Between a named map's name and its keys in the store (no name contains it)."""


class NamespacedStore:
    """A named map's view of the partition's store: its keys behind ``name`` and
    :data:`NAMESPACE_SEPARATOR`, so maps sharing a store never see each other's keys."""

    __slots__ = ("_prefix", "store")

    def __init__(self, store: BackingStore, name: str) -> None:
        if not name or NAMESPACE_SEPARATOR in name:
            raise ValueError(f"a state map's name must be non-empty, without NUL: {name!r}")
        self.store = store
        self._prefix = name + NAMESPACE_SEPARATOR

    def load(self, key: str) -> tuple[Any, int] | None:
        return self.store.load(self._prefix + key)

    def write(self, entries: Mapping[str, Any], checkpoint: bool) -> Mapping[str, int]:
        prefix = self._prefix
        sizes = self.store.write(
            {prefix + key: value for key, value in entries.items()}, checkpoint
        )
        cut = len(prefix)
        return {key[cut:]: size for key, size in sizes.items()}

    def items(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        cut = len(self._prefix)
        for key, value in self.store.items(self._prefix + prefix):
            yield key[cut:], value

    def scan(self, start: str, limit: int, prefix: str = "") -> list[tuple[str, Any]]:
        """:meth:`OrderedStore.scan` within the map (its store must be ordered)."""
        store = self.store
        if not hasattr(store, "scan"):
            raise TypeError(f"{type(store).__name__} reads no key in order")
        own = self._prefix
        cut = len(own)
        rows = store.scan(own + start, limit, own + prefix)
        return [(key[cut:], value) for key, value in rows]

    def sibling(self, name: str) -> NamespacedStore:
        """The map ``name`` of the same store."""
        return NamespacedStore(self.store, name)


class StateCache:
    """Key -> entry, held up to ``capacity_bytes`` in memory, the rest in ``store``."""

    __slots__ = (
        "_absent",
        "_bytes",
        "_codec",
        "_count",
        "_deleted",
        "_dirty",
        "_encoded",
        "_entries",
        "_overhead",
        "_sizes",
        "capacity_bytes",
        "evictions",
        "misses",
        "new_entry_bytes",
        "store",
        "written_ahead_bytes",
    )

    def __init__(
        self,
        store: BackingStore,
        capacity_bytes: int,
        count: int = 0,
        new_entry_bytes: int | None = None,
        codec: StateCodec | None = None,
    ) -> None:
        if capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes must be > 0, not {capacity_bytes!r}")
        self.store = store
        self._codec = codec
        self.capacity_bytes = capacity_bytes
        overhead = getattr(codec, "entry_overhead_bytes", ENTRY_OVERHEAD_BYTES)
        self._overhead: int = overhead
        """Counted for each held entry beyond its encoded size."""
        if new_entry_bytes is None:
            new_entry_bytes = DEFAULT_NEW_ENTRY_BYTES - ENTRY_OVERHEAD_BYTES + overhead
        self.new_entry_bytes = new_entry_bytes
        self._entries: dict[str, Any] = {}
        """Held entries, least recently used first."""
        self._sizes: dict[str, int] = {}
        """Bytes counted for each held entry."""
        self._dirty: set[str] = set()
        """Held entries not yet written to the store."""
        self._deleted: set[str] = set()
        """Keys deleted here and not yet in the store."""
        self._encoded: dict[str, Any] = {}
        """Dirty held entries a :meth:`peek` encoded (with a codec), for their next write;
        dropped when the entry changes."""
        self._bytes = 0
        self._count = count
        """Keys present, held or stored (``count``: those in the store at the start)."""
        self._absent: str | None = None
        """The last key a lookup found in neither (a set of it adds a key)."""
        self.misses = 0
        self.evictions = 0
        self.written_ahead_bytes = 0
        """The changed entries evictions wrote since the last flush, counted as the cache
        counted them: what the next checkpoint reads back from the store beyond what the
        cache holds
        (the runtime bounds it, :meth:`~service.runtime.consumer_group.local_state.
        LocalPartition.over_bound`)."""

    # -- reading -------------------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        entries = self._entries
        value = entries.pop(key, _MISSING)
        if value is not _MISSING:
            entries[key] = value  # the most recently used
            return value
        value = self._load(key)
        return default if value is _MISSING else value

    def _load(self, key: str) -> Any:
        """A missed key from the store (held, clean), or ``_MISSING``."""
        self.misses += 1
        if key in self._deleted:
            self._absent = key
            return _MISSING
        found = self.store.load(key)
        if found is None:
            self._absent = key
            return _MISSING
        value, size = found
        if self._codec is not None:
            value = self._codec.decode(value)
        self._entries[key] = value
        size += self._overhead
        self._sizes[key] = size
        self._bytes += size
        if self._bytes > self.capacity_bytes:
            self._evict()
        return value

    def peek(self, key: str) -> Any:
        """The entry of ``key`` in the store's plain form (a codec's ``encode``), or None
        when absent, without reading a stored entry into the cache.

        A checkpoint reads every key changed since the last one, once. Reading the
        evicted ones back in with :meth:`get` would evict others, writing the dirty
        among them, each decoded to be encoded again: with more changed keys than the
        cache holds, that was most of a checkpoint's time (sessions on RocksDB, 100k new
        keys beyond the cache: 7 of 9 s)."""
        value = self._entries.get(key, _MISSING)
        if value is not _MISSING:
            if self._codec is None:
                return value
            encoded = self._codec.encode(value)
            if key in self._dirty:  # the flush that follows writes it as is
                self._encoded[key] = encoded
            return encoded
        if key in self._deleted:
            return None
        self.misses += 1
        found = self.store.load(key)
        return None if found is None else found[0]

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key, _MISSING) is not _MISSING

    def __len__(self) -> int:
        return self._count

    def items(self) -> Iterator[tuple[str, Any]]:
        """Every present ``(key, entry)``: the held ones (least recently used first), then
        the stored ones neither held nor deleted. Reads no entry into the cache."""
        entries = self._entries
        yield from list(entries.items())
        deleted = self._deleted
        codec = self._codec
        for key, value in self.store.items():
            if key not in entries and key not in deleted:
                yield key, value if codec is None else codec.decode(value)

    def keys(self) -> Iterator[str]:
        for key, _ in self.items():
            yield key

    def __iter__(self) -> Iterator[str]:
        """The present keys (as :meth:`items`: a dict's iteration, read from the store)."""
        return self.keys()

    # -- writing -------------------------------------------------------------------------
    def __setitem__(self, key: str, value: Any) -> None:
        entries = self._entries
        if key in entries:
            del entries[key]
        elif key != self._absent and self._load(key) is not _MISSING:
            del entries[key]  # it was stored: held now, at its stored size
        else:
            self._count += 1
            size = self.new_entry_bytes
            self._sizes[key] = size
            self._bytes += size
        self._absent = None
        deleted = self._deleted
        if key in deleted:
            deleted.remove(key)
            self._bytes -= len(key) + TOMBSTONE_BYTES
        entries[key] = value
        self._dirty.add(key)
        if self._encoded:
            self._encoded.pop(key, None)
        if self._bytes > self.capacity_bytes:
            self._evict()

    def settle(self, key: str, value: Any) -> Any:
        """``self[key] = value``, unless the map holds that very value already (equal,
        and encoded alike): then the held entry stays as it was, clean if it was, and
        nothing is written for it. Returns the entry held now.

        A local restore replays the changelog's tail onto a store that mostly holds it
        already (its last checkpoint's entries are those the store was flushed with):
        set blindly, each of them would be written back at the restore's flush (and at
        evictions before it). With a codec it is always a set (live values are not
        compared)."""
        if self._codec is None:
            held = self.get(key, _MISSING)
            if held is not _MISSING and held == value:
                dumps = orjson.dumps
                if dumps(held) == dumps(value):  # 1 == 1.0 == True: not the same entry
                    return held
        self[key] = value
        return value

    def mark_dirty(self, key: str) -> None:
        """The held entry ``key`` was changed in place."""
        if key not in self._entries:
            raise KeyError(f"{key!r} is not held: it was evicted before it was marked")
        self._dirty.add(key)
        if self._encoded:
            self._encoded.pop(key, None)

    def pop(self, key: str, default: Any = None) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            return default
        del self._entries[key]
        self._bytes -= self._sizes.pop(key)
        self._dirty.discard(key)
        if self._encoded:
            self._encoded.pop(key, None)
        self._deleted.add(key)
        self._bytes += len(key) + TOMBSTONE_BYTES
        self._count -= 1
        if self._bytes > self.capacity_bytes:
            self._evict()
        return value

    def __delitem__(self, key: str) -> None:
        if self.pop(key, _MISSING) is _MISSING:
            raise KeyError(key)

    def clear(self) -> None:
        """Forget every entry (the store too: its keys are deleted at the next write)."""
        keys = [key for key, _ in self.items()]
        for key in keys:
            self.pop(key)

    # -- the store -----------------------------------------------------------------------
    def flush(self) -> None:
        """A checkpoint: write every dirty entry and pending delete in one batch."""
        for _ in self.flush_in_steps(0):
            pass

    def flush_in_steps(self, step_entries: int) -> Iterator[None]:
        """:meth:`flush`, a batch of at most ``step_entries`` dirty entries at a time
        (0: one batch), pausing after each but the last: the caller drives it and may let
        other work run in between (the runtime lets the event loop run, the state held
        still, so that a checkpoint of many keys never holds the loop for its whole
        flush). Nothing may change an entry meanwhile; a read may, through the
        eviction it causes, write dirty entries itself: those are skipped.

        The store holds the state once it is driven to its end. A write that fails
        leaves the entries of its batch and of the batches after it dirty, and the
        ones written before it clean (they are in the store): nothing is lost."""
        dirty = self._dirty
        keys = list(dirty)
        step = step_entries if step_entries > 0 else max(1, len(keys))
        encoded = self._encoded
        held = self._sizes
        for start in range(0, max(1, len(keys)), step):
            part = keys[start : start + step]
            deleted = self._deleted
            batch: dict[str, Any] = dict.fromkeys(deleted)
            for key in part:
                if key in dirty:  # else evicted since the flush began: the eviction wrote it
                    batch[key] = self._stored_form(key)
            last = start + step >= len(keys)
            if not batch and not last:
                continue  # its entries evicted meanwhile (the last write always comes)
            sizes = self.store.write(batch, True)  # raises: this batch's entries dirty
            if deleted:
                self._forget_deletes()
            for key in part:
                dirty.discard(key)
            if encoded:
                for key in part:
                    encoded.pop(key, None)
            for key, size in sizes.items():
                old = held.get(key)
                if old is not None:
                    size += self._overhead
                    held[key] = size
                    self._bytes += size - old
            if not last:
                yield
        self.written_ahead_bytes = 0
        if self._bytes > self.capacity_bytes:
            self._evict()

    def _stored_form(self, key: str) -> Any:
        """Held entry ``key`` as the store keeps it: its codec's encoding (the one a
        :meth:`peek` made, if the entry did not change since), or the entry itself."""
        value = self._entries[key]
        codec = self._codec
        if codec is None:
            return value
        peeked = self._encoded.get(key, _MISSING)
        return codec.encode(value) if peeked is _MISSING else peeked

    def _forget_deletes(self) -> None:
        """The pending deletes are in the store: no longer counted."""
        deleted = self._deleted
        self._bytes -= sum(len(key) for key in deleted) + TOMBSTONE_BYTES * len(deleted)
        deleted.clear()

    def _evict(self) -> None:
        """Down to the bound: the least recently used entries go (never the last one),
        the dirty among them and the pending deletes to the store in one batch."""
        capacity = self.capacity_bytes - (self.capacity_bytes >> 3)  # batches of evictions
        entries = self._entries
        sizes = self._sizes
        left = self._bytes
        if left <= capacity:
            return
        victims: list[str] = []
        last = len(entries) - 1
        for key in entries:
            if left <= capacity or len(victims) >= last:
                break
            victims.append(key)
            left -= sizes[key]
        deleted = self._deleted
        batch: dict[str, Any] = dict.fromkeys(deleted) if deleted else {}
        dirty = self._dirty
        encoded = self._encoded
        for key in victims:
            if key in dirty:
                batch[key] = self._stored_form(key)
        if batch:
            self.store.write(batch, False)  # raises: the cache as it was, over its bound
            self.written_ahead_bytes += sum(sizes[key] for key in victims if key in dirty)
        self._bytes = left
        if deleted:
            self._forget_deletes()
        for key in victims:
            del entries[key]
            del sizes[key]
            dirty.discard(key)
            if encoded:
                encoded.pop(key, None)
        self.evictions += len(victims)

    @property
    def held_bytes(self) -> int:
        return self._bytes

    @property
    def changed_bytes(self) -> int:
        """What the next checkpoint encodes, as this cache counts it: the changed entries
        evictions wrote since the last flush, and the held dirty ones (at the held
        entries' mean size: no sum kept on the hot path)."""
        held = len(self._entries)
        dirty = len(self._dirty)
        mean = self._bytes // held if held else 0
        return self.written_ahead_bytes + dirty * mean

    @property
    def held(self) -> int:
        return len(self._entries)

    @property
    def dirty(self) -> int:
        return len(self._dirty) + len(self._deleted)


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()
