"""The general window operator: every assigner, trigger, evictor and function.

It follows Flink's ``WindowOperator`` / ``EvictingWindowOperator`` step by step
(semantics.md section 5): per record and assigned window, skip late windows, add to
the window's contents, ask the trigger, FIRE/PURGE, register the cleanup timer; late
records are those skipped by every window with ``ts + allowed_lateness <= W``. Merging
assigners go through the key's merging-window set; a merged window's trigger state and
timers are rebuilt by ``Trigger.on_merge`` and the covered windows' are cleared.

Deviation from Flink, on purpose: a new session window equal to an existing window
keeps the existing state window (Flink's ``MergingWindowSet`` would remap it to itself).

The session fast path (Nexmark q11, #33) changes how, never what: a record whose
session meets at most one of the key's windows skips the merging set's copy and sort
(``merging.extend_window``), and event-time sessions with the default trigger go
through ``_process_session``: the trigger's timer calls made directly, the same
registrations and deletions in the same order (so the timer queue, its tie order and
every snapshot are the general path's), minus provable no-ops. Timers
are not moved lazily: the queue is checkpointed, and a stale timer left in it would
change snapshots and timer counts.

The seam that shows it: :attr:`GeneralWindowOperator.session_fast_path`, a class
attribute, not an argument (no caller chooses a path). A subclass that sets it False
takes the general path for every record; ``tests/operators/window/test_session_fast_path.py``
builds one and holds the two to the same results, snapshots and timers.

With the rocksdb state backend (``config.state_maps``), each key's :class:`KeyState`
lives in a :class:`~service.core.state_cache.StateCache`, the map ``"keys"`` (RocksDB
holding the checkpoint's form, :class:`~.keystate.KeyStateCodec`): a record or a timer
gets its key's state from it (read back from RocksDB when evicted), changes it, and
marks it dirty when done (``_done``), with no other read of the cache in between. The
event-time timers live in RocksDB too, as with Flink's RocksDB backend and its default
RocksDB timers (:class:`~service.core.stored_timers.StoredTimerService`): ordered by
time in the map ``"timerq"``, each key's timers in a second cached map, ``"timers"``
(what the changelog holds per key). A checkpoint writes the timers buffered since the
last one (in :meth:`_changes`, just before the runtime flushes the caches); a
restore onto the store (the changelog's tail applied to a local checkpoint) applies
only the tail's keys, and the windows open count comes from the checkpoint's metadata.
Processing-time timers stay on the heap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar

from service.core.state_cache import NamespacedStore, StateCache
from service.core.stored_timers import (
    BUFFERED_TIMER_BYTES,
    MIN_BUFFER,
    TIMER_ENTRY_CODEC,
    StoredTimerQueue,
    StoredTimerService,
)
from service.core.time import MAX_TIMESTAMP, TimeDomain
from service.operators.base import FailedRecord, FireKind, InputRecord, WindowResult
from service.operators.query import in_range

from .assigners import SessionAssigner, Window, max_timestamp
from .common import WindowOperatorBase
from .config import WindowOperatorConfig
from .errors import WindowStateError
from .functions import FUNCTION_ERROR
from .keystate import KEY_PREFIX, KeyState, KeyStateCodec, decode_key_state, encode_key_state
from .merging import add_window, extend_window, retire_window
from .triggers import EventTimeTrigger

_merge_windows = SessionAssigner.merge_windows


class _Context:
    """The trigger context, reused: the operator points it at a key and window."""

    __slots__ = ("_op", "key", "merged", "state", "window")

    def __init__(self, op: GeneralWindowOperator) -> None:
        self._op = op
        self.key = ""
        self.window: Window = (0, 0)
        self.state = KeyState(False)
        self.merged: list[Window] = []

    @property
    def current_watermark(self) -> int:
        return self._op._timers.current_watermark

    @property
    def current_processing_time(self) -> int:
        return self._op._clock.now_ms()

    def register_event_time_timer(self, timestamp: int) -> None:
        self._op._timers.register_event_time_timer(timestamp, self.key, self.window)

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._op._timers.delete_event_time_timer(timestamp, self.key, self.window)

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._op._timers.register_processing_time_timer(timestamp, self.key, self.window)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._op._timers.delete_processing_time_timer(timestamp, self.key, self.window)

    def get_state(self, name: str) -> Any:
        values = self.state.trigger.get(self.window)
        return None if values is None else values.get(name)

    def set_state(self, name: str, value: Any) -> None:
        triggers = self.state.trigger
        if value is None:
            values = triggers.get(self.window)
            if values is not None:
                values.pop(name, None)
                if not values:
                    del triggers[self.window]
        else:
            triggers.setdefault(self.window, {})[name] = value

    def merge_state(self, name: str, combine: Callable[[Any, Any], Any]) -> None:
        merged = self.get_state(name)
        for window in self.merged:
            values = self.state.trigger.get(window)
            value = None if values is None else values.get(name)
            if value is not None:
                merged = value if merged is None else combine(merged, value)
        self.set_state(name, merged)


class _OnRocks:
    """The general operator's rocksdb backend besides its keys' cache."""

    __slots__ = ("open_restored", "service", "timers")

    def __init__(self, timers: StateCache, service: StoredTimerService[Window]) -> None:
        self.timers = timers
        """Key -> its timers (the changelog's form), kept by the stored timer service."""
        self.service = service
        """The operator's timer service (its event-time timers in RocksDB)."""
        self.open_restored: int | None = None
        """The windows open at the checkpoint a restore read (its metadata's)."""


def _stored_timers(op: GeneralWindowOperator, timers: StateCache) -> StoredTimerService[Window]:
    """The timer service of the rocksdb backend: the event-time timers in the map
    ``"timerq"`` of the store holding ``timers`` (each key's), the buffer bounded by that
    map's share of the cache."""
    store = timers.store
    if not isinstance(store, NamespacedStore):
        raise WindowStateError("the rocksdb backend's timers need a named map of an ordered store")

    def bound() -> int:
        return max(MIN_BUFFER, timers.capacity_bytes // BUFFERED_TIMER_BYTES)

    queue = StoredTimerQueue(store.sibling("timerq"), bound)
    return StoredTimerService(op._on_event_time, op._on_processing_time, timers, queue)


class GeneralWindowOperator(WindowOperatorBase):
    """A keyed window operator for any configuration (see module docstring)."""

    session_fast_path: ClassVar[bool] = True
    """Session windows take the fast path where it applies; False (a subclass's) sends
    every record through the merging set and the trigger as written (module doc)."""

    def __init__(self, config: WindowOperatorConfig) -> None:
        super().__init__(config, plan_base=0)
        self._assigner = config.assigner
        self._merging = isinstance(config.assigner, SessionAssigner)
        self._trigger = config.effective_trigger()
        self._evictor = config.evictor
        self._evict_after = config.evict_after
        self._function = config.function
        self._elements = config.keeps_elements
        maps = config.state_maps
        self._keys: Any = {} if maps is None else maps("keys", KeyStateCodec(self._merging))
        """Key -> its :class:`KeyState`: a dict, or with the rocksdb backend a
        :class:`~service.core.state_cache.StateCache`."""
        # One attribute for the rest of the rocksdb backend's parts: CPython 3.11 keeps
        # up to 30 attributes in an instance's shared-key dict, past which every
        # attribute read on the per-record path is slower (measured: ~10% on sessions).
        self._rocks: _OnRocks | None = None
        if maps is not None:
            timer_map = maps("timers", TIMER_ENTRY_CODEC)
            service = _stored_timers(self, timer_map)
            self._rocks = _OnRocks(timer_map, service)
            self._timers = service
        self._open = 0
        self._ctx = _Context(self)
        self._extend = extend_window if self.session_fast_path and self._merging else None
        # Event-time sessions with the default trigger: _process_session, and the trigger's
        # calls made inline in _merge (the same timer operations).
        self._event_trigger = (
            self._extend is not None and self._event and type(self._trigger) is EventTimeTrigger
        )
        self._gap = config.assigner.gap if isinstance(config.assigner, SessionAssigner) else 0
        # The window whose trigger timer _merge_session registered for the current record
        # (then the record's own registration of it is a no-op, skipped).
        self._registered: Window | None = None

    # -- records ----------------------------------------------------------------------
    def process_batch(self, records: Sequence[InputRecord]) -> None:
        self.counters.records += len(records)
        process = self._process_session if self._event_trigger else self._process
        has_bad = self.plan.has_bad if self.plan is not None else None
        if has_bad is None:
            for key, timestamp, value, _position, source in records:
                process(key, timestamp, value, source)
            return
        reject = self.reject_bad
        for key, timestamp, value, _position, source in records:
            # checked once, before any window (a dead-lettered record is counted nowhere)
            if has_bad(value) and reject(key, value, source):
                continue
            process(key, timestamp, value, source)

    def _process(self, key: str, timestamp: int, value: Any, source: Any) -> None:
        assigned = self._assigner.assign(timestamp if self._event else self._clock.now_ms())
        state = self._state(key)
        ctx = self._ctx
        skipped = True
        for window in assigned:
            if state.merging is not None:
                ctx.key, ctx.state = key, state
                extend = self._extend
                actual = None if extend is None else extend(state.merging, window, self._merge)
                if actual is None:
                    actual = add_window(state.merging, window, _merge_windows, self._merge)
                if self.is_window_late(actual):
                    self._drop_contents(state, retire_window(state.merging, actual))
                    continue
                state_window = state.merging[actual]
            else:
                if self.is_window_late(window):
                    continue
                actual = state_window = window
            skipped = False
            self._add(state, state_window, timestamp, value)
            ctx.key, ctx.state, ctx.window = key, state, actual
            result = self._trigger.on_element(timestamp, actual, ctx)
            if result.is_fire:
                self._emit(key, state, actual, state_window, self.fire_kind(actual, None, 0))
            if result.is_purge:
                self._drop_contents(state, state_window)
            self.register_cleanup_timer(key, actual)
        if skipped and self._event and timestamp + self._lateness <= self._timers.current_watermark:
            self.late_record(key, timestamp, source)
        self._done(key, state)

    def _process_session(self, key: str, timestamp: int, value: Any, source: Any) -> None:
        """:meth:`_process` for event-time sessions with the default trigger, step by step
        the same (one window per record; EventTimeTrigger.on_element and the cleanup time
        inline), minus calls that are no-ops: with no allowed lateness the cleanup timer
        is the trigger's timer (same time, key and window), already registered."""
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = KeyState(True)
        mapping = state.merging
        if mapping is None:
            raise WindowStateError("session windows without a merging window set")
        ctx = self._ctx
        ctx.key, ctx.state = key, state
        window = (timestamp, timestamp + self._gap)
        self._registered = None
        actual = extend_window(mapping, window, self._merge_session)
        if actual is None:
            actual = add_window(mapping, window, _merge_windows, self._merge_session)
        timers = self._timers
        watermark = timers.current_watermark
        lateness = self._lateness
        end = actual[1]
        if end == MAX_TIMESTAMP:
            max_ts = cleanup = MAX_TIMESTAMP
        else:
            max_ts = end - 1
            cleanup = max_ts + lateness
            if cleanup > MAX_TIMESTAMP:
                cleanup = MAX_TIMESTAMP
        if cleanup <= watermark:  # the window is late (is_window_late)
            self._drop_contents(state, retire_window(mapping, actual))
            if timestamp + lateness <= watermark:
                self.late_record(key, timestamp, source)
            self._done(key, state)
            return
        state_window = mapping[actual]
        self._add(state, state_window, timestamp, value)
        if max_ts > watermark:
            if actual != self._registered:
                timers.register_event_time_timer(max_ts, key, actual)
            if cleanup != max_ts and cleanup != MAX_TIMESTAMP:
                timers.register_event_time_timer(cleanup, key, actual)
        else:  # an allowed-late record: fired at once
            self._emit(key, state, actual, state_window, self.fire_kind(actual, None, 0))
            if cleanup != MAX_TIMESTAMP:
                timers.register_event_time_timer(cleanup, key, actual)
        self._done(key, state)

    def _add(self, state: KeyState, window: Window, timestamp: int, value: Any) -> None:
        contents = state.contents.get(window)
        plan = self.plan
        if self._elements:
            if contents is None:
                state.contents[window] = [[timestamp, value]]
                self._open += 1
            else:
                contents.append([timestamp, value])
            return
        if plan is None:
            raise WindowStateError("an accumulating window operator without aggregations")
        if contents is None:
            contents = state.contents[window] = plan.new()
            self._open += 1
        plan.add(contents, timestamp, value)

    def _drop_contents(self, state: KeyState, window: Window) -> None:
        if state.contents.pop(window, None) is not None:
            self._open -= 1

    def _state(self, key: str) -> KeyState:
        state: KeyState | None = self._keys.get(key)
        if state is None:
            state = self._keys[key] = KeyState(self._merging)
        return state

    def _done(self, key: str, state: KeyState) -> None:
        """A record or timer of the key is done with its state. With the rocksdb backend
        the state, got from the cache for it and changed in place since (nothing else
        read the cache in between), is marked dirty."""
        if self._track:
            self._dirty.add(key)
        if state.is_empty():
            self._keys.pop(key, None)
        elif self._rocks is not None:
            self._keys.mark_dirty(key)

    # -- merging ----------------------------------------------------------------------
    def _merge(
        self, merged: Window, covered: list[Window], state_window: Window, folded: list[Window]
    ) -> None:
        """Flink's merge callback: trigger on_merge, clear covered windows, fold contents."""
        if self._event and max_timestamp(merged) + self._lateness <= self._timers.current_watermark:
            raise WindowStateError(
                f"merging made window {merged} late (watermark {self._timers.current_watermark})"
            )
        ctx = self._ctx
        state = ctx.state
        ctx.window, ctx.merged = merged, covered
        self._trigger.on_merge(merged, ctx)
        ctx.merged = []
        for window in covered:
            ctx.window = window
            self._trigger.clear(window, ctx)
            state.trigger.pop(window, None)
            state.seqs.pop(window, None)
            self.delete_cleanup_timer(ctx.key, window)
        self._fold(state, state_window, folded)

    def _merge_session(
        self, merged: Window, covered: list[Window], state_window: Window, folded: list[Window]
    ) -> None:
        """:meth:`_merge` with EventTimeTrigger's on_merge and clear inline (the same timer
        operations in the same order), for _process_session; with no allowed lateness a
        covered window's cleanup timer is its trigger timer, deleted once."""
        timers = self._timers
        watermark = timers.current_watermark
        lateness = self._lateness
        max_ts = merged[1] - 1 if merged[1] != MAX_TIMESTAMP else MAX_TIMESTAMP
        if max_ts + lateness <= watermark:
            raise WindowStateError(f"merging made window {merged} late (watermark {watermark})")
        ctx = self._ctx
        state = ctx.state
        key = ctx.key
        if max_ts > watermark:
            timers.register_event_time_timer(max_ts, key, merged)
            self._registered = merged
        for window in covered:
            end = window[1]
            timers.delete_event_time_timer(
                end - 1 if end != MAX_TIMESTAMP else MAX_TIMESTAMP, key, window
            )
            if window == merged:  # not seen (the set never holds intersecting windows)
                self._registered = None
            state.trigger.pop(window, None)
            state.seqs.pop(window, None)
            if lateness:
                self.delete_cleanup_timer(key, window)
        if folded:
            self._fold(state, state_window, folded)

    def _fold(self, state: KeyState, state_window: Window, folded: list[Window]) -> None:
        """The folded state windows' contents into the state window's."""
        target = state.contents.get(state_window)
        for window in folded:
            source = state.contents.pop(window, None)
            if source is None:
                continue
            self._open -= 1
            if target is None:
                target = state.contents[state_window] = source
                self._open += 1
            elif self._elements:
                target.extend(source)
            elif self.plan is not None:
                self.plan.merge(target, source)

    # -- firing -----------------------------------------------------------------------
    def _emit(
        self, key: str, state: KeyState, window: Window, state_window: Window, kind: FireKind
    ) -> None:
        contents = state.contents.get(state_window)
        if contents is None:
            return
        if self._elements:
            result, ok = self._evaluate(key, window, contents)
            if not contents:
                self._drop_contents(state, state_window)
            if not ok:
                return
        elif self.plan is not None:
            result = self.plan.result(contents)
        seq = state.seqs.get(window, 0)
        state.seqs[window] = seq + 1
        start, end = window
        self.counters.count_firing(kind)
        self.collector.results.append(
            WindowResult(
                f"{self._pipeline}|{key}|{start}|{end}",
                key,
                start,
                end,
                result,
                kind,
                seq,
                self._timers.current_watermark,
            )
        )

    def _evaluate(self, key: str, window: Window, elements: list[Any]) -> tuple[Any, bool]:
        """Evict, apply the function to the elements, evict; the list is edited in place."""
        evictor = self._evictor
        if evictor is not None and not self._evict_after:
            evictor.evict(elements)
        ok = True
        result: Any = None
        if self._function is not None:
            try:
                result = self._function(key, window, [element[1] for element in elements])
            except Exception as exc:  # user code: reported, never fatal to the partition
                ok = False
                self.counters.function_errors += 1
                self.collector.failed.append(
                    FailedRecord(None, key, FUNCTION_ERROR, f"window {list(window)}: {exc!r}")
                )
        elif self.plan is not None:
            result = self.plan.of_elements(elements)
        if evictor is not None and self._evict_after:
            evictor.evict(elements)
        return result, ok

    def _on_event_time(self, timestamp: int, key: str, window: Window) -> None:
        self._on_timer(TimeDomain.EVENT_TIME, timestamp, key, window)

    def _on_processing_time(self, timestamp: int, key: str, window: Window) -> None:
        self._on_timer(TimeDomain.PROCESSING_TIME, timestamp, key, window)

    def _on_timer(self, domain: TimeDomain, timestamp: int, key: str, window: Window) -> None:
        state = self._state(key)
        if state.merging is not None:
            found = state.merging.get(window)
            if found is None:  # a timer of a window already merged away or cleared
                self._done(key, state)
                return
            state_window = found
        else:
            state_window = window
        ctx = self._ctx
        ctx.key, ctx.state, ctx.window = key, state, window
        if domain is TimeDomain.EVENT_TIME:
            result = self._trigger.on_event_time(timestamp, window, ctx)
        else:
            result = self._trigger.on_processing_time(timestamp, window, ctx)
        if result.is_fire:
            self._emit(key, state, window, state_window, self.fire_kind(window, domain, timestamp))
        if result.is_purge:
            self._drop_contents(state, state_window)
        if domain is self._domain and timestamp == self.cleanup_time(window):
            self._clear_all(key, state, window, state_window)
        self._done(key, state)

    def _clear_all(self, key: str, state: KeyState, window: Window, state_window: Window) -> None:
        self._drop_contents(state, state_window)
        ctx = self._ctx
        ctx.key, ctx.state, ctx.window = key, state, window
        self._trigger.clear(window, ctx)
        state.trigger.pop(window, None)
        state.seqs.pop(window, None)
        if state.merging is not None:
            retire_window(state.merging, window)

    # -- state ------------------------------------------------------------------------
    def windows_open(self) -> int:
        """Windows holding contents (a purged window is not open until its next element)."""
        return self._open

    def key_count(self) -> int:
        return len(self._keys)

    def state_keys(self) -> Iterator[str]:
        return iter(list(self._keys.keys()))

    def state_maps(self) -> list[StateCache]:
        """The caches the runtime flushes at each checkpoint (the rocksdb backend)."""
        if self._rocks is None:
            return []
        return [self._keys, self._rocks.timers]

    def has_key_state(self, key: str) -> bool:
        return key in self._keys

    def encode_key(self, key: str) -> dict[str, Any]:
        return encode_key_state(self._keys[key])

    # -- pull queries (operators/query.py) --------------------------------------------
    def query_key(self, key: str) -> dict[str, Any] | None:
        """The key's windows holding contents, by (start, end): each with its
        aggregations' values so far (None with a window function, which only a firing
        calls; ``elements`` then says how many the window holds)."""
        state = self._keys.get(key)
        if state is None:
            return None
        plan = self.plan
        contents = state.contents
        held = (
            state.merging.items()
            if state.merging is not None
            else ((window, window) for window in contents)
        )
        rows: list[dict[str, Any]] = []
        for window, state_window in sorted(held):
            data = contents.get(state_window)
            if data is None:
                continue
            row: dict[str, Any] = {"start": window[0], "end": window[1]}
            if self._elements:
                row["result"] = (
                    plan.of_elements(data) if plan is not None and self._function is None else None
                )
                row["elements"] = len(data)
            else:
                row["result"] = plan.result(data) if plan is not None else None
            row["fires"] = state.seqs.get(window, 0)
            rows.append(row)
        return {"windows": rows} if rows else None

    def scan(
        self, from_key: str | None, to_key: str | None, limit: int
    ) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        present = self._keys.keys()  # a dict's, or a StateCache's (it has no __iter__)
        keys = sorted(key for key in present if in_range(key, from_key, to_key))
        for key in keys:  # a key may hold no contents (only trigger state): skipped
            if len(out) >= limit:
                break
            found = self.query_key(key)
            if found is not None:
                out.append((key, found))
        return out

    def _snapshot_timers(self) -> dict[str, Any] | None:
        return self._timers.snapshot()

    def _changes(self, keys: set[str]) -> Iterator[tuple[str, Any]]:
        """Each key's state (keystate.py) and timers.

        Every key whose timers changed is in ``keys``: triggers and cleanup timers are
        registered and deleted only for the key being processed or fired, which
        ``_done`` marks. On the heap, the timers are found by one scan of the queues
        (O(queued timers) per checkpoint), which replaces the timer service's per-key
        index and its two set operations per timer change. With the rocksdb backend each
        key's timers are its entry in the ``"timers"`` map, and the timers buffered since
        the last checkpoint are written to the store here (the runtime flushes the
        caches right after).
        """
        rocks = self._rocks
        timers = self._timers.snapshot_keys(keys) if keys and rocks is None else {}
        cache = self._keys
        for key in keys:
            if rocks is None:
                found = cache.get(key)
                state = None if found is None else encode_key_state(found)
                key_timers = timers.get(key)
            else:  # without reading an evicted key back into the cache
                state = cache.peek(key)
                key_timers = rocks.service.key_timers(key)
            if state is None and key_timers is None:
                yield KEY_PREFIX + key, None
            else:
                yield (
                    KEY_PREFIX + key,
                    {"state": state, "timers": key_timers or {"event": [], "processing": []}},
                )
        if rocks is not None:
            rocks.service.flush()

    def _meta(self) -> dict[str, Any]:
        meta = super()._meta()
        if self._rocks is not None:  # a local restore reads no key it need not
            meta["open"] = self._open
        return meta

    def _load_meta(self, meta: dict[str, Any]) -> None:
        super()._load_meta(meta)
        if self._rocks is not None:
            open_windows = meta.get("open")
            self._rocks.open_restored = open_windows if type(open_windows) is int else None

    def _load_changes(self, watermark: int, keys: list[tuple[str, Any]]) -> None:
        rocks = self._rocks
        if rocks is None:
            present = [(key, value) for key, value in keys if value is not None]
            states = [(key, value["state"]) for key, value in present if value["state"] is not None]
            self._timers.restore_keys(watermark, [(key, value["timers"]) for key, value in present])
            self.load_keys(states)
            return
        # The rocksdb backend: the store holds the state and the timers up to where the
        # entries start (empty, or a local checkpoint); they are applied onto it.
        self._apply_onto_store(watermark, keys)
        restored = rocks.open_restored
        if restored is None:  # a checkpoint that did not count them: count them here
            restored = sum(len(state.contents) for _, state in self._keys.items())
        self._open = restored
        rocks.open_restored = None

    def apply_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        """The rocksdb backend's restore in batches
        (:class:`~service.operators.base.AppliesChanges`), so a restore from the changelog
        never holds more than a batch of a partition's keys as objects (read into one
        dict, 4.3M session keys took 8 GB): each key's newest entry of the batch applied
        onto the store, the batches coming in the changelog's order. The open windows
        count is the newest metadata's (every checkpoint written with the rocksdb
        backend counts them)."""
        rocks = self._rocks
        if rocks is None:
            raise WindowStateError("apply_changes needs the rocksdb backend's state maps")
        watermark, keys = self._newest_changes(entries)
        self._apply_onto_store(watermark, keys)
        if rocks.open_restored is not None:
            self._open = rocks.open_restored
        self._dirty.clear()

    def _apply_onto_store(self, watermark: int, keys: list[tuple[str, Any]]) -> None:
        """These keys' newest entries onto the store, each key's timers replacing its
        stored ones (no other key's is read)."""
        rocks = self._rocks
        assert rocks is not None
        cache = self._keys
        timers: list[tuple[str, Any]] = []
        for key, value in keys:
            data = None if value is None else value["state"]
            state = None if data is None else decode_key_state(data, self._merging)
            if state is None or state.is_empty():
                cache.pop(key)
            else:
                cache[key] = state
            timers.append((key, None if value is None else value["timers"]))
        rocks.service.restore_keys(watermark, timers)

    def load_keys(self, items: Iterable[tuple[str, dict[str, Any]]]) -> None:
        rocks = self._rocks
        if rocks is None:
            self._keys = {}
        else:  # the rocksdb backend: the store's state replaced (the timers already were)
            rocks.open_restored = None
            self._keys.clear()
        self._open = 0
        for key, data in items:
            state = decode_key_state(data, self._merging)
            if not state.is_empty():
                self._keys[key] = state
                self._open += len(state.contents)
