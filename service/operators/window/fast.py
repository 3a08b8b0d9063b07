"""The fast path: tumbling or sliding event-time windows, default trigger, aggregations.

This is the common configuration, and for it the per-record work is: find the window
start (for tumbling windows usually just a comparison with the previous record's
window), one dictionary lookup of the key in that start's windows, and the accumulator
update, inlined. The batch loop is generated once per operator (see aggregations.py for
why and how the generated code is kept safe). Everything that is not the plain case --
a window already at or past its ``max_ts`` (allowed-late or late records) -- leaves the
loop for :meth:`FastWindowOperator._slow_record`, which applies semantics.md section 5
rule by rule.

Why there are no timers: with the default trigger a window has two timers, the
trigger's at ``max_ts`` (registered when the window opens with ``max_ts > W``) and the
cleanup timer at ``max_ts + allowed_lateness`` (none when that saturates at MAX; with no
lateness the two are one timer). Neither is ever deleted early, and both depend only on
the window's start. So every window of one start has the same two timers, and the
windows of a start are kept together, ``{start: {key: accumulator}}``, whose inner
dict's insertion order is the order the windows were opened -- the order their timers
would have been registered, which is the order timers sharing a timestamp fire in. A
small heap holds, per start, its pending trigger and cleanup times, and
:meth:`FastWindowOperator.advance_watermark` pops whatever the new watermark reached, in
timestamp order, and fires (a generated loop per operator, :meth:`_compile_fire`) or
drops a whole start at once: the results, their order and their watermark are those of
one timer per (key, window), without the per-window timer registration, heap bucket and
callback. A cleanup emits nothing, so where one start's cleanup time equals another's
trigger time the order between the two does not matter (the heap keeps timestamp, then
start order). A window opened by the slow path with ``max_ts <= W`` fired on arrival
and just waits in its start's dict for the start's cleanup.

Timer metrics still describe those logical timers (``gauges().event_timers`` and
``timer_counts()["event"]``): a window opened with ``max_ts > W`` has registered its
trigger timer, every window its cleanup timer when that is below MAX and the lateness
is not zero; a start's timers fire together (``len`` of its dict). None are ever
deleted, so ``registered = fired + pending - pending at the last restore`` (as with
``TimerService.restore``, the timers a restore brings back are not new registrations),
read per metrics refresh in O(open starts); nothing is counted per record or window.

State: ``{start: {key: [seq, opened, *accumulator slots]}}``. ``seq`` numbers the
window's firings; ``opened`` numbers the windows in the order they were created, across
keys and starts. Per-key questions (snapshots, the key gauge) are answered from these
dicts: there are only a few open starts (about two for tumbling windows, size / slide + 1
for sliding ones, more with a long allowed lateness), and those questions come per
checkpoint or metrics refresh, never per record.

Why snapshots hold no timers: a window's timers follow from its start and the
watermark ``W``: the trigger timer iff ``max_ts > W``, the cleanup timer iff ``W <
cleanup < MAX``. Checkpoints write one small list per key: ``[[start, seq, opened,
*slots], ...]``, and a restore rebuilds every start's dict in ``opened`` order, so
the firing order after a restore is that of an uninterrupted run.

With the rocksdb state backend (``config.state_maps``), the accumulators live in a
:class:`~service.core.state_cache.StateCache` by key, ``{key: {start: [seq, opened,
*slots]}}`` (RocksDB holding the checkpoint's rows, :class:`FastWindowsCodec`), and each
start's dict holds only its keys, ``{key: None}``, in opened order: those are the logical
timers, which stay on the heap as with Flink's RocksDB backend and heap timers. The loop
reads a record's key once from the cache (RocksDB when it was evicted) and marks it dirty
after its update; a firing reads each key of the start back the same way, and where the
start goes as it fires, removes its window (the key once it has none). A restore applies
the changelog's entries onto the store (which holds the state up to where they start),
then reads every key's windows once to rebuild the starts' key sets. The generated loops
are other code for the cache, so the memory backend's loops are unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from heapq import heappop, heappush
from itertools import count
from typing import Any

from service.core.state_cache import StateCache
from service.core.time import MAX_TIMESTAMP
from service.operators.base import FireKind, InputRecord, OperatorGauges, WindowResult
from service.operators.query import first_keys

from .aggregate_kinds import AggKind
from .aggregations import AggregationPlan
from .assigners import SlidingAssigner, TumblingAssigner, Window
from .common import WindowOperatorBase
from .config import WindowOperatorConfig
from .errors import WindowConfigError, WindowStateError
from .keystate import KEY_PREFIX, copy_contents
from .triggers import EventTimeTrigger

_ON_TIME = FireKind.ON_TIME
_TRIGGER = 0
"""A due entry for a start's ``max_ts``: fire its windows (and drop them, if no lateness)."""
_CLEANUP = 1
"""A due entry for a start's cleanup time: drop its windows."""

_RESULT_FIELDS = ("id", "key", "start", "end", "result", "fire", "seq", "watermark")
_FIELDS = tuple(field.name for field in dataclasses.fields(WindowResult))
PLAIN_RESULT = _FIELDS == _RESULT_FIELDS and not hasattr(WindowResult, "__post_init__")
"""Whether the firing loop may make a :class:`WindowResult` by storing its slots.

A slots dataclass's ``__init__`` only stores its fields, and calling it is a Python call
(about a third of the cost of a firing); ``object.__new__`` plus slot stores is the same
object. Should WindowResult ever get other fields or a ``__post_init__``, the loop calls
the class instead (same results, a little slower).
"""

DueEntry = tuple[int, int, int]
"""``(time, start, _TRIGGER or _CLEANUP)``."""

FireStart = Callable[[dict[str, list[Any]], int, list[Any], int], None]
"""``fire(windows_of_start, start, results, watermark)``: the on-time firings of a start."""

FireCached = Callable[[dict[str, None], int, list[Any], int, bool], None]
"""With the rocksdb backend: ``fire(keys_of_start, start, results, watermark, drop)``, the
windows read from the cache (and, with ``drop``, removed from it)."""


class FastWindowsCodec:
    """A key's windows with the rocksdb backend, ``{start: [seq, opened, *slots]}``, as
    the store holds them: the checkpoint's rows, ``[[start, seq, opened, *slots], ...]``
    by start (a :class:`~service.core.state_cache.StateCodec`)."""

    __slots__ = ()

    entry_overhead_bytes = 510
    """A key's held windows beyond their encoded size: the dict, the row lists, the ints
    (measured for one window of count and sum: ~540 B in all, ~30 B encoded;
    ``tests/operators/test_held_bytes.py``)."""

    def encode(self, value: dict[int, list[Any]]) -> list[list[Any]]:
        return [[start, *value[start]] for start in sorted(value)]

    def decode(self, data: list[list[Any]]) -> dict[int, list[Any]]:
        return {int(row[0]): copy_contents(row[1:]) for row in data}


WINDOWS_CODEC = FastWindowsCodec()


def supports(config: WindowOperatorConfig) -> bool:
    """Whether :class:`FastWindowOperator` implements ``config`` exactly."""
    return (
        isinstance(config.assigner, TumblingAssigner | SlidingAssigner)
        and config.time.value == "event"
        and (config.trigger is None or isinstance(config.trigger, EventTimeTrigger))
        and config.evictor is None
        and config.function is None
        and config.aggregations is not None
    )


class FastWindowOperator(WindowOperatorBase):
    """Non-merging time windows + default event-time trigger + built-in aggregations."""

    process_batch: Callable[[Sequence[InputRecord]], None]

    def __init__(self, config: WindowOperatorConfig) -> None:
        if not supports(config):
            raise WindowConfigError("the fast window operator does not support this config")
        super().__init__(config, plan_base=2)
        assigner = config.assigner
        if isinstance(assigner, TumblingAssigner):
            self._size, self._slide, self._offset = assigner.size, assigner.size, assigner.offset
        elif isinstance(assigner, SlidingAssigner):
            self._size, self._slide, self._offset = assigner.size, assigner.slide, assigner.offset
        self._assigner = assigner
        # start -> {key: accumulator}: one small dict per window start, so the loop looks
        # a record up by its key alone (no (key, start) tuple to build and hash), and a
        # start's windows fire and go together. With the rocksdb backend, start -> {key:
        # None}: the keys of the start's windows in opened order (its timers, on the
        # heap), the accumulators in the cache (module docstring).
        self._windows: dict[int, dict[str, Any]] = {}
        self._cache: StateCache | None = (
            None if config.state_maps is None else config.state_maps("", WINDOWS_CODEC)
        )
        """With the rocksdb backend: key -> ``{start: accumulator}``."""
        # per start, its pending trigger and cleanup times (a heap; module docstring)
        self._due: list[DueEntry] = []
        self._opened_seq = count()
        # logical event timers (module docstring): fired since creation or restore, and
        # pending at the restore
        self._timers_fired = 0
        self._timers_restored = 0
        plan = self._plan()
        # Slots holding containers (count_distinct, collect) are copied into snapshots.
        self._mutable_slots = any(
            spec.kind in (AggKind.COUNT_DISTINCT, AggKind.COLLECT) for spec in plan.specs
        )
        self.process_batch = self._compile_batch()
        self._fire = self._compile_fire(PLAIN_RESULT)
        self._fire_cached = self._compile_fire_cached() if self._cache is not None else None

    def _plan(self) -> AggregationPlan:
        if self.plan is None:
            raise WindowStateError("fast window operator without aggregations")
        return self.plan

    # -- the generated loops ----------------------------------------------------------
    def _compile_batch(self) -> Callable[[Sequence[InputRecord]], None]:
        plan = self._plan()
        tumbling = self._size == self._slide
        namespace = dict(plan.namespace)
        namespace.update(
            _op=self,
            _timers=self._timers,
            _counters=self.counters,
            _SIZE=self._size,
            _SLIDE=self._slide,
            _OFFSET=self._offset,
            _slow=self._slow_record,
            _reject=self.reject_bad,
            _new_start=self._new_start,
            _dirty_add=self._dirty.add,
        )
        cache = self._cache
        if cache is not None:  # the rocksdb backend: the windows in the cache
            namespace.update(_get=cache.get, _put=cache.__setitem__, _mark=cache.mark_dirty)
        # Every name the code uses is bound as a default argument, i.e. a local: a local
        # read is cheaper than a global one, and the loop reads several per record. (The
        # values are never rebound: the mutable ones are only ever changed in place.)
        defaults = ", ".join(f"{name}={name}" for name in sorted(namespace))
        # A new window takes its ``opened`` number from the operator's counter (read per
        # batch: a restore replaces it), the slow path from the same counter.
        new_acc = plan.initial_source("0, opened()")
        # ``ts - offset`` allocates an int (timestamps are not small ints): skipped for
        # the usual offset 0, about a tenth of the loop's instructions.
        shifted = "(ts - _OFFSET)" if self._offset else "ts"
        lines = [
            f"def process_batch(records, {defaults}):",
            "    windows = _op._windows",
            "    opened = _op._opened_seq.__next__",
            "    fresh_from = _timers.current_watermark - _SIZE + 2",
            "    _counters.records += len(records)",
        ]
        body = "        "
        # Each record's fields are read and checked first, before any window (a bad
        # value's record, dead-lettered, opens none); the slow path gets checked records.
        fetch = plan.fetch_lines("value", body) + plan.reject_lines(
            body, ["if _reject(key, value, source):", "    continue"]
        )
        if tumbling:
            # ``current`` is the {key: acc} dict of the window [low, high); consecutive
            # records nearly always fall in the same window, so most records only compare
            # their timestamp with its bounds: no start to compute (two int operations that
            # allocate), no outer lookup, no lateness check (fresh_from is fixed for the
            # batch). The first record always misses (low > high).
            lines += [
                "    low = 1",
                "    high = 0",
                "    current = None",
                "    for key, ts, value, _position, source in records:",
                *fetch,
                f"{body}if ts >= high or ts < low:",
                f"{body}    start = ts - {shifted} % _SIZE",
                f"{body}    if start < fresh_from:",
                f"{body}        _slow(key, ts, value, source)",
                f"{body}        continue",
                f"{body}    current = windows.get(start)",
                f"{body}    if current is None:",
                f"{body}        current = _new_start(start)",
                f"{body}    low = start",
                f"{body}    high = start + _SIZE",
            ]
            if cache is None:
                lines += [
                    f"{body}acc = current.get(key)",
                    f"{body}if acc is None:",
                    f"{body}    acc = current[key] = {new_acc}",
                ]
            else:
                # The key's windows from the cache (read back from RocksDB if evicted),
                # the start's keys in memory; the entry marked once changed in place.
                lines += [
                    f"{body}windows_of_key = _get(key)",
                    f"{body}if windows_of_key is None:",
                    f"{body}    acc = {new_acc}",
                    f"{body}    _put(key, {{low: acc}})",
                    f"{body}    current[key] = None",
                    f"{body}else:",
                    f"{body}    acc = windows_of_key.get(low)",
                    f"{body}    if acc is None:",
                    f"{body}        acc = windows_of_key[low] = {new_acc}",
                    f"{body}        current[key] = None",
                ]
            lines += plan.update_lines("acc", "ts", body)
            if cache is not None:
                lines.append(f"{body}_mark(key)")
        else:
            lines += [
                "    for key, ts, value, _position, source in records:",
                *fetch,
                f"{body}start = ts - {shifted} % _SLIDE",
                f"{body}if start - ((start - ts + _SIZE - 1) // _SLIDE) * _SLIDE < fresh_from:",
                f"{body}    _slow(key, ts, value, source)",
                f"{body}    continue",
            ]
            inner = body + "    "
            if cache is not None:  # one read of the key's windows for all of them
                lines += [
                    f"{body}windows_of_key = _get(key)",
                    f"{body}fresh = windows_of_key is None",
                    f"{body}if fresh:",
                    f"{body}    windows_of_key = {{}}",
                ]
            lines += [
                f"{body}low = ts - _SIZE",
                f"{body}while start > low:",
                f"{inner}current = windows.get(start)",
                f"{inner}if current is None:",
                f"{inner}    current = _new_start(start)",
            ]
            if cache is None:
                lines += [
                    f"{inner}acc = current.get(key)",
                    f"{inner}if acc is None:",
                    f"{inner}    acc = current[key] = {new_acc}",
                ]
            else:
                lines += [
                    f"{inner}acc = windows_of_key.get(start)",
                    f"{inner}if acc is None:",
                    f"{inner}    acc = windows_of_key[start] = {new_acc}",
                    f"{inner}    current[key] = None",
                ]
            lines += plan.update_lines("acc", "ts", inner)
            lines.append(f"{inner}start -= _SLIDE")
            if cache is not None:  # a slide longer than the size may leave it in none
                lines += [
                    f"{body}if not fresh:",
                    f"{body}    _mark(key)",
                    f"{body}elif windows_of_key:",
                    f"{body}    _put(key, windows_of_key)",
                ]
        if self._track:
            lines.append(f"{body}_dirty_add(key)")
        exec(compile("\n".join(lines), "<fast-window-batch>", "exec"), namespace)
        batch: Callable[[Sequence[InputRecord]], None] = namespace["process_batch"]
        return batch

    def _fire_namespace(self) -> tuple[str, dict[str, Any]]:
        """What both firing loops (:meth:`_compile_fire`, :meth:`_compile_fire_cached`)
        are compiled with: the plan's result source over ``acc``, and the names the id,
        the end and the result are made from."""
        display, namespace = self._plan().result_source("acc")
        namespace.update(
            _PREFIX=f"{self._pipeline}|",
            _SIZE=self._size,
            _ON_TIME=_ON_TIME,
            _WindowResult=WindowResult,
        )
        return display, namespace

    def _compile_fire(self, plain: bool) -> FireStart:
        """The on-time firing of every window of one start, in the dict's (opened) order.

        One loop per start instead of one timer callback per window: the id's parts, the
        end and the watermark are computed once, the result dict is built inline (the
        plan's own source for it), and ``plain`` makes the WindowResult without calling
        its ``__init__`` (:data:`PLAIN_RESULT`). The pipeline name enters through the
        namespace, never as source text.
        """
        display, namespace = self._fire_namespace()
        namespace["_new"] = object.__new__
        defaults = ", ".join(f"{name}={name}" for name in sorted(namespace))
        body = "        "
        lines = [
            f"def fire(windows, start, results, watermark, {defaults}):",
            "    end = start + _SIZE",
            '    suffix = f"|{start}|{end}"',
            "    append = results.append",
            "    for key, acc in windows.items():",
            f"{body}seq = acc[0]",
            f"{body}acc[0] = seq + 1",
        ]
        if plain:
            lines += [
                f"{body}result = _new(_WindowResult)",
                f'{body}result.id = f"{{_PREFIX}}{{key}}{{suffix}}"',
                f"{body}result.key = key",
                f"{body}result.start = start",
                f"{body}result.end = end",
                f"{body}result.result = {display}",
                f"{body}result.fire = _ON_TIME",
                f"{body}result.seq = seq",
                f"{body}result.watermark = watermark",
                f"{body}append(result)",
            ]
        else:
            lines += [
                f"{body}append(_WindowResult(",
                f'{body}    f"{{_PREFIX}}{{key}}{{suffix}}", key, start, end, {display},',
                f"{body}    _ON_TIME, seq, watermark))",
            ]
        exec(compile("\n".join(lines), "<fast-window-fire>", "exec"), namespace)
        fire: FireStart = namespace["fire"]
        return fire

    def _compile_fire_cached(self) -> FireCached:
        """:meth:`_compile_fire`'s loop with the rocksdb backend: each key's windows read
        from the cache (RocksDB for an evicted key), and with ``drop`` (no allowed
        lateness: the start goes as it fires) the start's window removed, the key too
        once it has none left."""
        cache = self._cache
        assert cache is not None
        display, namespace = self._fire_namespace()
        namespace.update(
            _get=cache.get,
            _pop=cache.pop,
            _mark=cache.mark_dirty,
        )
        defaults = ", ".join(f"{name}={name}" for name in sorted(namespace))
        body = "        "
        lines = [
            f"def fire(keys, start, results, watermark, drop, {defaults}):",
            "    end = start + _SIZE",
            '    suffix = f"|{start}|{end}"',
            "    append = results.append",
            "    for key in keys:",
            f"{body}windows_of_key = _get(key)",
            f"{body}if drop:",
            f"{body}    acc = windows_of_key.pop(start)",
            f"{body}    seq = acc[0]",
            f"{body}    if windows_of_key:",
            f"{body}        _mark(key)",
            f"{body}    else:",
            f"{body}        _pop(key)",
            f"{body}else:",
            f"{body}    acc = windows_of_key[start]",
            f"{body}    seq = acc[0]",
            f"{body}    acc[0] = seq + 1",
            f"{body}    _mark(key)",
            f"{body}append(_WindowResult(",
            f'{body}    f"{{_PREFIX}}{{key}}{{suffix}}", key, start, end, {display},',
            f"{body}    _ON_TIME, seq, watermark))",
        ]
        exec(compile("\n".join(lines), "<fast-window-fire-cached>", "exec"), namespace)
        fire: FireCached = namespace["fire"]
        return fire

    # -- per window start -------------------------------------------------------------
    def _new_start(self, start: int) -> dict[str, Any]:
        """The (empty) windows of a new start, with its trigger and cleanup times queued.

        The trigger time only if ``max_ts > W`` (else the windows fire as their records
        arrive); the cleanup time only with a lateness, below MAX, and after ``W``.
        """
        current: dict[str, Any] = {}
        self._windows[start] = current
        watermark = self._timers.current_watermark
        max_ts = start + self._size - 1
        if max_ts > watermark:
            heappush(self._due, (max_ts, start, _TRIGGER))
        if self._lateness:
            cleanup = max_ts + self._lateness
            if watermark < cleanup < MAX_TIMESTAMP:
                heappush(self._due, (cleanup, start, _CLEANUP))
        return current

    def advance_watermark(self, watermark: int) -> None:
        """Move ``W``, then fire and drop the starts it reached (module docstring)."""
        timers = self._timers
        if watermark <= timers.current_watermark:
            return
        # The timer service keeps the watermark (snapshots, results, the generated loop
        # read it there); it holds no timers, so this fires nothing.
        timers.advance_watermark(watermark)
        due = self._due
        if not due or due[0][0] > watermark:
            return
        if self._cache is not None:
            self._advance_cached(watermark)
            return
        windows = self._windows
        results = self.collector.results
        fire = self._fire
        lateness = self._lateness
        dirty = self._dirty if self._track else None
        fired = on_time = 0
        while due and due[0][0] <= watermark:
            _, start, kind = heappop(due)
            current = windows[start]
            fired += len(current)  # one timer per window: its trigger's or its cleanup
            if dirty is not None:
                dirty.update(current)
            if kind == _TRIGGER:
                fire(current, start, results, watermark)
                on_time += len(current)
                if lateness:  # the cleanup comes later (or never, if it saturated)
                    continue
            del windows[start]
        self.counters.fired_on_time += on_time
        self._timers_fired += fired

    def _advance_cached(self, watermark: int) -> None:
        """:meth:`advance_watermark`'s firing with the rocksdb backend: the same starts in
        the same order, each window read from the cache by its key."""
        due = self._due
        windows = self._windows
        results = self.collector.results
        fire = self._fire_cached
        assert fire is not None
        drop = not self._lateness
        dirty = self._dirty if self._track else None
        fired = on_time = 0
        while due and due[0][0] <= watermark:
            _, start, kind = heappop(due)
            keys = windows[start]
            fired += len(keys)
            if dirty is not None:
                dirty.update(keys)
            if kind == _TRIGGER:
                fire(keys, start, results, watermark, drop)
                on_time += len(keys)
                if not drop:
                    continue
            else:
                self._drop_cached(start, keys)
            del windows[start]
        self.counters.fired_on_time += on_time
        self._timers_fired += fired

    def _drop_cached(self, start: int, keys: Iterable[str]) -> None:
        """The start's windows out of the cache (a key with none left deleted)."""
        cache = self._cache
        assert cache is not None
        for key in keys:
            windows_of_key = cache.get(key)
            del windows_of_key[start]
            if windows_of_key:
                cache.mark_dirty(key)
            else:
                cache.pop(key)

    def _slow_record(self, key: str, timestamp: int, value: Any, source: Any) -> None:
        """A record with a window at or past ``max_ts``: semantics 5 step by step.

        The timers of its windows are those of their starts (:meth:`_new_start`): the
        trigger's while ``max_ts > W``, the cleanup timer while the cleanup time is ahead.
        """
        plan = self._plan()
        watermark = self._timers.current_watermark
        windows = self._windows
        cache = self._cache
        # With the rocksdb backend the key's windows come from the cache (none: a new
        # dict, put there if it gets a window), their starts' key sets stay here.
        of_key: dict[int, list[Any]] | None = None if cache is None else cache.get(key)
        fresh = of_key is None
        if of_key is None:
            of_key = {}
        skipped = True
        for window in self._assigner.assign(timestamp):
            if self.cleanup_time(window) <= watermark:
                continue
            skipped = False
            start = window[0]
            current = windows.get(start)
            if current is None:
                current = self._new_start(start)
            acc = current.get(key) if cache is None else of_key.get(start)
            if acc is None:
                acc = plan.new()
                acc[1] = next(self._opened_seq)
                if cache is None:
                    current[key] = acc
                else:
                    of_key[start] = acc
                    current[key] = None
            plan.fold(acc, timestamp, value)
            if window[1] - 1 <= watermark:  # the default trigger: an allowed-late record fires
                self._emit(key, window, acc, self.fire_kind(window, None, 0))
        if cache is not None:
            if not fresh:
                cache.mark_dirty(key)
            elif of_key:
                cache[key] = of_key
        if skipped and timestamp + self._lateness <= watermark:
            self.late_record(key, timestamp, source)
        if self._track:
            self._dirty.add(key)

    def _emit(self, key: str, window: Window, acc: list[Any], kind: FireKind) -> None:
        seq = acc[0]
        acc[0] = seq + 1
        start, end = window
        if kind is FireKind.ON_TIME:
            self.counters.fired_on_time += 1
        else:
            self.counters.count_firing(kind)
        self.collector.results.append(
            WindowResult(
                f"{self._pipeline}|{key}|{start}|{end}",
                key,
                start,
                end,
                self._plan().result(acc),
                kind,
                seq,
                self._timers.current_watermark,
            )
        )

    def _on_event_time(self, timestamp: int, key: str, window: Window) -> None:
        return None  # the fast path queues no timers (module docstring)

    def _on_processing_time(self, timestamp: int, key: str, window: Window) -> None:
        return None  # the fast path queues no timers (module docstring)

    # -- metrics ----------------------------------------------------------------------
    def _pending_timers(self) -> int:
        """The logical event timers not fired yet: per due entry, one per window."""
        windows = self._windows
        return sum(len(windows[start]) for _, start, _ in self._due)

    def gauges(self) -> OperatorGauges:
        return OperatorGauges(
            event_timers=self._pending_timers(),
            processing_timers=self._timers.processing_timers,
            windows_open=self.windows_open(),
            keys=self.key_count(),
        )

    def timer_counts(self) -> dict[str, tuple[int, int, int]]:
        """The logical timers' counts since creation or restore (none is ever deleted)."""
        counts = self._timers.counts()  # its processing domain: never used, all zero
        fired = self._timers_fired
        counts["event"] = (fired + self._pending_timers() - self._timers_restored, fired, 0)
        return counts

    # -- state ------------------------------------------------------------------------
    def windows_open(self) -> int:
        return sum(map(len, self._windows.values()))  # a few starts (per batch, not record)

    def key_count(self) -> int:
        if self._cache is not None:
            return len(self._cache)  # a key with no window left is deleted
        groups = list(self._windows.values())
        if len(groups) == 1:
            return len(groups[0])
        return len(set().union(*groups))

    def state_keys(self) -> Iterator[str]:
        if self._cache is not None:
            return iter(list(self._cache.keys()))
        windows = self._windows
        keys: dict[str, None] = {}
        for start in sorted(windows):
            keys.update(dict.fromkeys(windows[start]))
        return iter(keys)

    def has_key_state(self, key: str) -> bool:
        if self._cache is not None:
            return key in self._cache
        return any(key in current for current in self._windows.values())

    def state_maps(self) -> list[StateCache]:
        """The caches the runtime flushes at each checkpoint (the rocksdb backend)."""
        return [] if self._cache is None else [self._cache]

    def _key_windows(self, key: str) -> list[tuple[int, list[Any]]]:
        """The key's ``(start, accumulator)`` by start."""
        if self._cache is not None:
            of_key: dict[int, list[Any]] | None = self._cache.get(key)
            return [] if of_key is None else sorted(of_key.items())
        windows = self._windows
        found: list[tuple[int, list[Any]]] = []
        for start in sorted(windows):
            acc = windows[start].get(key)
            if acc is not None:
                found.append((start, acc))
        return found

    # -- pull queries (operators/query.py) --------------------------------------------
    def query_key(self, key: str) -> dict[str, Any] | None:
        """The key's windows by start, each with its aggregations' values so far."""
        plan = self._plan()
        size = self._size
        rows = [
            {"start": start, "end": start + size, "result": plan.result(acc), "fires": acc[0]}
            for start, acc in self._key_windows(key)
        ]
        return {"windows": rows} if rows else None

    def scan(
        self, from_key: str | None, to_key: str | None, limit: int
    ) -> list[tuple[str, dict[str, Any]]]:
        keys = first_keys(self.state_keys(), from_key, to_key, limit)
        return [(key, found) for key in keys if (found := self.query_key(key)) is not None]

    def _row(self, start: int, acc: list[Any]) -> list[Any]:
        return [start, *copy_contents(acc)] if self._mutable_slots else [start, *acc]

    def encode_key(self, key: str) -> list[list[Any]]:
        """The key's windows as ``[[start, seq, opened, *slots], ...]`` by start."""
        return [self._row(start, acc) for start, acc in self._key_windows(key)]

    def _decode_rows(self, key: str, rows: Any) -> list[tuple[int, list[Any]]]:
        """A key's checkpointed rows as ``(start, accumulator)``, checked."""
        if not isinstance(rows, list):
            raise WindowStateError(f"key {key!r}: not a fast window operator's state")
        width = self._plan().width
        out: list[tuple[int, list[Any]]] = []
        for row in rows:
            if len(row) != width + 1:
                raise WindowStateError(f"key {key!r}: window {row[:1]} does not fit")
            acc = copy_contents(row[1:])
            acc[0], acc[1] = int(acc[0]), int(acc[1])
            out.append((int(row[0]), acc))
        return out

    def load_keys(self, items: Iterable[tuple[str, Any]]) -> None:
        """Replace the windows; each start's dict in ``opened`` order (module docstring).

        The timer service must hold the restored watermark (and holds no timers).
        """
        cache = self._cache
        if cache is not None:
            cache.clear()
        loaded: list[tuple[int, str, int, list[Any] | None]] = []
        for key, rows in items:
            windows_of_key = self._decode_rows(key, rows)
            if cache is not None and windows_of_key:
                cache[key] = dict(windows_of_key)
            loaded.extend((acc[1], key, start, acc) for start, acc in windows_of_key)
        self._open_loaded(loaded)

    def _open_loaded(self, loaded: list[tuple[int, str, int, list[Any] | None]]) -> None:
        """The starts of these ``(opened, key, start, accumulator)`` windows, each start's
        windows in ``opened`` order (the accumulators too, without a cache)."""
        windows = self._windows
        windows.clear()  # cleared in place: the generated loop holds these dicts
        self._due.clear()
        loaded.sort(key=lambda item: item[:3])
        keep = self._cache is None
        for _, key, start, acc in loaded:
            current = windows.get(start)
            if current is None:
                current = self._new_start(start)
            current[key] = acc if keep else None
        self._opened_seq = count(loaded[-1][0] + 1 if loaded else 0)
        self._timers_fired = 0
        self._timers_restored = self._pending_timers()

    def _snapshot_timers(self) -> dict[str, Any] | None:
        return None  # implied by the windows

    def _changes(self, keys: set[str]) -> Iterator[tuple[str, Any]]:
        """One pass over the starts, intersecting each start's keys with ``keys`` (with
        the rocksdb backend, each key's windows from the cache)."""
        cache = self._cache
        if cache is not None:  # without reading an evicted key back into the cache
            for key in keys:
                yield KEY_PREFIX + key, cache.peek(key) or None
            return
        windows = self._windows
        found: dict[str, list[list[Any]]] = {}
        for start in sorted(windows):
            current = windows[start]
            for key in current.keys() & keys:
                rows = found.get(key)
                row = self._row(start, current[key])
                if rows is None:
                    found[key] = [row]
                else:
                    rows.append(row)
        for key in keys:
            yield KEY_PREFIX + key, found.get(key)

    def _load_changes(self, watermark: int, keys: list[tuple[str, Any]]) -> None:
        self._timers.restore({"watermark": watermark, "event": [], "processing": []})
        cache = self._cache
        if cache is None:
            self.load_keys([(key, rows) for key, rows in keys if rows is not None])
            return
        # The rocksdb backend: the store holds the state up to where the entries start
        # (empty, or a local checkpoint); they are applied onto it, then every key's
        # windows are read once for the starts' key sets (the timers, on the heap).
        for key, rows in keys:
            windows_of_key = [] if rows is None else self._decode_rows(key, rows)
            if windows_of_key:
                cache[key] = dict(windows_of_key)
            else:
                cache.pop(key)
        loaded: list[tuple[int, str, int, list[Any] | None]] = [
            (acc[1], key, start, None)
            for key, windows_of_key in cache.items()
            for start, acc in windows_of_key.items()
        ]
        self._open_loaded(loaded)
