"""The fast path: tumbling or sliding event-time windows, default trigger, aggregations.

This is the common configuration, and for it the per-record work is: compute the
window start, one dictionary lookup of ``(key, start)``, and the accumulator update,
inlined. The batch loop is generated once per operator (see aggregations.py for why
and how the generated code is kept safe). Everything that is not the plain case -- a
window already at or past its ``max_ts`` (allowed-late or late records) -- leaves the
loop for :meth:`FastWindowOperator._slow_record`, which applies semantics.md
section 5 rule by rule.

Why timers are registered once per window instead of per record: the default trigger
registers ``max_ts`` on every element of a window whose ``max_ts`` is after the
watermark, and the cleanup timer is registered on every element; registration is
deduplicated and neither timer can fire or be deleted while the window is open and
``max_ts > W``, so registering both when the window is created is the same queue.

State: ``{(key, start): [seq, opened, *accumulator slots]}``, plus per key the starts of
its windows (kept on window open/close only) for per-key snapshots and the key gauge.
``seq`` numbers the window's firings; ``opened`` numbers the windows in the order they
were created, across keys.

Why snapshots hold no timers: a window's timers follow from the window and the
watermark ``W``. It has its trigger timer at ``max_ts`` iff ``max_ts > W`` (registered
when the window is created, fired when the watermark reaches it, never deleted), and its
cleanup timer at ``max_ts + allowed_lateness`` iff that is ``> W`` and below MAX
(likewise; firing it deletes the window). Timers sharing a timestamp fire in
registration order, which is the order the windows were created (``opened``: the
trigger timer, then the cleanup timer of each). So a restore registers, window by window
in ``opened`` order, the timers the windows imply; that rebuilds the same queue, and
checkpoints write one small list per key: ``[[start, seq, opened, *slots], ...]``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import count
from typing import Any

from service.core.time import MAX_TIMESTAMP
from service.operators.base import FireKind, InputRecord, WindowResult

from .aggregations import AggKind, AggregationPlan
from .assigners import SlidingAssigner, TumblingAssigner, Window
from .common import WindowOperatorBase
from .config import WindowOperatorConfig
from .errors import WindowConfigError, WindowStateError
from .keystate import KEY_PREFIX, copy_contents
from .triggers import EventTimeTrigger

_ON_TIME = FireKind.ON_TIME


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
        self._register = self._timers.register_event_time_timer
        # start -> {key: accumulator}: one small dict per window start, so the loop looks
        # a record up by its key alone (no (key, start) tuple to build and hash)
        self._windows: dict[int, dict[str, list[Any]]] = {}
        self._starts: dict[str, set[int]] = {}
        self._opened_seq = count()
        plan = self._plan()
        self._result = plan.result
        # Slots holding containers (count_distinct, collect) are copied into snapshots.
        self._mutable_slots = any(
            spec.kind in (AggKind.COUNT_DISTINCT, AggKind.COLLECT) for spec in plan.specs
        )
        self.process_batch = self._compile_batch()

    def _plan(self) -> AggregationPlan:
        if self.plan is None:
            raise WindowStateError("fast window operator without aggregations")
        return self.plan

    # -- the generated loop -----------------------------------------------------------
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
            _opened=self._opened,
            _dirty_add=self._dirty.add,
        )
        # Every name the code uses is bound as a default argument, i.e. a local: a local
        # read is cheaper than a global one, and the loop reads several per record. (The
        # values are never rebound: the mutable ones are only ever changed in place.)
        defaults = ", ".join(f"{name}={name}" for name in sorted(namespace))
        lines = [
            f"def process_batch(records, {defaults}):",
            "    windows = _op._windows",
            "    fresh_from = _timers.current_watermark - _SIZE + 2",
            "    _counters.records += len(records)",
        ]
        body = "        "
        if tumbling:
            # ``current`` is the {key: acc} dict of window ``last``; consecutive records
            # nearly always share a window start, so most records skip the outer lookup
            # (and the lateness check: fresh_from is fixed for the batch).
            lines += [
                "    last = None",
                "    current = None",
                "    for key, ts, value, _position, source in records:",
                f"{body}start = ts - (ts - _OFFSET) % _SIZE",
                f"{body}if start != last:",
                f"{body}    if start < fresh_from:",
                f"{body}        _slow(key, ts, value, source)",
                f"{body}        continue",
                f"{body}    current = windows.get(start)",
                f"{body}    if current is None:",
                f"{body}        current = windows[start] = {{}}",
                f"{body}    last = start",
                f"{body}acc = current.get(key)",
                f"{body}if acc is None:",
                f"{body}    acc = current[key] = {plan.initial_source('0, 0')}",
                f"{body}    _opened(key, start, acc)",
            ]
            lines += plan.fetch_lines("value", body)
            lines += plan.update_lines("acc", "ts", body)
        else:
            lines += [
                "    for key, ts, value, _position, source in records:",
                f"{body}start = ts - (ts - _OFFSET) % _SLIDE",
                f"{body}if start - ((start - ts + _SIZE - 1) // _SLIDE) * _SLIDE < fresh_from:",
                f"{body}    _slow(key, ts, value, source)",
                f"{body}    continue",
            ]
            lines += plan.fetch_lines("value", body)
            inner = body + "    "
            lines += [
                f"{body}low = ts - _SIZE",
                f"{body}while start > low:",
                f"{inner}current = windows.get(start)",
                f"{inner}if current is None:",
                f"{inner}    current = windows[start] = {{}}",
                f"{inner}acc = current.get(key)",
                f"{inner}if acc is None:",
                f"{inner}    acc = current[key] = {plan.initial_source('0, 0')}",
                f"{inner}    _opened(key, start, acc)",
            ]
            lines += plan.update_lines("acc", "ts", inner)
            lines.append(f"{inner}start -= _SLIDE")
        if self._track:
            lines.append(f"{body}_dirty_add(key)")
        exec(compile("\n".join(lines), "<fast-window-batch>", "exec"), namespace)
        batch: Callable[[Sequence[InputRecord]], None] = namespace["process_batch"]
        return batch

    # -- per window -------------------------------------------------------------------
    def _opened(self, key: str, start: int, acc: list[Any]) -> None:
        """A fresh window (``max_ts > W``): the trigger's timer, then the cleanup timer."""
        acc[1] = next(self._opened_seq)
        end = start + self._size
        window = (start, end)
        self._register(end - 1, key, window)
        if self._lateness:
            cleanup = end - 1 + self._lateness
            if cleanup < MAX_TIMESTAMP:
                self._register(cleanup, key, window)
        starts = self._starts.get(key)
        if starts is None:
            self._starts[key] = {start}
        else:
            starts.add(start)

    def _slow_record(self, key: str, timestamp: int, value: Any, source: Any) -> None:
        """A record with a window at or past ``max_ts``: semantics 5 step by step."""
        plan = self._plan()
        watermark = self._timers.current_watermark
        windows = self._windows
        skipped = True
        for window in self._assigner.assign(timestamp):
            if self.cleanup_time(window) <= watermark:
                continue
            skipped = False
            start = window[0]
            current = windows.get(start)
            if current is None:
                current = windows[start] = {}
            acc = current.get(key)
            if acc is None:
                acc = current[key] = plan.new()
                acc[1] = next(self._opened_seq)
                starts = self._starts.get(key)
                if starts is None:
                    self._starts[key] = {start}
                else:
                    starts.add(start)
            plan.fold(acc, timestamp, value)
            max_ts = window[1] - 1
            if max_ts <= watermark:  # the default trigger: an allowed-late record fires
                self._emit(key, window, acc, self.fire_kind(window, None, 0))
            else:
                self._timers.register_event_time_timer(max_ts, key, window)
            self.register_cleanup_timer(key, window)
        if skipped:
            if timestamp + self._lateness <= watermark:
                self.late_record(key, timestamp, source)
        else:
            plan.check(None, timestamp, value)
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
                self._result(acc),
                kind,
                seq,
                self._timers.current_watermark,
            )
        )

    def _on_event_time(self, timestamp: int, key: str, window: Window) -> None:
        """The trigger's timer at ``max_ts`` fires the window; the cleanup timer clears it.

        With no allowed lateness both are one timer. The trigger's ``clear`` would delete
        its ``max_ts`` timer, but here that timer has always fired by the cleanup time
        (``cleanup >= max_ts``, and nothing else deletes it), so there is nothing to delete.
        """
        start, end = window
        max_ts = end - 1
        current = self._windows.get(start)
        acc = None if current is None else current.get(key)
        if acc is not None and current is not None:
            if timestamp == max_ts:
                seq = acc[0]
                acc[0] = seq + 1
                self.counters.fired_on_time += 1
                self.collector.results.append(
                    WindowResult(
                        f"{self._pipeline}|{key}|{start}|{end}",
                        key,
                        start,
                        end,
                        self._result(acc),
                        _ON_TIME,
                        seq,
                        self._timers.current_watermark,
                    )
                )
            if timestamp - max_ts == self._lateness:  # the cleanup time (never saturated here)
                del current[key]
                if not current:
                    del self._windows[start]
                starts = self._starts[key]
                starts.discard(start)
                if not starts:
                    del self._starts[key]
        if self._track:
            self._dirty.add(key)

    def _on_processing_time(self, timestamp: int, key: str, window: Window) -> None:
        return None  # the fast path registers no processing-time timers

    # -- state ------------------------------------------------------------------------
    def windows_open(self) -> int:
        return sum(map(len, self._windows.values()))  # a few starts (per batch, not record)

    def key_count(self) -> int:
        return len(self._starts)

    def state_keys(self) -> Iterator[str]:
        return iter(list(self._starts))

    def has_key_state(self, key: str) -> bool:
        return key in self._starts

    def encode_key(self, key: str) -> list[list[Any]]:
        """The key's windows as ``[[start, seq, opened, *slots], ...]`` by start."""
        windows = self._windows
        if self._mutable_slots:
            return [
                [start, *copy_contents(windows[start][key])] for start in sorted(self._starts[key])
            ]
        return [[start, *windows[start][key]] for start in sorted(self._starts[key])]

    def load_keys(self, items: Iterable[tuple[str, Any]]) -> None:
        """Replace the windows, and register the timers they imply (module docstring).

        The timer service must hold the restored watermark and no timers.
        """
        windows = self._windows
        windows.clear()  # cleared in place: the generated loop holds these dicts
        self._starts.clear()
        width = self._plan().width
        opened: list[tuple[int, str, int]] = []
        for key, rows in items:
            if not isinstance(rows, list):
                raise WindowStateError(f"key {key!r}: not a fast window operator's state")
            starts: set[int] = set()
            for row in rows:
                if len(row) != width + 1:
                    raise WindowStateError(f"key {key!r}: window {row[:1]} does not fit")
                start = int(row[0])
                acc = copy_contents(row[1:])
                acc[0], acc[1] = int(acc[0]), int(acc[1])
                current = windows.get(start)
                if current is None:
                    current = windows[start] = {}
                current[key] = acc
                starts.add(start)
                opened.append((acc[1], key, start))
            if starts:
                self._starts[key] = starts
        opened.sort()
        register = self._register
        watermark = self._timers.current_watermark
        size, lateness = self._size, self._lateness
        for _, key, start in opened:
            window = (start, start + size)
            max_ts = start + size - 1
            if max_ts > watermark:
                register(max_ts, key, window)
            if lateness:
                cleanup = max_ts + lateness
                if watermark < cleanup < MAX_TIMESTAMP:
                    register(cleanup, key, window)
        self._opened_seq = count(opened[-1][0] + 1 if opened else 0)

    def _snapshot_timers(self) -> dict[str, Any] | None:
        return None  # implied by the windows

    def _encode_changes(self, keys: set[str]) -> dict[str, Any]:
        starts = self._starts
        encode = self.encode_key
        return {KEY_PREFIX + key: encode(key) if key in starts else None for key in keys}

    def _load_changes(self, watermark: int, keys: list[tuple[str, Any]]) -> None:
        self._timers.restore({"watermark": watermark, "event": [], "processing": []})
        self.load_keys(keys)
