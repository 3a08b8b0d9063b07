"""What both window operator classes share: time, timers, counters and checkpoints.

Subclasses keep the windows; this class owns the timer service (namespace = window),
the collector, the counters, and the snapshot envelopes:

- full: ``{"version": 2, "meta": {...}, "timers": TimerService.snapshot() or None,
  "keys": {key: per-key state}}``
- incremental: ``{"k" + key: per-key change or None, "\u0000meta": {...}}`` for the keys
  changed since the last call (needs track_keys).

What a per-key state and change are is the subclass's: the general operator writes
keystate.py's form plus the key's timers; the fast operator writes its windows only, and
``timers`` is None, because its timers follow from its windows (fast.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from service.core.paths import get_path
from service.core.time import MAX_TIMESTAMP, TimeDomain
from service.core.timers import TimerService
from service.operators.base import Collector, FailedRecord, FireKind, LateRecord, OperatorGauges

from .aggregations import AggregationPlan
from .assigners import Window, max_timestamp
from .config import WindowOperatorConfig
from .counters import WindowCounters
from .errors import WindowStateError
from .keystate import KEY_PREFIX, META_ENTRY

SNAPSHOT_VERSION = 2

REASON_BAD_VALUE = "bad_value"
HEADER_FIELD = "clockwork.field"
HEADER_FUNCTION = "clockwork.function"


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, str):
        return f"a string ({value[:40]!r})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def reject_bad_value(
    plan: AggregationPlan, collector: Collector, skip: bool, key: str, value: Any, source: Any
) -> bool:
    """A record some aggregation of ``plan`` cannot take a value of: count each bad value
    (the plan's and the collector's counts), then dead-letter the record (True: it is
    aggregated nowhere) or, with ``skip`` (``on_bad_value: skip``), let it in with those
    fields as NULL. The window operators and the running aggregate share it."""
    found = plan.bad_values(value)
    counts = collector.bad_values
    for j, spec, reason in found:
        plan.invalid[j] += 1
        entry = (str(spec.checked_field), reason)
        counts[entry] = counts.get(entry, 0) + 1
    if not found or skip:
        return False
    first = found[0][1]
    detail = "; ".join(
        f"{spec.kind.value}({spec.checked_field}) cannot take "
        + _json_kind(get_path(value, str(spec.checked_field)))
        for _, spec, _ in found
    )
    collector.failed.append(
        FailedRecord(
            source,
            key,
            REASON_BAD_VALUE,
            detail,
            (
                (HEADER_FIELD, str(first.checked_field).encode()),
                (HEADER_FUNCTION, first.kind.value.encode()),
            ),
        )
    )
    return True


class WindowOperatorBase:
    """Time, timers, counters and checkpoint envelopes of a window operator."""

    query_kind = "window"
    """What a pull query reads of it (operators/query.py)."""

    def __init__(self, config: WindowOperatorConfig, plan_base: int) -> None:
        self.config = config
        self.collector = Collector()
        self.counters = WindowCounters()
        self._pipeline = config.pipeline
        self._clock = config.clock
        self._domain = config.time
        self._event = config.time is TimeDomain.EVENT_TIME
        self._lateness = config.allowed_lateness_ms
        self._late_output = config.late_output
        self._track = config.track_keys
        self._skip_bad = config.on_bad_value == "skip"
        self._dirty: set[str] = set()
        self.plan: AggregationPlan | None = (
            AggregationPlan(config.aggregation_specs(), plan_base)
            if config.aggregations is not None
            else None
        )
        # Without the timer service's per-key index (track_keys), which costs two set
        # operations per timer change: the operators track their changed keys themselves,
        # and find those keys' timers at a checkpoint (fast.py, general.py).
        self._timers: TimerService[str, Window] = TimerService(
            self._on_event_time, self._on_processing_time
        )

    # -- time -------------------------------------------------------------------------
    @property
    def current_watermark(self) -> int:
        return self._timers.current_watermark

    def advance_watermark(self, watermark: int) -> None:
        self._timers.advance_watermark(watermark)

    def advance_processing_time(self, now: int) -> None:
        self._timers.advance_processing_time(now)

    def next_processing_time(self) -> int | None:
        return self._timers.next_processing_time()

    def cleanup_time(self, window: Window) -> int:
        """When the window's state goes: ``max_ts + allowed_lateness`` (saturating at MAX).

        Processing-time windows are cleaned at ``max_ts``. Inlined rather than built
        from ``max_timestamp`` and ``saturating_add``: it runs several times per record.
        """
        end = window[1]
        if end == MAX_TIMESTAMP:  # the global window
            return MAX_TIMESTAMP
        if self._event:
            cleanup = end - 1 + self._lateness
            return cleanup if cleanup < MAX_TIMESTAMP else MAX_TIMESTAMP
        return end - 1

    def is_window_late(self, window: Window) -> bool:
        """Semantics 5 step 1: an event-time window whose cleanup time the watermark reached."""
        return self._event and self.cleanup_time(window) <= self._timers.current_watermark

    def register_cleanup_timer(self, key: str, window: Window) -> None:
        cleanup = self.cleanup_time(window)
        if cleanup != MAX_TIMESTAMP:
            self._timers.register(self._domain, cleanup, key, window)

    def delete_cleanup_timer(self, key: str, window: Window) -> None:
        cleanup = self.cleanup_time(window)
        if cleanup != MAX_TIMESTAMP:
            self._timers.delete(self._domain, cleanup, key, window)

    def fire_kind(self, window: Window, timer_domain: TimeDomain | None, timer_ts: int) -> FireKind:
        """early / on_time / late of a firing (see docs: the time of the firing vs max_ts).

        The time of a firing is the timer's timestamp when a timer of the window's own
        domain caused it, else the window domain's current time (the watermark, or the
        clock for processing-time windows). Before ``max_ts``: early; exactly at
        ``max_ts`` by such a timer: on_time; otherwise late.
        """
        max_ts = max_timestamp(window)
        if timer_domain is self._domain:
            now = timer_ts
            if now == max_ts:
                return FireKind.ON_TIME
        elif self._event:
            now = self._timers.current_watermark
        else:
            now = self._clock.now_ms()
        return FireKind.EARLY if now < max_ts else FireKind.LATE

    def reject_bad(self, key: str, value: Any, source: Any) -> bool:
        """A record some aggregation cannot take a value of (checked once, before any
        window): :func:`reject_bad_value`, counting a dead-lettered record."""
        if self.plan is None:
            return False
        if reject_bad_value(self.plan, self.collector, self._skip_bad, key, value, source):
            self.counters.bad_values_dead_lettered += 1
            return True
        return False

    def late_record(self, key: str, timestamp: int, source: Any) -> None:
        """Semantics 5: a record every window of which was late."""
        if self._late_output:
            self.counters.late_emitted += 1
            self.collector.late.append(
                LateRecord(source, key, timestamp, self._timers.current_watermark)
            )
        else:
            self.counters.late_dropped += 1
            self.collector.dropped_late += 1

    # -- metrics ----------------------------------------------------------------------
    def gauges(self) -> OperatorGauges:
        return OperatorGauges(
            event_timers=self._timers.event_timers,
            processing_timers=self._timers.processing_timers,
            windows_open=self.windows_open(),
            keys=self.key_count(),
        )

    def timer_counts(self) -> dict[str, tuple[int, int, int]]:
        return self._timers.counts()

    def stats(self) -> dict[str, Any]:
        """Cumulative counters and, per aggregation, the values it skipped as invalid."""
        out: dict[str, Any] = self.counters.as_dict()
        out["invalid_values"] = self.plan.invalid_counts() if self.plan is not None else {}
        return out

    # -- snapshots --------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        return {
            "version": SNAPSHOT_VERSION,
            "meta": self._meta(),
            "timers": self._snapshot_timers(),
            "keys": {key: self.encode_key(key) for key in self.state_keys()},
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        if snapshot.get("version") != SNAPSHOT_VERSION:
            raise WindowStateError(f"unknown window snapshot version {snapshot.get('version')!r}")
        meta = snapshot["meta"]
        self._load_meta(meta)
        timers = snapshot["timers"]
        if timers is None:  # derived from the windows: load_keys registers them
            timers = {"watermark": meta["watermark"], "event": [], "processing": []}
        self._timers.restore(timers)
        self.load_keys(snapshot["keys"].items())
        self._dirty.clear()

    def snapshot_changes(self) -> dict[str, Any]:
        return dict(self.iter_changes())

    def iter_changes(self) -> Iterator[tuple[str, Any]]:
        """:meth:`snapshot_changes` an entry at a time (:class:`~service.operators.base.
        StreamsChanges`), to be consumed whole before the operator is used again."""
        if not self._track:
            raise WindowStateError("snapshot_changes needs the operator built with track_keys")
        keys = set(self._dirty)
        self._dirty.clear()  # in place: the fast path's generated loop holds this set
        yield from self._changes(keys)
        yield META_ENTRY, self._meta()

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        watermark, keys = self._newest_changes(entries)
        self._load_changes(watermark, keys)
        self._dirty.clear()

    def _newest_changes(
        self, entries: Iterable[tuple[str, Any]]
    ) -> tuple[int, list[tuple[str, Any]]]:
        """The watermark and each key's newest entry (None: deleted) of checkpoint
        ``entries`` in the changelog's order; the newest metadata loaded."""
        newest: dict[str, Any] = {}
        for name, value in entries:
            newest[name] = value
        meta = newest.pop(META_ENTRY, None)
        if meta is not None:
            if meta.get("version", 1) != SNAPSHOT_VERSION:
                raise WindowStateError(f"unknown window checkpoint version {meta.get('version')!r}")
            self._load_meta(meta)
        watermark = int(meta["watermark"]) if meta is not None else self.current_watermark
        keys: list[tuple[str, Any]] = []
        for name, value in newest.items():
            if not name.startswith(KEY_PREFIX):
                if value is None:
                    continue
                raise WindowStateError(f"unknown checkpoint entry {name!r}")
            keys.append((name[len(KEY_PREFIX) :], value))  # None: the key was deleted
        return watermark, keys

    def _meta(self) -> dict[str, Any]:
        return {
            "version": SNAPSHOT_VERSION,
            "watermark": self._timers.current_watermark,
            "counters": self.counters.as_dict(),
            "invalid": list(self.plan.invalid) if self.plan is not None else [],
        }

    def _load_meta(self, meta: dict[str, Any]) -> None:
        self.counters.load(meta.get("counters", {}))
        if self.plan is not None:
            invalid = [int(n) for n in meta.get("invalid", [])]
            if len(invalid) == len(self.plan.invalid):
                self.plan.invalid[:] = invalid

    # -- what subclasses provide ------------------------------------------------------
    def _on_event_time(self, timestamp: int, key: str, window: Window) -> None:
        raise NotImplementedError

    def _on_processing_time(self, timestamp: int, key: str, window: Window) -> None:
        raise NotImplementedError

    def windows_open(self) -> int:
        raise NotImplementedError

    def key_count(self) -> int:
        raise NotImplementedError

    def state_keys(self) -> Iterator[str]:
        raise NotImplementedError

    def has_key_state(self, key: str) -> bool:
        raise NotImplementedError

    def encode_key(self, key: str) -> Any:
        raise NotImplementedError

    def load_keys(self, items: Iterable[tuple[str, Any]]) -> None:
        """Replace all window state with these keys' states (timers already restored)."""
        raise NotImplementedError

    def _snapshot_timers(self) -> dict[str, Any] | None:
        """The full snapshot's timers, or None when :meth:`load_keys` re-creates them."""
        raise NotImplementedError

    def _changes(self, keys: set[str]) -> Iterator[tuple[str, Any]]:
        """``("k" + key, change or None)`` for ``keys`` (the operator's dirty keys)."""
        raise NotImplementedError

    def _load_changes(self, watermark: int, keys: list[tuple[str, Any]]) -> None:
        """Replace all state and timers with the newest changes of these keys (None: the
        key was deleted); with the rocksdb backend, apply them onto the store's state."""
        raise NotImplementedError
