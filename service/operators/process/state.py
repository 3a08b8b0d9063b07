"""Keyed state of a process function: value, list and map state, with optional TTL.

Layout (why it is fast): each state name owns one :class:`StateStore` whose ``data`` is a
plain ``{key: value}`` dict. A state handle keeps a reference to that dict and to the
operator's context, so ``handle.value()`` is one attribute read and one dict ``get`` for
the current key. Handles are created once (typically in ``open``) and reused.

TTL (Flink's ``StateTtlConfig`` with ``OnCreateAndWrite`` and ``NeverReturnExpired``):
a write sets the entry's expiry to ``now + ttl_ms`` of processing time (``now`` is read
from the clock once per batch). Expired entries are invisible on read, and are removed
(1) when read, and (2) by a sweep the operator runs at the start of every batch and every
processing-time advance. The sweep is O(expired): expiries live in an insertion-ordered
``OrderedDict`` that a write moves to the end, so with a fixed TTL and a clock that does
not go back it is ordered by expiry and the sweep stops at the first live entry. Memory is
therefore bounded by the entries written within the last ``ttl_ms`` (plus one batch).
The TTL clock of a list or map restarts on any write to it (Flink expires map and list
elements one by one; here the unit is the key's whole list or map, which keeps the
bookkeeping to one entry per key).

Values must be JSON-representable (checked on write, :mod:`jsonsafe`); map keys must be
``str`` or ``int``.

**The rocksdb state backend** (issue 53; built with a
:class:`~service.core.state_cache.StateMaps`): each named state's ``data`` is its own
named map, ``"s/<name>"`` (a :class:`~service.core.state_cache.StateCache` in front of the
partition's RocksDB) instead of a dict, so a state's lookup is the same one ``get`` on
one map, and a checkpoint writes only the ``(state, key)`` entries that changed, not a
key's every state. A list or map changed in place is marked dirty right after (the list
and map handles of that backend). The TTL expiries stay in memory (the ``OrderedDict``
above: one entry per key of a state with a TTL); what the operator keeps beside the
states (:mod:`.operator`) carries them to RocksDB at each checkpoint.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from enum import StrEnum
from typing import Any, Final, Protocol, cast

from service.core.state_cache import StateCache, StateMaps
from service.operators.process.errors import (
    NoCurrentKey,
    StateConflict,
    StateNotJsonSafe,
)
from service.operators.process.jsonsafe import SIMPLE_TYPES, check_json_safe, copy_plain


class StateKind(StrEnum):
    """The three kinds of keyed state."""

    VALUE = "value"
    LIST = "list"
    MAP = "map"


class KeyScope(Protocol):
    """Whatever holds the current key (the operator's context)."""

    key: str | None


STATE_MAP_PREFIX: Final = "s/"
"""A named state's map with the rocksdb backend: ``"s/<name>"``."""


class StateStore:
    """All keys' entries of one named state, plus their expiries when it has a TTL."""

    __slots__ = ("data", "expiry", "kind", "name", "now_ref", "ttl_ms")

    def __init__(
        self,
        name: str,
        kind: StateKind,
        ttl_ms: int | None,
        now_ref: _Now,
        data: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.kind = kind
        self.ttl_ms = ttl_ms
        self.data: dict[str, Any] = {} if data is None else data
        """Key -> entry: a dict, or with the rocksdb backend a
        :class:`~service.core.state_cache.StateCache` (typed as the dict it stands for)."""
        self.expiry: OrderedDict[str, int] | None = OrderedDict() if ttl_ms is not None else None
        self.now_ref = now_ref

    def set_ttl(self, ttl_ms: int | None) -> None:
        """Change the TTL (code changed between runs); live entries get a fresh expiry."""
        if ttl_ms == self.ttl_ms:
            return
        self.ttl_ms = ttl_ms
        if ttl_ms is None:
            self.expiry = None
        else:
            deadline = self.now_ref.now + ttl_ms
            self.expiry = OrderedDict((key, deadline) for key in self.data)

    def sweep(self, now: int, removed: set[str]) -> int:
        """Drop entries whose expiry is ``<= now``; adds their keys to ``removed``."""
        expiry = self.expiry
        if not expiry:
            return 0
        data = self.data
        count = 0
        while expiry:
            key = next(iter(expiry))
            if expiry[key] > now:
                break
            del expiry[key]
            data.pop(key, None)
            removed.add(key)
            count += 1
        return count

    def declaration(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "ttl_ms": self.ttl_ms}

    # -- plain data -------------------------------------------------------------------
    def plain(self, stored: Any) -> Any:
        """The snapshot form of one key's entry (a map becomes ``[[k, v], ...]``)."""
        if self.kind is StateKind.MAP:
            return [[k, v] for k, v in stored.items()]
        return stored

    def from_plain(self, plain: Any) -> Any:
        if self.kind is StateKind.MAP:
            return {k: copy_plain(v) for k, v in plain}
        return copy_plain(plain)


class _Now:
    """The processing time TTL is measured against; set by the operator once per batch."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0


def _ttl_reader(
    data: dict[str, Any], expiry: OrderedDict[str, int], now: _Now
) -> Callable[[str | None], Any]:
    """The ``_read`` of a handle with TTL: the key's entry, or None if absent or expired
    (an expired entry is removed).

    A closure over the store's containers, which it reads as cell variables rather than
    through the handle's attributes.
    """

    def read(key: str | None) -> Any:
        if key is not None:
            deadline = expiry.get(key)
            if deadline is not None and deadline <= now.now:
                del expiry[key]
                data.pop(key, None)
                return None
            return data.get(key)
        return None

    return read


def _cached_reader(data: dict[str, Any]) -> Callable[[str | None], Any]:
    """The ``_read`` of a handle without TTL on a
    :class:`~service.core.state_cache.StateCache`: no key (in ``open``) reads nothing."""
    get = data.get

    def read(key: str | None) -> Any:
        return None if key is None else get(key)

    return read


class _Handle:
    """What the three kinds of handle share: the store, the scope and TTL bookkeeping.

    Whether the state has a TTL is decided once, here, not on every call: ``_read`` is the
    data dict's own ``get`` without TTL (a C call, no Python frame) and a reader that drops
    expired entries with TTL; writers refresh the expiry only when there is one.
    """

    __slots__ = ("_data", "_expiry", "_name", "_now", "_read", "_scope", "_store", "_ttl")

    def __init__(self, store: StateStore, scope: KeyScope) -> None:
        self._store = store
        self._name = store.name
        self._data = store.data
        self._scope = scope
        self._now = store.now_ref
        self._ttl = store.ttl_ms
        self._expiry = store.expiry
        self._read: Callable[[str | None], Any]
        if store.expiry is not None:
            self._read = _ttl_reader(store.data, store.expiry, store.now_ref)
        elif type(store.data) is dict:
            self._read = store.data.get  # type: ignore[assignment]
        else:
            self._read = _cached_reader(store.data)

    @property
    def name(self) -> str:
        return self._name

    def _no_key(self) -> NoCurrentKey:
        return NoCurrentKey(f"state {self._name!r} used without a current key (e.g. in open)")

    def _touch(self, key: str) -> None:
        """Restart the key's TTL (callers check that there is one)."""
        expiry = self._expiry
        expiry[key] = self._now.now + self._ttl  # type: ignore[index,operator]
        expiry.move_to_end(key)  # type: ignore[union-attr]

    def _drop(self, key: str) -> None:
        self._data.pop(key, None)
        if self._expiry is not None:
            self._expiry.pop(key, None)

    def clear(self) -> None:
        """Remove the current key's entry."""
        key = self._scope.key
        if key is None:
            raise self._no_key()
        self._drop(key)


class ValueState(_Handle):
    """One value per key; ``value()`` is None when unset (or expired)."""

    __slots__ = ()

    @property
    def entries(self) -> dict[str, Any]:
        """Every key's value: the store's dict itself (a restore refills it in place).

        For the built-in functions' batch paths only; it bypasses the JSON check and TTL,
        so a writer must store only what :meth:`update` stores as it is (``int``/``str``)
        and the state must have no TTL."""
        if self._expiry is not None:
            raise ValueError(f"state {self._name!r} has a TTL: use value() and update()")
        return self._data

    def value(self) -> Any:
        return self._data.get(self._scope.key)  # type: ignore[arg-type]

    def update(self, value: Any) -> None:
        """Set the value; ``None`` clears it. The value is kept by reference."""
        key = self._scope.key
        # An exact int or str (most values: counts, deadlines, ids) is JSON-safe by its
        # type alone; identity tests cost less than a set lookup (and an int, the usual
        # case, needs one). Everything else, and a write without a current key, takes
        # the checked path.
        if key is not None and (type(value) is int or type(value) is str):
            self._data[key] = value
        else:
            self._store_checked(key, value)

    def _store_checked(self, key: str | None, value: Any) -> None:
        """:meth:`update` for what the fast path does not take: no current key, ``None``
        (clears), and values whose type alone does not prove them JSON-safe."""
        if key is None:
            raise self._no_key()
        if value is None:
            self._drop(key)
            return
        t = type(value)
        # A finite float passes without the checker's two calls: x - x is 0.0 for a
        # finite x and NaN for +-inf and NaN, which go on to be refused below.
        if not (t is float and value - value == 0.0) and t not in SIMPLE_TYPES:
            check_json_safe(value, self._name)
        self._data[key] = value


class _TtlValueState(ValueState):
    """A value state with TTL; a separate class keeps the plain one free of TTL checks.

    Its two methods inline the expiry bookkeeping of ``_read``/``_touch``, so a read or a
    write is one Python call, as without TTL.
    """

    __slots__ = ("_deadlines", "_ttl_ms")

    def __init__(self, store: StateStore, scope: KeyScope) -> None:
        super().__init__(store, scope)
        if store.expiry is None or store.ttl_ms is None:
            raise ValueError(f"state {store.name!r} has no TTL")
        # The same objects as _expiry and _ttl, typed without their None.
        self._deadlines: OrderedDict[str, int] = store.expiry
        self._ttl_ms: int = store.ttl_ms

    def value(self) -> Any:
        key = self._scope.key
        deadlines = self._deadlines
        deadline = deadlines.get(key)  # type: ignore[arg-type]
        if deadline is not None and deadline <= self._now.now:
            del deadlines[key]  # type: ignore[arg-type]
            self._data.pop(key, None)  # type: ignore[arg-type]
            return None
        return self._data.get(key)  # type: ignore[arg-type]

    def update(self, value: Any) -> None:
        key = self._scope.key
        if key is not None and (type(value) is int or type(value) is str):
            self._data[key] = value
        else:
            self._store_checked(key, value)
            if value is None:
                return
        deadlines = self._deadlines
        deadlines[key] = self._now.now + self._ttl_ms  # type: ignore[index]
        deadlines.move_to_end(key)  # type: ignore[arg-type]


class ListState(_Handle):
    """A list per key; an empty list is the same as no entry."""

    __slots__ = ()

    def get(self) -> list[Any]:
        """A copy of the current key's list ([] when unset)."""
        stored = self._read(self._scope.key)
        return [] if stored is None else list(stored)

    def add(self, value: Any) -> None:
        key = self._scope.key
        if key is None:
            raise self._no_key()
        if type(value) not in SIMPLE_TYPES:
            check_json_safe(value, self._name)
        stored = self._read(key)
        if stored is None:
            self._data[key] = [value]
        else:
            stored.append(value)
        if self._expiry is not None:
            self._touch(key)

    def add_all(self, values: Iterable[Any]) -> None:
        items = list(values)
        if not items:
            return
        key = self._scope.key
        if key is None:
            raise self._no_key()
        check_json_safe(items, self._name)
        stored = self._read(key)
        if stored is None:
            self._data[key] = items
        else:
            stored.extend(items)
        if self._expiry is not None:
            self._touch(key)

    def update(self, values: Iterable[Any]) -> None:
        """Replace the list; an empty one clears the entry."""
        key = self._scope.key
        if key is None:
            raise self._no_key()
        items = list(values)
        if not items:
            self._drop(key)
            return
        check_json_safe(items, self._name)
        self._data[key] = items
        if self._expiry is not None:
            self._touch(key)


class MapState(_Handle):
    """A map per key with ``str``/``int`` map keys; an empty map is no entry."""

    __slots__ = ()

    def get(self, map_key: str | int, default: Any = None) -> Any:
        stored = self._read(self._scope.key)
        return default if stored is None else stored.get(map_key, default)

    def contains(self, map_key: str | int) -> bool:
        stored = self._read(self._scope.key)
        return stored is not None and map_key in stored

    def put(self, map_key: str | int, value: Any) -> None:
        key = self._scope.key
        if key is None:
            raise self._no_key()
        if type(map_key) is not str and type(map_key) is not int:
            raise StateNotJsonSafe(
                self._name,
                f"{{{map_key!r}}}",
                type(map_key).__name__,
                "map keys must be str or int",
            )
        if type(value) not in SIMPLE_TYPES:
            check_json_safe(value, self._name)
        stored = self._read(key)
        if stored is None:
            self._data[key] = {map_key: value}
        else:
            stored[map_key] = value
        if self._expiry is not None:
            self._touch(key)

    def put_all(self, entries: Mapping[str | int, Any]) -> None:
        for map_key, value in entries.items():
            self.put(map_key, value)

    def remove(self, map_key: str | int) -> None:
        key = self._scope.key
        if key is None:
            raise self._no_key()
        stored = self._read(key)
        if stored is None:
            return
        stored.pop(map_key, None)
        if not stored:
            self._drop(key)

    def keys(self) -> list[Any]:
        stored = self._read(self._scope.key)
        return [] if stored is None else list(stored)

    def values(self) -> list[Any]:
        stored = self._read(self._scope.key)
        return [] if stored is None else list(stored.values())

    def items(self) -> list[tuple[Any, Any]]:
        stored = self._read(self._scope.key)
        return [] if stored is None else list(stored.items())

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())

    def is_empty(self) -> bool:
        return not self._read(self._scope.key)


class _CachedValueState(ValueState):
    """A value state in a :class:`~service.core.state_cache.StateCache` (the rocksdb
    backend): no key (in ``open``) reads nothing."""

    __slots__ = ()

    def value(self) -> Any:
        key = self._scope.key
        return None if key is None else self._data.get(key)


class _CachedTtlValueState(_TtlValueState):
    """:class:`_CachedValueState` with a TTL."""

    __slots__ = ()

    def value(self) -> Any:
        return None if self._scope.key is None else super().value()


class _CachedListState(ListState):
    """A list state in a :class:`~service.core.state_cache.StateCache` (the rocksdb
    backend): a list changed in place is marked dirty right after it was read."""

    __slots__ = ("_mark",)

    def __init__(self, store: StateStore, scope: KeyScope) -> None:
        super().__init__(store, scope)
        self._mark: Callable[[str], None] = cast(StateCache, store.data).mark_dirty

    def add(self, value: Any) -> None:
        super().add(value)
        self._mark(self._scope.key)  # type: ignore[arg-type]  # add checked it

    def add_all(self, values: Iterable[Any]) -> None:
        items = list(values)
        if items:
            super().add_all(items)
            self._mark(self._scope.key)  # type: ignore[arg-type]


class _CachedMapState(MapState):
    """A map state in a :class:`~service.core.state_cache.StateCache` (the rocksdb
    backend): a map changed in place is marked dirty right after it was read."""

    __slots__ = ("_mark",)

    def __init__(self, store: StateStore, scope: KeyScope) -> None:
        super().__init__(store, scope)
        self._mark: Callable[[str], None] = cast(StateCache, store.data).mark_dirty

    def put(self, map_key: str | int, value: Any) -> None:
        super().put(map_key, value)
        self._mark(self._scope.key)  # type: ignore[arg-type]  # put checked it

    def remove(self, map_key: str | int) -> None:
        key = self._scope.key
        if key is None:
            raise self._no_key()
        stored = self._read(key)
        if stored is None or map_key not in stored:
            return
        del stored[map_key]
        if stored:
            self._mark(key)
        else:
            self._drop(key)


_HANDLES: dict[StateKind, type[_Handle]] = {
    StateKind.VALUE: ValueState,
    StateKind.LIST: ListState,
    StateKind.MAP: MapState,
}
_CACHED_HANDLES: dict[StateKind, type[_Handle]] = {
    StateKind.VALUE: _CachedValueState,
    StateKind.LIST: _CachedListState,
    StateKind.MAP: _CachedMapState,
}


class KeyedStateBackend:
    """Every named state of one operator instance; snapshots per key or as a whole."""

    __slots__ = ("_handles", "_maps", "_scope", "clock_now", "stores")

    def __init__(self, scope: KeyScope, maps: StateMaps | None = None) -> None:
        self._scope = scope
        self._maps = maps
        """The rocksdb backend's named maps (None: dicts, the memory backend)."""
        self.stores: dict[str, StateStore] = {}
        self._handles: dict[str, _Handle] = {}
        self.clock_now = _Now()

    def _new_store(self, name: str, kind: StateKind, ttl_ms: int | None) -> StateStore:
        maps = self._maps
        data = None if maps is None else cast(dict[str, Any], maps(STATE_MAP_PREFIX + name))
        store = self.stores[name] = StateStore(name, kind, ttl_ms, self.clock_now, data)
        return store

    @property
    def now(self) -> int:
        return self.clock_now.now

    @now.setter
    def now(self, value: int) -> None:
        self.clock_now.now = value

    def handle(self, name: str, kind: StateKind, ttl_ms: int | None) -> _Handle:
        """The handle of state ``name``, created on first use; kind and TTL must agree."""
        handle = self._handles.get(name)
        if handle is not None:
            store = handle._store
            if store.kind is not kind or store.ttl_ms != ttl_ms:
                raise StateConflict(
                    f"state {name!r} is {store.kind.value} state with ttl_ms={store.ttl_ms}; "
                    f"asked for {kind.value} state with ttl_ms={ttl_ms}"
                )
            return handle
        if not isinstance(name, str) or not name or "\x00" in name:
            raise StateConflict(f"state names are non-empty strings without NUL, got {name!r}")
        if ttl_ms is not None and (type(ttl_ms) is not int or ttl_ms <= 0):
            raise StateConflict(f"state {name!r}: ttl_ms must be a positive int, got {ttl_ms!r}")
        existing = self.stores.get(name)
        if existing is None:
            store = self._new_store(name, kind, ttl_ms)
        elif existing.kind is not kind:  # restored before the function asked for it
            raise StateConflict(
                f"state {name!r} was restored as {existing.kind.value} state; "
                f"the function asks for {kind.value} state"
            )
        else:
            store = existing
            store.set_ttl(ttl_ms)
        cls: type[_Handle]
        if kind is StateKind.VALUE and ttl_ms is not None:
            cls = _TtlValueState if self._maps is None else _CachedTtlValueState
        else:
            cls = (_HANDLES if self._maps is None else _CACHED_HANDLES)[kind]
        handle = self._handles[name] = cls(store, self._scope)
        return handle

    def sweep(self, now: int, removed: set[str]) -> int:
        """Set TTL time to ``now`` and drop every expired entry; returns how many."""
        self.clock_now.now = now
        count = 0
        for store in self.stores.values():
            if store.expiry:
                count += store.sweep(now, removed)
        return count

    def keys_with_state(self) -> int:
        """How many keys hold any state (O(1) with one state, O(keys) with several).

        With the rocksdb backend, the most keys one state holds (exact with one state; a
        union would read every key from disk)."""
        stores = [s.data for s in self.stores.values() if len(s.data)]
        if not stores:
            return 0
        if len(stores) == 1:
            return len(stores[0])
        if self._maps is not None:
            return max(len(data) for data in stores)
        return len(set().union(*stores))

    def declarations(self) -> dict[str, dict[str, Any]]:
        return {name: store.declaration() for name, store in self.stores.items()}

    # -- snapshots --------------------------------------------------------------------
    def snapshot_key(self, key: str) -> tuple[dict[str, Any], dict[str, int]]:
        """The key's entries ``{state: plain}`` and expiries ``{state: ts}``."""
        values: dict[str, Any] = {}
        expiries: dict[str, int] = {}
        for name, store in self.stores.items():
            stored = store.data.get(key)
            if stored is None:
                continue
            values[name] = store.plain(stored)
            if store.expiry is not None:
                deadline = store.expiry.get(key)
                if deadline is not None:
                    expiries[name] = deadline
        return values, expiries

    def snapshot_keys(
        self, keys: Iterable[str]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, int]]]:
        """:meth:`snapshot_key` of many keys at once, by key (keys with nothing are left
        out): the stores are the outer loop, so a key costs a dict lookup per store."""
        values: dict[str, dict[str, Any]] = {}
        expiries: dict[str, dict[str, int]] = {}
        keys = list(keys)
        for name, store in self.stores.items():
            data = store.data
            is_map = store.kind is StateKind.MAP
            for key in keys:
                stored = data.get(key)
                if stored is None:
                    continue
                plain = store.plain(stored) if is_map else stored
                per_key = values.get(key)
                if per_key is None:
                    values[key] = {name: plain}
                else:
                    per_key[name] = plain
            if store.expiry is not None:
                expiry = store.expiry
                for key in keys:
                    deadline = expiry.get(key)
                    if deadline is not None and key in data:
                        expiries.setdefault(key, {})[name] = deadline
        return values, expiries

    def snapshot(self) -> dict[str, Any]:
        """Every store as ``{name: {kind, ttl_ms, data: {key: plain}, expiry: {key: ts}}}``."""
        out: dict[str, Any] = {}
        for name, store in self.stores.items():
            out[name] = {
                **store.declaration(),
                "data": {key: store.plain(v) for key, v in store.data.items()},
                "expiry": dict(store.expiry) if store.expiry is not None else {},
            }
        return out

    def _declare(self, declarations: Mapping[str, Mapping[str, Any]], clear: bool = True) -> None:
        """Create (or check) stores for restored declarations; ``clear``: empty every
        store."""
        for name, decl in declarations.items():
            kind = StateKind(decl["kind"])
            ttl = decl.get("ttl_ms")
            store = self.stores.get(name)
            if store is None:
                self._new_store(name, kind, ttl)
            elif store.kind is not kind:
                raise StateConflict(
                    f"state {name!r} is {store.kind.value} state in the function but "
                    f"{kind.value} state in the snapshot"
                )
        if not clear:
            return
        for store in self.stores.values():
            store.data.clear()
            if store.expiry is not None:
                store.expiry.clear()

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Replace every store's contents (in place: existing handles stay valid)."""
        self._declare(snapshot)
        for name, saved in snapshot.items():
            store = self.stores[name]
            data = store.data
            for key, plain in saved["data"].items():
                data[key] = store.from_plain(plain)
            self._restore_expiry(store, saved.get("expiry", {}).items())

    def apply_keys(
        self,
        declarations: Mapping[str, Mapping[str, Any]],
        per_key: Iterable[tuple[str, Mapping[str, Any] | None]],
        expiries: Mapping[str, list[tuple[str, int]]],
    ) -> None:
        """The rocksdb backend's restore: the named maps hold the state of a checkpoint
        (or nothing), and ``per_key`` (each key changed after it: its values by state,
        None when it has none) is applied onto them; ``expiries`` (each state's
        deadlines, of every key) replace the ones in memory."""
        self._declare(declarations, clear=False)
        stores = list(self.stores.values())
        for key, values in per_key:
            for store in stores:
                plain = None if values is None else values.get(store.name)
                if plain is None:
                    store.data.pop(key, None)
                else:
                    store.data[key] = store.from_plain(plain)
        for store in stores:
            expiry = store.expiry
            if expiry is None:
                continue
            expiry.clear()
            pairs = expiries.get(store.name, [])
            declared = declarations.get(store.name)
            if declared is None or declared.get("ttl_ms") is None:
                # A TTL added since: the entries without an expiry get one (a scan).
                self._restore_expiry(store, pairs)
            else:  # every entry has its expiry: no scan of the map
                expiry.update(sorted(((key, int(ts)) for key, ts in pairs), key=_deadline))

    def restore_keys(
        self,
        declarations: Mapping[str, Mapping[str, Any]],
        per_key: Iterable[tuple[str, Mapping[str, Any], Mapping[str, int]]],
    ) -> None:
        """Replace every store's contents from :meth:`snapshot_key` results."""
        self._declare(declarations)
        expiries: dict[str, list[tuple[str, int]]] = {}
        for key, values, key_expiries in per_key:
            for name, plain in values.items():
                store = self.stores[name]
                store.data[key] = store.from_plain(plain)
            for name, deadline in key_expiries.items():
                expiries.setdefault(name, []).append((key, deadline))
        for name, pairs in expiries.items():
            self._restore_expiry(self.stores[name], pairs)

    def _restore_expiry(self, store: StateStore, pairs: Iterable[tuple[str, int]]) -> None:
        if store.expiry is None:
            return
        restored = {key: int(ts) for key, ts in pairs}
        if store.ttl_ms is not None:
            # An entry restored without expiry (TTL added since) gets a fresh one.
            fresh = self.clock_now.now + store.ttl_ms
            for key in store.data:
                restored.setdefault(key, fresh)
        for key, ts in sorted(restored.items(), key=lambda kv: kv[1]):
            store.expiry[key] = ts


def _deadline(pair: tuple[str, int]) -> int:
    return pair[1]
