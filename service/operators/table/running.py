"""The running aggregate: a keyed aggregate with no window, emitted as an upsert stream.

What a SQL ``GROUP BY`` without a window is (Flink's ``GroupAggregate`` with mini-batch,
Kafka Streams' ``KGroupedStream.aggregate``): each key's accumulator takes every record
of the key, for ever (or until ``state_ttl_ms``). The accumulators are the window
operators': one :class:`~service.operators.window.aggregations.AggregationPlan`, its
update compiled into this operator's batch loop, so an aggregate is written once.

Results (docs/pipeline-spec.md, "Running aggregates"):

- **Mini-batch.** A record only marks its key dirty. A key emits at most once per
  ``emit_interval_ms`` of processing time, with its newest value: one processing-time
  tick per partition (the runtime's one scheduler of the partition, through
  :meth:`next_processing_time`), never a timer per key. Under exactly-once delivery
  (``emit_at_checkpoint``) the dirty keys are emitted at the checkpoint instead
  (:meth:`before_checkpoint`), into the transaction that commits the state they leave.
  The watermark ``MAX`` (the end of bounded input) emits every dirty key.
- **Upserts.** Each emission is an :class:`~service.operators.base.Upsert`: ``id``
  ``<pipeline>|<key>``, ``seq`` the key's emissions before it (0, 1, 2, ...), checkpointed
  with the accumulator, so a restore goes on from where the checkpoint was.
- **State TTL**, Flink's: processing time. A key no record touched for ``state_ttl_ms``
  is dropped and emits a delete (``Upsert.result`` None: a tombstone), if it ever
  emitted. Its last touch is taken at the tick after the record (so a key lives between
  ``state_ttl_ms`` and ``state_ttl_ms + emit_interval_ms`` after its last record), and
  the keys are kept in the order of their last touch, so a tick looks only at the keys
  that expire. A key that comes back after its delete is a new row: its ``seq`` starts
  at 0 again.

Per key, the accumulator is one flat list: three slots of its own (the next ``seq``,
the largest event timestamp folded in, the processing time of its last touch) and the
plan's. A checkpoint writes each key changed since the last one (``"k" + key``: the
list, whether it is dirty, whether it was touched since the last tick) and the
metadata last.

**The rocksdb state backend** (a :class:`~service.core.state_cache.StateMaps` given): the
accumulators are the named map ``"keys"``, in front of the partition's RocksDB, changed
in place and marked dirty right after. With a state TTL the order of last touch cannot be
the map's (most keys are not in memory), so expiry finds its keys through an index on
disk: the named map ``"touches"``, one entry per tick that took touches (the tick's time
-> the keys it stamped, in the order they were touched); in memory only the sorted list
of those ticks (one int per tick within the TTL, not per key). A tick expires the
entries of the ticks at or before ``now - state_ttl_ms``: each key listed there whose
last touch is still that tick is deleted, one touched again since (it is listed at a
later tick too) is skipped, and the entry goes. An operator built on a store reads the
index's ticks (a store with keys and no index, a TTL added since, has every key indexed
by its last touch once); a restore, streamed (:meth:`apply_changes`) or not, lists the
changelog tail's keys at their last touch (a key already listed is listed twice: the
second finds it gone).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from service.core.state_cache import StateCache, StateMaps
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP, Clock, SystemClock
from service.operators.base import Collector, InputRecord, OperatorGauges, Upsert
from service.operators.query import in_range
from service.operators.table.changes import newest_entries
from service.operators.window.aggregations import AggregationPlan, parse_aggregations
from service.operators.window.common import reject_bad_value
from service.operators.window.errors import WindowConfigError, WindowStateError

__all__ = [
    "ACC_BASE",
    "DEFAULT_EMIT_INTERVAL_MS",
    "SEQ_SLOT",
    "TS_SLOT",
    "RunningAggregateConfig",
    "RunningAggregateOperator",
]

DEFAULT_EMIT_INTERVAL_MS = 1000
SNAPSHOT_VERSION = 1
KEY_PREFIX = "k"
META_ENTRY = "\u0000meta"
KEYS_MAP = "keys"
"""The rocksdb backend's named map of the accumulators."""
TOUCHES_MAP = "touches"
"""With a state TTL, the rocksdb backend's index: a tick's time -> the keys it stamped."""

SEQ_SLOT = 0
"""Slot: the key's next ``seq`` (its emissions so far)."""
TS_SLOT = 1
"""Slot: the largest event timestamp folded into the key."""
SEEN_SLOT = 2
"""Slot: the processing time of the tick that last saw a record of the key (TTL)."""
ACC_BASE = 3
"""The first slot of the aggregations' own state (the subclass over a table adds its own
from here)."""


@dataclass(frozen=True, slots=True)
class RunningAggregateConfig:
    """Everything a running aggregate needs; checked here, once."""

    pipeline: str
    aggregations: Mapping[str, Any]
    emit_interval_ms: int = DEFAULT_EMIT_INTERVAL_MS
    state_ttl_ms: int | None = None
    """Processing time a key may go without a record before it is deleted; None: never."""
    on_bad_value: str = "dead_letter"
    emit_at_checkpoint: bool = False
    """Exactly-once delivery: dirty keys are emitted at the checkpoint, not per tick."""
    clock: Clock = field(default_factory=SystemClock)
    state_map: StateMaps | None = None
    """The rocksdb state backend: the keys' accumulators (and the TTL's index) in the
    named maps this makes, in front of the partition's RocksDB; None: in a dict (the
    memory backend)."""

    def __post_init__(self) -> None:
        interval = self.emit_interval_ms
        if type(interval) is not int or interval <= 0:
            raise WindowConfigError(f"emit_interval_ms must be an int > 0, not {interval!r}")
        ttl = self.state_ttl_ms
        if ttl is not None and (type(ttl) is not int or ttl <= 0):
            raise WindowConfigError(f"state_ttl_ms must be an int > 0, not {ttl!r}")
        if self.on_bad_value not in ("dead_letter", "skip"):
            raise WindowConfigError(
                f"on_bad_value must be 'dead_letter' or 'skip', not {self.on_bad_value!r}"
            )
        parse_aggregations(self.aggregations)


def _copy(acc: list[Any]) -> list[Any]:
    """A checkpoint's copy of an accumulator: its containers (collect's list,
    count_distinct's dict) copied, so later records do not change what was taken."""
    return [v.copy() if isinstance(v, list | dict) else v for v in acc]


class RunningAggregateOperator:
    """One partition's running aggregates (module docstring)."""

    __slots__ = (
        "_at_checkpoint",
        "_changed",
        "_clock",
        "_emit",
        "_expiry_tick",
        "_index",
        "_interval",
        "_keys",
        "_next_tick",
        "_pending",
        "_prefix",
        "_process",
        "_skip_bad",
        "_ticks",
        "_touch_ticks",
        "_touched",
        "_ttl",
        "_watermark",
        "collector",
        "plan",
    )

    def __init__(self, config: RunningAggregateConfig) -> None:
        self.collector = Collector()
        self.plan = AggregationPlan(parse_aggregations(config.aggregations), ACC_BASE)
        self._clock = config.clock
        self._interval = config.emit_interval_ms
        self._ttl = config.state_ttl_ms
        self._at_checkpoint = config.emit_at_checkpoint
        self._skip_bad = config.on_bad_value == "skip"
        self._prefix = f"{config.pipeline}|"
        maps = config.state_map
        self._keys: Any = {} if maps is None else self._key_map(maps)
        """Key -> accumulator (a dict, or with the rocksdb backend a
        :class:`~service.core.state_cache.StateCache`); with a TTL, a dict is in the
        order of the keys' last touch."""
        self._index: StateCache | None = (
            None if maps is None or self._ttl is None else maps(TOUCHES_MAP)
        )
        """The rocksdb backend with a TTL: a tick's time (text) -> the keys it stamped."""
        self._touch_ticks: list[int] = []
        """The rocksdb backend with a TTL: the times of the ticks in the index, sorted."""
        if self._index is not None:
            self._read_index()  # what the store holds (a local checkpoint's, or nothing)
        self._pending: dict[str, None] = {}
        """The dirty keys, in the order they became dirty (an ordered set)."""
        self._touched: dict[str, None] = {}
        """With a TTL: keys with a record since the last tick (their touch is taken then)."""
        self._changed: set[str] = set()
        """Keys emitted, touched or deleted since the last checkpoint (besides the dirty)."""
        self._next_tick: int | None = None
        self._expiry_tick = False
        """Whether the next tick is only a key's expiry (records bring it closer)."""
        self._ticks = [0, 0]
        """Ticks scheduled and fired (the processing-time timer counts)."""
        self._watermark = MIN_TIMESTAMP
        self._process = self._compile()
        self._emit = self._compile_emit()

    def _key_map(self, maps: StateMaps) -> StateCache:
        """The rocksdb backend's map of the keys' accumulators."""
        return maps(KEYS_MAP)

    def _from_entry(self, acc: list[Any]) -> list[Any]:
        """A key's accumulator in memory from its checkpoint entry's ``acc`` (a copy)."""
        return _copy(acc)

    def _from_decoded(self, acc: list[Any]) -> list[Any]:
        """:meth:`_from_entry` of an ``acc`` decoded for this call (taken as is)."""
        return acc

    # -- the batch loop ------------------------------------------------------------------
    def _compile(self) -> Callable[[Sequence[InputRecord]], None]:
        """The per-record loop, generated as the fast window path's is: the plan's field
        reads and updates inline, every name a local (a default argument)."""
        plan = self.plan
        body = "        "
        lines = [
            "def process(records, _keys=_keys, _pending=_pending, _touched=_touched):",
            "    for key, ts, value, _position, source in records:",
            *plan.fetch_lines("value", body),
            *plan.reject_lines(body, ["if _reject(key, value, source):", "    continue"]),
            f"{body}acc = _keys.get(key)",
            f"{body}if acc is None:",
            f"{body}    acc = _keys[key] = {plan.initial_source('0, ts, 0')}",
            f"{body}elif ts > acc[{TS_SLOT}]:",
            f"{body}    acc[{TS_SLOT}] = ts",
            *plan.update_lines("acc", "ts", body),
            f"{body}_pending[key] = None",
        ]
        if not isinstance(self._keys, dict):  # changed in place: the cache must know
            lines.append(f"{body}_keys.mark_dirty(key)")
        if self._ttl is not None:
            lines.append(f"{body}_touched[key] = None")
        namespace = dict(plan.namespace)
        namespace.update(
            _keys=self._keys,
            _pending=self._pending,
            _touched=self._touched,
            _reject=self._reject,
        )
        exec(compile("\n".join(lines), "<running-aggregate>", "exec"), namespace)
        function: Callable[[Sequence[InputRecord]], None] = namespace["process"]
        return function

    def _compile_emit(self) -> Callable[[Mapping[str, None], Callable[[Upsert], None]], None]:
        """``emit(keys, append)``: each key's upsert, its ``seq`` counted, its result built
        inline (the plan's result display, as the fast window path's firing does)."""
        display, namespace = self.plan.result_source("acc")
        lines = [
            "def emit(pending, append, _keys=_keys, _Upsert=_Upsert, _prefix=_prefix):",
            "    for key in pending:",
            "        acc = _keys[key]",
            f"        seq = acc[{SEQ_SLOT}]",
            f"        acc[{SEQ_SLOT}] = seq + 1",
            f"        append(_Upsert(_prefix + key, key, {display}, seq, acc[{TS_SLOT}]))",
        ]
        if not isinstance(self._keys, dict):
            lines.append("        _keys.mark_dirty(key)")
        namespace = dict(namespace)
        namespace.update(_keys=self._keys, _Upsert=Upsert, _prefix=self._prefix)
        exec(compile("\n".join(lines), "<running-aggregate-emit>", "exec"), namespace)
        function: Callable[[Mapping[str, None], Callable[[Upsert], None]], None] = namespace["emit"]
        return function

    def _reject(self, key: str, value: Any, source: Any) -> bool:
        return reject_bad_value(self.plan, self.collector, self._skip_bad, key, value, source)

    def process_batch(self, records: Sequence[InputRecord]) -> None:
        self._process(records)
        if self._next_tick is None:
            if self._needs_tick():
                self._schedule(self._clock.now_ms())
        elif self._expiry_tick:  # records came: the next tick is an interval away
            self._schedule(self._clock.now_ms())

    # -- time ----------------------------------------------------------------------------
    @property
    def current_watermark(self) -> int:
        return self._watermark

    def advance_watermark(self, watermark: int) -> None:
        """Event time changes no running aggregate; the end of input (``MAX``) emits
        every dirty key."""
        if watermark > self._watermark:
            self._watermark = watermark
            if watermark == MAX_TIMESTAMP:
                self._emit_pending()

    def advance_processing_time(self, now: int) -> None:
        """The tick: emit the dirty keys (unless at checkpoints), take the touches and
        expire idle keys (with a TTL), then schedule the next tick if there is work."""
        tick = self._next_tick
        if tick is None or now < tick:
            return
        self._next_tick = None
        self._ticks[1] += 1
        if not self._at_checkpoint:
            self._emit_pending()
        if self._ttl is not None:
            self._expire(now, self._ttl)
        if self._needs_tick():
            self._schedule(now)

    def next_processing_time(self) -> int | None:
        return self._next_tick

    def _needs_tick(self) -> bool:
        if self._pending and not self._at_checkpoint:
            return True
        return self._ttl is not None and bool(self._keys)

    def _schedule(self, now: int) -> None:
        """The next tick: an interval on while keys are dirty or touched, else (a TTL
        only) when the least recently touched key expires."""
        due = now + self._interval
        if self._touched or (self._pending and not self._at_checkpoint) or self._ttl is None:
            self._expiry_tick = False
        else:
            if self._index is None:
                first = next(iter(self._keys.values()))[SEEN_SLOT]
            elif self._touch_ticks:
                first = self._touch_ticks[0]
            else:
                return  # nothing to expire (nor any key that could)
            due = max(now, first + self._ttl)
            self._expiry_tick = True
        if self._next_tick is not None and self._next_tick <= due:
            return
        self._next_tick = due
        self._ticks[0] += 1

    def before_checkpoint(self) -> None:
        """Called by the runtime right before :meth:`snapshot_changes`, its outputs drained
        into the checkpoint's outputs: under exactly-once, the dirty keys are emitted here."""
        if self._at_checkpoint:
            self._emit_pending()

    # -- emitting ------------------------------------------------------------------------
    def _emit_pending(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._emit(pending, self.collector.results.append)
        self._changed.update(pending)
        pending.clear()

    def _expire(self, now: int, ttl: int) -> None:
        if self._index is not None:
            self._expire_indexed(now, ttl, self._index)
            return
        keys = self._keys
        touched = self._touched
        for key in touched:  # to the end of the order, touched now
            acc = keys.pop(key)
            acc[SEEN_SLOT] = now
            keys[key] = acc
        self._changed.update(touched)
        touched.clear()
        cutoff = now - ttl
        expired: list[str] = []
        for key, acc in keys.items():
            if acc[SEEN_SLOT] > cutoff:
                break
            expired.append(key)
        if not expired:
            return
        append = self.collector.results.append
        prefix = self._prefix
        pending = self._pending
        for key in expired:
            acc = keys.pop(key)
            pending.pop(key, None)
            if acc[SEQ_SLOT]:  # it was emitted: delete it
                append(Upsert(prefix + key, key, None, acc[SEQ_SLOT], acc[TS_SLOT]))
        self._changed.update(expired)

    def _expire_indexed(self, now: int, ttl: int, index: StateCache) -> None:
        """:meth:`_expire` with the rocksdb backend: the touches stamped and listed under
        this tick in the index, then the index's ticks at or before ``now - ttl`` taken
        (module docstring)."""
        keys = self._keys
        touched = self._touched
        ticks = self._touch_ticks
        if touched:
            stamped: list[str] = []
            for key in touched:
                acc = keys.get(key)
                if acc is not None:  # else deleted since (a table's group with no rows)
                    acc[SEEN_SLOT] = now
                    keys.mark_dirty(key)
                    stamped.append(key)
            self._changed.update(touched)
            touched.clear()
            if stamped:
                self._list_touches(now, stamped)
        cutoff = now - ttl
        due = bisect_right(ticks, cutoff)
        if not due:
            return
        append = self.collector.results.append
        prefix = self._prefix
        pending = self._pending
        expired: list[str] = []
        for tick in ticks[:due]:
            for key in index.pop(str(tick)) or ():
                acc = keys.get(key)
                if acc is None or acc[SEEN_SLOT] != tick:
                    continue  # gone, or touched again since (listed at that tick too)
                keys.pop(key)
                pending.pop(key, None)
                expired.append(key)
                if acc[SEQ_SLOT]:  # it was emitted: delete it
                    append(Upsert(prefix + key, key, None, acc[SEQ_SLOT], acc[TS_SLOT]))
        del ticks[:due]
        self._changed.update(expired)

    def _list_touches(self, tick: int, keys: list[str]) -> None:
        """Add ``keys`` to the index's entry of ``tick`` (the rocksdb backend's TTL)."""
        index = self._index
        assert index is not None
        name = str(tick)
        listed = index.get(name)
        if listed is None:
            index[name] = keys
            ticks = self._touch_ticks
            if not ticks or tick > ticks[-1]:
                ticks.append(tick)
            else:
                insort(ticks, tick)
        else:
            listed.extend(keys)
            index.mark_dirty(name)

    # -- metrics -------------------------------------------------------------------------
    def gauges(self) -> OperatorGauges:
        return OperatorGauges(
            event_timers=0,
            processing_timers=0 if self._next_tick is None else 1,
            windows_open=0,
            keys=len(self._keys),
        )

    def timer_counts(self) -> dict[str, tuple[int, int, int]]:
        return {"event": (0, 0, 0), "processing": (self._ticks[0], self._ticks[1], 0)}

    def stats(self) -> dict[str, Any]:
        return {"keys": len(self._keys), "invalid_values": self.plan.invalid_counts()}

    # -- pull queries (operators/query.py) ------------------------------------------------
    query_kind = "aggregate"

    def _row(self, acc: list[Any]) -> dict[str, Any] | None:
        """A key's row: its aggregations' values now (emitted or not)."""
        return {
            "result": self.plan.result(acc),
            "timestamp": acc[TS_SLOT],
            "emitted": acc[SEQ_SLOT],
        }

    def query_key(self, key: str) -> dict[str, Any] | None:
        acc = self._keys.get(key)
        return None if acc is None else self._row(acc)

    def scan(
        self, from_key: str | None, to_key: str | None, limit: int
    ) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        keys = self._keys
        for key in sorted(key for key in keys if in_range(key, from_key, to_key)):
            if len(out) >= limit:
                break
            row = self._row(keys[key])
            if row is not None:
                out.append((key, row))
        return out

    # -- checkpoints ---------------------------------------------------------------------
    def _entry(self, key: str) -> dict[str, Any] | None:
        keys = self._keys  # the rocksdb backend's: an evicted key is not read back in
        acc = keys.get(key) if type(keys) is dict else keys.peek(key)
        if acc is None:
            return None
        return {"acc": _copy(acc), "dirty": key in self._pending, "touched": key in self._touched}

    def _meta(self) -> dict[str, Any]:
        return {
            "version": SNAPSHOT_VERSION,
            "watermark": self._watermark,
            "invalid": list(self.plan.invalid),
        }

    def snapshot(self) -> dict[str, Any]:
        return {
            "version": SNAPSHOT_VERSION,
            "meta": self._meta(),
            "keys": {key: self._entry(key) for key in list(self._keys.keys())},
        }

    def state_maps(self) -> list[StateCache]:
        """The caches the runtime flushes at each checkpoint (the rocksdb backend)."""
        if isinstance(self._keys, dict):
            return []
        return [self._keys] if self._index is None else [self._keys, self._index]

    def restore(self, snapshot: dict[str, Any]) -> None:
        if snapshot.get("version") != SNAPSHOT_VERSION:
            raise WindowStateError(
                f"unknown running aggregate snapshot version {snapshot.get('version')!r}"
            )
        if not isinstance(self._keys, dict):  # the whole state: the maps emptied first
            for cache in self.state_maps():
                cache.clear()
        self._load(snapshot["meta"], list(snapshot["keys"].items()))

    def snapshot_changes(self) -> dict[str, Any]:
        changed = self._changed
        changed.update(self._pending)
        changed.update(self._touched)
        changes: dict[str, Any] = {KEY_PREFIX + key: self._entry(key) for key in changed}
        changed.clear()
        changes[META_ENTRY] = self._meta()
        return changes

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        self._load(*newest_entries(entries, KEY_PREFIX, META_ENTRY, WindowStateError))

    def apply_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        """The rocksdb backend's restore, in batches
        (:class:`~service.operators.base.AppliesChanges`): each entry applied onto the
        keys the cache and its store hold, in order; an entry's value is taken as is (it
        was decoded for this call). With a state TTL each key is also listed in the index
        at its last touch (the index's ticks were read when the operator was built)."""
        cache = self._keys
        if isinstance(cache, dict):
            raise WindowStateError("apply_changes needs the rocksdb backend's state map")
        pending = self._pending
        touched = self._touched
        index = self._index
        decoded = self._from_decoded
        cut = len(KEY_PREFIX)
        for name, entry in entries:
            if name == META_ENTRY:
                self._load_meta(entry)
            elif not name.startswith(KEY_PREFIX):
                raise WindowStateError(f"unknown checkpoint entry {name!r}")
            elif entry is None:
                key = name[cut:]
                cache.pop(key)
                pending.pop(key, None)
                touched.pop(key, None)
            else:
                key = name[cut:]
                # most often the value the store holds already: settled, not written again
                acc = cache.settle(key, decoded(entry["acc"]))
                if entry["dirty"]:
                    pending[key] = None
                else:
                    pending.pop(key, None)
                if index is not None:
                    if entry["touched"]:
                        touched[key] = None
                    else:
                        touched.pop(key, None)
                    if acc[SEEN_SLOT]:  # stamped (else touched, stamped at a tick)
                        self._list_touches(acc[SEEN_SLOT], [key])
        self._next_tick = None
        if self._needs_tick():
            self._schedule(self._clock.now_ms())

    def _load_meta(self, meta: dict[str, Any] | None) -> None:
        """The operator's checkpointed metadata (None: none, a fresh operator's)."""
        if meta is None:
            self._watermark = MIN_TIMESTAMP
            self.plan.invalid[:] = [0] * len(self.plan.invalid)
            return
        if meta.get("version") != SNAPSHOT_VERSION:
            raise WindowStateError(
                f"unknown running aggregate checkpoint version {meta.get('version')!r}"
            )
        self._watermark = int(meta["watermark"])
        invalid = [int(n) for n in meta.get("invalid", [])]
        if len(invalid) == len(self.plan.invalid):
            self.plan.invalid[:] = invalid

    def _read_index(self) -> None:
        """The rocksdb backend with a TTL: the index's ticks from the store, and, with
        keys there but no index (a TTL added since the store was written), every key
        listed at its last touch (0 if it never had one: it expires at the first tick,
        as a dict's restore orders it first)."""
        index = self._index
        assert index is not None
        self._touch_ticks[:] = sorted(int(name) for name in index)
        if self._touch_ticks or not len(self._keys):
            return
        by_tick: dict[int, list[str]] = {}
        for key, acc in self._keys.items():
            by_tick.setdefault(acc[SEEN_SLOT], []).append(key)
        for tick in sorted(by_tick):
            self._list_touches(tick, by_tick[tick])

    def _load(self, meta: dict[str, Any] | None, keys: list[tuple[str, Any]]) -> None:
        if meta is not None:
            self._load_meta(meta)
        # In place: the generated loop holds these.
        self._pending.clear()
        self._touched.clear()
        self._changed.clear()
        if not isinstance(self._keys, dict):
            # The rocksdb backend: the store holds the state up to where the entries
            # start (empty, or a local checkpoint): they are applied onto it.
            cache = self._keys
            index = self._index
            if index is not None:
                self._read_index()
            for key, entry in keys:
                if entry is None:
                    cache.pop(key)
                else:
                    acc = cache[key] = self._from_entry(entry["acc"])
                    if entry["dirty"]:
                        self._pending[key] = None
                    if index is not None:
                        if entry["touched"]:
                            self._touched[key] = None
                        if acc[SEEN_SLOT]:  # stamped (else touched, stamped at a tick)
                            self._list_touches(acc[SEEN_SLOT], [key])
            self._next_tick = None
            if self._needs_tick():
                self._schedule(self._clock.now_ms())
            return
        self._keys.clear()
        present = [(key, entry) for key, entry in keys if entry is not None]
        present.sort(key=lambda item: item[1]["acc"][SEEN_SLOT])  # the order of last touch
        for key, entry in present:
            self._keys[key] = self._from_entry(entry["acc"])
        for key, entry in keys:  # the dirty keys in the order the checkpoint wrote them
            if entry is not None and entry["dirty"]:
                self._pending[key] = None
            if entry is not None and entry["touched"]:
                self._touched[key] = None
        self._next_tick = None
        if self._needs_tick():
            self._schedule(self._clock.now_ms())
