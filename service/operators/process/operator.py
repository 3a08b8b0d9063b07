"""The keyed process operator: runs a KeyedProcessFunction over one partition.

What it guarantees (semantics.md section 6, contract.md "Result records"):

- Records are processed in order with ``ctx.key``/``ctx.timestamp`` set to the record's;
  timers fire through :class:`~service.core.timers.TimerService` (namespace ``None``) with
  the current key set to the timer's key.
- Output timestamps: a record's outputs carry the record's timestamp; an event-time
  timer's outputs carry the timer's timestamp; a processing-time timer's outputs carry
  ``None`` (as Flink, which erases the timestamp there): the sink then lets Kafka stamp
  them at produce time, since no event time is known.
- Output ids are deterministic: ``"{pipeline}|{key}|{position}|{n}"`` for the ``n``-th
  output (from 0) of the record at input offset ``position``, and
  ``"{pipeline}|{key}|te{ts}|{n}"`` / ``"{pipeline}|{key}|tp{ts}|{n}"`` for the ``n``-th
  output of the event-/processing-time timer at ``ts`` of that key. Timers are unique per
  ``(ts, key)`` per domain while queued. A timer that ``on_timer`` registers again at its
  own time fires again in the same advance and gets ``te{ts}r{k}`` for its ``k``-th
  repeat; as the repeat happens within the one advance in every run (a checkpoint never
  splits an advance), reprocessing the same input after a restore yields the same ids.
  A timer registered again at a time that already fired in the past (from
  ``process_element``, or from ``on_timer`` at an earlier time) can get that firing's ids
  again, since whether the two firings share an advance depends on when watermarks
  arrived: see the README.
- An exception in user code goes to ``collector.failed`` as a :class:`FailedRecord`
  (reason ``user_function_error``, the exception and a short traceback; the record's
  ``source``, or ``None`` and a detail naming the timer) and the operator goes on.
  Whatever the call changed or emitted before raising is kept.
- TTL state is swept at the start of every batch, watermark and processing-time advance
  (see :mod:`state`), reading the clock once per call.

Checkpoints: :meth:`snapshot`/:meth:`restore` carry everything as plain data;
:meth:`snapshot_changes` writes one entry per key touched since the last call (its state,
TTL expiries and timers, or ``None`` when it has none left) plus the ``"\\x00meta"`` entry
(watermark, counters, state declarations). A key that itself starts with NUL is written
with one more leading NUL so it can never collide with the meta entry.

With the rocksdb state backend (a :class:`~service.core.state_cache.StateMaps` given),
the states are named maps in front of the partition's RocksDB (:mod:`.state`), and the
timers stay on the heap: a checkpoint also writes each changed key's timers and TTL
expiries to the named map ``"keys"`` (nothing for a key with neither), flushed with the
states, so a restore reads that map whole (the heap and the expiries are in memory
anyway) and applies the changelog's tail onto the maps and it.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from operator import itemgetter
from typing import Any, Final, cast

from service.core.state_cache import StateCache, StateMaps
from service.core.time import MIN_TIMESTAMP, Clock, TimeDomain
from service.core.timers import TimerService
from service.operators.base import Collector, FailedRecord, InputRecord, OperatorGauges
from service.operators.process.context import Context, Out
from service.operators.process.function import KeyedProcessFunction
from service.operators.process.jsonsafe import copy_plain
from service.operators.process.state import StateKind, StateStore
from service.operators.query import in_range

META_ENTRY: Final = "\x00meta"
"""Name of the incremental-checkpoint entry that holds the operator-wide data."""
KEYS_MAP: Final = "keys"
"""The rocksdb backend's named map of each key's timers and TTL expiries."""
_NO_TIMERS: Final[dict[str, list[Any]]] = {"event": [], "processing": []}

SNAPSHOT_VERSION: Final = 1
USER_FUNCTION_ERROR: Final = "user_function_error"

_MAX_MESSAGE = 300
_MAX_FRAMES = 3


@dataclass(slots=True)
class ProcessCounters:
    """Cumulative counts since the operator (or the checkpoint it restored) started."""

    records: int = 0
    outputs: int = 0
    failed: int = 0
    event_timers_fired: int = 0
    processing_timers_fired: int = 0
    state_expired: int = 0


def _entry_name(key: str) -> str:
    return "\x00" + key if key.startswith("\x00") else key


def _entry_key(name: str) -> str:
    return name[1:] if name.startswith("\x00") else name


def failure_detail(exc: BaseException, where: str) -> str:
    """``"<where>: <Type>: <message> (at file:line in func < ...)"``, short and single-line."""
    message = str(exc).replace("\n", " ")
    if len(message) > _MAX_MESSAGE:
        message = message[:_MAX_MESSAGE] + "..."
    frames = traceback.extract_tb(exc.__traceback__)[1:]  # drop the operator's own frame
    trail = " < ".join(
        f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}"
        for f in reversed(frames[-_MAX_FRAMES:])
    )
    at = f" (at {trail})" if trail else ""
    return f"{where}: {type(exc).__name__}: {message}{at}"


class KeyedProcessOperator:
    """One keyed process function over one partition; implements ``Operator``."""

    __slots__ = (
        "_clock",
        "_ctx",
        "_dirty",
        "_fired",
        "_function",
        "_kept",
        "_out",
        "_pipeline",
        "_records_path",
        "_state",
        "_timers",
        "collector",
        "counters",
    )

    def __init__(
        self,
        pipeline: str,
        function: KeyedProcessFunction,
        clock: Clock,
        state_maps: StateMaps | None = None,
    ) -> None:
        self._pipeline = pipeline
        self._function = function
        self._clock = clock
        self.collector = Collector()
        self.counters = ProcessCounters()
        self._timers: TimerService[str, None] = TimerService(
            self._on_event_time, self._on_processing_time
        )
        self._kept: StateCache | None = None if state_maps is None else state_maps(KEYS_MAP)
        """The rocksdb backend: each key's timers and expiries, as of the last checkpoint."""
        self._ctx = Context(self._timers, clock, state_maps)
        self._state = self._ctx.state_backend
        self._state.now = clock.now_ms()
        self._out = Out(self._ctx, self.collector, pipeline)
        self._dirty: set[str] = set()
        # (key, ts) -> how many times it fired in the advance running now (ids of repeats)
        self._fired: dict[tuple[str, int], int] = {}
        function.open(self._ctx)
        self._records_path = function.process_records  # set by open(), if at all

    @property
    def pipeline(self) -> str:
        return self._pipeline

    @property
    def function(self) -> KeyedProcessFunction:
        return self._function

    @property
    def current_watermark(self) -> int:
        return self._timers.current_watermark

    # -- input --------------------------------------------------------------------------
    def process_batch(self, records: Sequence[InputRecord]) -> None:
        self._sweep()
        ctx = self._ctx
        process = self._function.process_element
        out = self._out
        results = self.collector.results
        before = len(results)
        ctx.time_domain = None
        # Every record's key is changed (checkpoints write it): marked in one C loop here
        # rather than by a call per record below.
        self._dirty.update(map(itemgetter(0), records))
        if self._records_path is not None:
            self._records_path(records, self._record_failed)
            self.counters.records += len(records)
            self.counters.outputs += len(results) - before
            return
        for key, timestamp, value, position, source in records:
            ctx.key = key
            ctx.timestamp = timestamp
            ctx._position = position
            ctx._n = 0
            try:
                process(value, ctx, out)
            except Exception as exc:
                self._fail(source, key, exc, f"process_element(offset {position})")
        ctx.key = None
        ctx.timestamp = None
        self.counters.records += len(records)
        self.counters.outputs += len(results) - before

    def advance_watermark(self, watermark: int) -> None:
        self._sweep()
        results = self.collector.results
        before = len(results)
        fired = self._timers.advance_watermark(watermark)
        self._fired.clear()
        self._reset_ctx()
        self.counters.event_timers_fired += fired
        self.counters.outputs += len(results) - before

    def advance_processing_time(self, now: int) -> None:
        self._sweep()
        results = self.collector.results
        before = len(results)
        fired = self._timers.advance_processing_time(now)
        self._fired.clear()
        self._reset_ctx()
        self.counters.processing_timers_fired += fired
        self.counters.outputs += len(results) - before

    def next_processing_time(self) -> int | None:
        return self._timers.next_processing_time()

    def gauges(self) -> OperatorGauges:
        return OperatorGauges(
            event_timers=self._timers.event_timers,
            processing_timers=self._timers.processing_timers,
            windows_open=0,
            keys=self._state.keys_with_state(),
        )

    def timer_counts(self) -> dict[str, tuple[int, int, int]]:
        return self._timers.counts()

    # -- timers -------------------------------------------------------------------------
    def _on_event_time(self, timestamp: int, key: str, _namespace: None) -> None:
        # An event-time firing's output is stamped with the timer's time.
        self._on_timer(timestamp, key, TimeDomain.EVENT_TIME, timestamp, "te")

    def _on_processing_time(self, timestamp: int, key: str, _namespace: None) -> None:
        # A processing-time firing has no record timestamp (as in Flink).
        self._on_timer(timestamp, key, TimeDomain.PROCESSING_TIME, None, "tp")

    def _on_timer(
        self, timestamp: int, key: str, domain: TimeDomain, stamp: int | None, tag: str
    ) -> None:
        ctx = self._ctx
        ctx.key = key
        ctx.timestamp = stamp
        ctx.time_domain = domain
        token = (key, timestamp)
        repeat = self._fired.get(token, 0)
        self._fired[token] = repeat + 1
        ctx._position = f"{tag}{timestamp}r{repeat}" if repeat else f"{tag}{timestamp}"
        ctx._n = 0
        self._dirty.add(key)
        try:
            self._function.on_timer(timestamp, ctx, self._out)
        except Exception as exc:
            self._fail(None, key, exc, f"on_timer({domain.value}-time timer at {timestamp})")

    def _reset_ctx(self) -> None:
        ctx = self._ctx
        ctx.key = None
        ctx.timestamp = None
        ctx.time_domain = None

    def _record_failed(self, source: Any, key: str, exc: Exception, position: int) -> None:
        self._fail(source, key, exc, f"process_element(offset {position})")

    def _fail(self, source: Any, key: str, exc: Exception, where: str) -> None:
        self.counters.failed += 1
        self.collector.failed.append(
            FailedRecord(source, key, USER_FUNCTION_ERROR, failure_detail(exc, where))
        )

    def _sweep(self) -> None:
        """Move TTL time to the clock and drop expired state (once per call, not per record)."""
        self.counters.state_expired += self._state.sweep(self._clock.now_ms(), self._dirty)

    # -- full snapshots -----------------------------------------------------------------
    # -- pull queries (operators/query.py) ------------------------------------------------
    query_kind = "process"

    def _queryable(self) -> list[StateStore]:
        stores = self._state.stores
        names = self._function.queryable_state
        return [stores[name] for name in names if name in stores]

    def query_key(self, key: str) -> dict[str, Any] | None:
        """The key's queryable states (the function's ``queryable_state``) that hold a
        value, copied; an entry past its TTL counts as gone, swept or not. A map state is
        a JSON object (its keys as text)."""
        now = self._clock.now_ms()
        states: dict[str, Any] = {}
        for store in self._queryable():
            stored = store.data.get(key)
            if stored is None:
                continue
            if store.expiry is not None:
                deadline = store.expiry.get(key)
                if deadline is not None and deadline <= now:
                    continue
            if store.kind is StateKind.MAP:
                states[store.name] = {str(k): copy_plain(v) for k, v in stored.items()}
            else:
                states[store.name] = copy_plain(stored)
        return {"states": states} if states else None

    def scan(
        self, from_key: str | None, to_key: str | None, limit: int
    ) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        keys: set[str] = set()
        for store in self._queryable():
            keys.update(key for key in store.data if in_range(key, from_key, to_key))
        for key in sorted(keys):
            if len(out) >= limit:
                break
            found = self.query_key(key)
            if found is not None:
                out.append((key, found))
        return out

    def snapshot(self) -> dict[str, Any]:
        """Everything as plain data; values are shared with live state, so serialize it
        before the next call into the operator."""
        return {
            "version": SNAPSHOT_VERSION,
            "timers": self._timers.snapshot(),
            "state": self._state.snapshot(),
            "counters": asdict(self.counters),
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace everything with ``snapshot`` (deep-copied). Every restored key counts as
        changed, so an incremental log started after this is complete."""
        _check_version(snapshot.get("version"))
        self._state.restore(snapshot["state"])
        self._timers.restore(snapshot["timers"])
        self.counters = ProcessCounters(**snapshot.get("counters", {}))
        self._dirty = set()
        if self._kept is not None:
            self._kept.clear()  # the dirty keys below write theirs again
        for store in self._state.stores.values():
            self._dirty.update(store.data)
        for domain in (TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME):
            self._dirty.update(key for _, key, _ in self._timers.timers(domain))

    # -- incremental snapshots ----------------------------------------------------------
    def snapshot_changes(self) -> dict[str, Any]:
        """One entry per key touched since the last call, plus the meta entry.

        Why a scan of the queued timers instead of the timer service's per-key index
        (``track_keys``): the index costs two set operations per timer registration and
        deletion, on the per-record path, while a checkpoint is rare; one scan of every
        queued timer per checkpoint is what Flink's heap timers cost too (they are written
        in full). Every key whose timers changed is in ``_dirty``: timers are registered
        and deleted for the current key only, and firing marks the key.
        """
        keys = self._dirty
        self._dirty = set()
        timers = self._timers.snapshot_keys(keys) if keys else {}
        values, expiries = self._state.snapshot_keys(keys)
        entries: dict[str, Any] = {}
        for key in keys:
            key_values = values.get(key)
            key_timers = timers.get(key)
            if key_values or key_timers is not None:
                entries[_entry_name(key)] = {
                    "state": key_values or {},
                    "expiry": expiries.get(key) or {},
                    "timers": key_timers or {"event": [], "processing": []},
                }
            else:
                entries[_entry_name(key)] = None
        if self._kept is not None:
            self._keep(keys, timers, expiries)
        entries[META_ENTRY] = {
            "version": SNAPSHOT_VERSION,
            "watermark": self._timers.current_watermark,
            "counters": asdict(self.counters),
            "states": self._state.declarations(),
        }
        return entries

    def _keep(
        self,
        keys: Iterable[str],
        timers: dict[str, dict[str, list[list[Any]]]],
        expiries: dict[str, dict[str, int]],
    ) -> None:
        """The rocksdb backend, at a checkpoint: the changed keys' timers and expiries in
        the named map ``"keys"`` (flushed with the states right after)."""
        kept = self._kept
        assert kept is not None
        for key in keys:
            key_timers = timers.get(key)
            key_expiries = expiries.get(key)
            if key_timers is None and not key_expiries:
                kept.pop(key, None)
            else:
                kept[key] = {
                    "timers": key_timers or _NO_TIMERS,
                    "expiry": key_expiries or {},
                }

    def state_maps(self) -> list[StateCache]:
        """The rocksdb backend's named maps (the runtime flushes them at each checkpoint)."""
        if self._kept is None:
            return []
        stores = self._state.stores.values()
        return [self._kept, *(cast(StateCache, store.data) for store in stores)]

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        newest: dict[str, Any] = {}
        for name, value in entries:
            newest[name] = value
        meta = newest.pop(META_ENTRY, None) or {}
        _check_version(meta.get("version", SNAPSHOT_VERSION))
        if self._kept is not None:
            self._restore_onto_maps(meta, newest)
            return
        state_per_key: list[tuple[str, dict[str, Any], dict[str, int]]] = []
        timers_per_key: list[tuple[str, dict[str, list[list[Any]]]]] = []
        for name, entry in newest.items():
            if entry is None:
                continue
            key = _entry_key(name)
            state_per_key.append((key, entry["state"], entry.get("expiry", {})))
            timers_per_key.append((key, entry["timers"]))
        self._state.restore_keys(meta.get("states", {}), state_per_key)
        self._timers.restore_keys(int(meta.get("watermark", MIN_TIMESTAMP)), timers_per_key)
        self.counters = ProcessCounters(**meta.get("counters", {}))
        self._dirty = set()

    def _restore_onto_maps(self, meta: dict[str, Any], newest: dict[str, Any]) -> None:
        """The rocksdb backend: the named maps hold a checkpoint's state (a local one, or
        nothing); the changelog's entries after it (``newest``) are applied onto them,
        then the timers and expiries of every key are read from the map ``"keys"``."""
        kept = self._kept
        assert kept is not None
        per_key: list[tuple[str, dict[str, Any] | None]] = []
        for name, entry in newest.items():
            key = _entry_key(name)
            if entry is None:
                per_key.append((key, None))
                kept.pop(key, None)
                continue
            per_key.append((key, entry["state"]))
            timers = entry["timers"]
            expiry = entry.get("expiry") or {}
            if timers["event"] or timers["processing"] or expiry:
                kept[key] = {"timers": timers, "expiry": expiry}
            else:
                kept.pop(key, None)
        timers_per_key: list[tuple[str, dict[str, list[list[Any]]]]] = []
        expiries: dict[str, list[tuple[str, int]]] = {}
        for key, held in kept.items():
            timers_per_key.append((key, held["timers"]))
            for name, deadline in held["expiry"].items():
                expiries.setdefault(name, []).append((key, deadline))
        self._state.apply_keys(meta.get("states", {}), per_key, expiries)
        self._timers.restore_keys(int(meta.get("watermark", MIN_TIMESTAMP)), timers_per_key)
        self.counters = ProcessCounters(**meta.get("counters", {}))
        self._dirty = set()


def _check_version(version: object) -> None:
    if version != SNAPSHOT_VERSION:
        raise ValueError(
            f"keyed process snapshot version {version!r} is not supported "
            f"(expected {SNAPSHOT_VERSION})"
        )
