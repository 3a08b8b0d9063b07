"""Watermarks: per-partition generators and the per-instance combiner.

semantics.md section 3. A watermark ``W`` asserts that no more records with timestamp
``<= W`` are expected. Each assigned partition has a :class:`WatermarkGenerator` fed
with its records; the :class:`WatermarkCombiner` takes the minimum over the assigned,
non-idle partitions and emits it only when it moves forward.

Invariants:
- a generator's watermark never goes back (it is a function of the maximum seen);
- the combiner's emitted watermark never goes back, also across revoke/assign: a
  partition (re-)assigned with a lower watermark holds the minimum back until it
  catches up, but never pulls the emitted value down;
- if every partition is idle, or none is assigned, the combined watermark does not move;
- after :meth:`WatermarkCombiner.finish` (``MAX``) nothing is emitted again.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any, Generic, Protocol, TypeVar

from service.core.errors import ConfigError, PartitionError
from service.core.paths import MISSING, compile_path
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP

P = TypeVar("P", bound=Hashable)


class WatermarkGenerator(Protocol):
    """Tracks one partition's records and derives its watermark."""

    def on_event(self, timestamp: int, value: Any) -> None:
        """A record with event time ``timestamp`` and decoded payload ``value`` arrived."""
        ...

    @property
    def current_watermark(self) -> int:
        """The partition's watermark; MIN_TIMESTAMP before the first record."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """The generator's state as plain data."""
        ...

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace the state with that of :meth:`snapshot`."""
        ...


def _check_bound(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ConfigError(f"max_out_of_orderness_ms must be an int >= 0, not {value!r}")
    return value


class BoundedOutOfOrderness:
    """``W = max_ts - B - 1``: records may arrive up to ``B`` ms behind the newest.

    The state is the maximum timestamp seen, not the watermark, so restoring with a
    different ``B`` gives the watermark that bound implies.
    """

    __slots__ = ("_bound", "_max_ts", "_watermark")

    def __init__(self, max_out_of_orderness_ms: int) -> None:
        self._bound = _check_bound(max_out_of_orderness_ms)
        self._max_ts: int | None = None
        self._watermark = MIN_TIMESTAMP

    @property
    def max_out_of_orderness_ms(self) -> int:
        return self._bound

    def on_event(self, timestamp: int, value: Any) -> None:
        max_ts = self._max_ts
        if max_ts is None or timestamp > max_ts:
            self._max_ts = timestamp
            self._watermark = self._derive(timestamp)

    def _derive(self, max_ts: int) -> int:
        watermark = max_ts - self._bound - 1
        return MIN_TIMESTAMP if watermark < MIN_TIMESTAMP else watermark

    @property
    def current_watermark(self) -> int:
        return self._watermark

    def snapshot(self) -> dict[str, Any]:
        return {"max_timestamp": self._max_ts}

    def restore(self, snapshot: dict[str, Any]) -> None:
        max_ts = snapshot["max_timestamp"]
        if max_ts is None:
            self._max_ts = None
            self._watermark = MIN_TIMESTAMP
        else:
            self._max_ts = int(max_ts)
            self._watermark = self._derive(self._max_ts)


class Ascending(BoundedOutOfOrderness):
    """Timestamps never go back within a partition: ``W = max_ts - 1``."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0)


class Punctuated:
    """The payload carries the watermark: the largest value seen in ``field``.

    A record without the field leaves the watermark unchanged. A value that is not a
    number (a string, a bool, NaN) is ignored too, because the record itself is valid
    and must still be processed; such values are counted in :attr:`ignored` so the
    runtime can expose them. Floats are floored to the millisecond.
    """

    __slots__ = ("_get", "_watermark", "field", "ignored")

    def __init__(self, field: str) -> None:
        self.field = field
        self._get = compile_path(field)
        self._watermark = MIN_TIMESTAMP
        self.ignored = 0

    def on_event(self, timestamp: int, value: Any) -> None:
        raw = self._get(value)
        if raw is MISSING:
            return
        kind = type(raw)
        if kind is int:
            mark: int = raw
        elif kind is float and math.isfinite(raw):
            mark = math.floor(raw)
        else:
            self.ignored += 1
            return
        if mark > self._watermark:
            self._watermark = MAX_TIMESTAMP if mark > MAX_TIMESTAMP else mark

    @property
    def current_watermark(self) -> int:
        return self._watermark

    def snapshot(self) -> dict[str, Any]:
        return {"watermark": self._watermark}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self._watermark = int(snapshot["watermark"])


STRATEGIES = ("bounded_out_of_orderness", "ascending", "punctuated")


def make_generator(
    strategy: str, max_out_of_orderness_ms: int = 0, field: str | None = None
) -> WatermarkGenerator:
    """Build the generator a spec names; ConfigError for an unknown or inconsistent one.

    Parameters that contradict the strategy are errors rather than ignored (``ascending``
    with a bound > 0, a ``field`` for a non-punctuated strategy), so a mistaken spec is
    rejected when it is submitted.
    """
    bound = _check_bound(max_out_of_orderness_ms)
    if strategy == "bounded_out_of_orderness":
        generator: WatermarkGenerator = BoundedOutOfOrderness(bound)
    elif strategy == "ascending":
        if bound:
            raise ConfigError("strategy 'ascending' takes no max_out_of_orderness_ms (it is 0)")
        generator = Ascending()
    elif strategy == "punctuated":
        if field is None:
            raise ConfigError("strategy 'punctuated' needs a field")
        if bound:
            raise ConfigError("strategy 'punctuated' takes no max_out_of_orderness_ms")
        return Punctuated(field)
    else:
        raise ConfigError(
            f"unknown watermark strategy {strategy!r} (expected {', '.join(STRATEGIES)})"
        )
    if field is not None:
        raise ConfigError(f"strategy {strategy!r} takes no field")
    return generator


class _Partition:
    __slots__ = ("in_min", "last_active", "watermark")

    def __init__(self, watermark: int, last_active: int) -> None:
        self.watermark = watermark
        self.last_active = last_active
        self.in_min = False  # counted in the cached minimum of the combiner


class WatermarkCombiner(Generic[P]):
    """The combined watermark of one instance: min over assigned, non-idle partitions.

    A partition is idle once ``now - last_active >= idle_timeout_ms``, where
    ``last_active`` is the processing time of its last record (or of its assignment);
    ``None`` means never idle. ``now`` is processing time and must not go back between
    calls (a going-back ``now`` is tolerated but makes the next combine a full scan).

    Cost: :meth:`combine` is O(1) when nothing relevant changed since the last scan (the
    usual per-record case with ``interval_ms = 0``): the minimum over the partitions
    counted at the last scan is cached, together with the earliest time one of them can
    become idle. An update lowers the cached minimum directly, and forces a rescan only
    when it raises the partition that held the minimum; assign, revoke and reaching the
    idle deadline force a rescan, O(partitions).

    Idle advance (opt-in, ``idle_advance=True``; not in Flink): when every assigned
    partition is idle, event time runs on with the wall clock from the record that
    raised the highest partition watermark: the combined watermark becomes
    ``peak + (now - peak_arrival)``, where ``peak`` is the highest watermark any
    partition reported (``max_ts - B - 1`` for bounded out-of-orderness) and
    ``peak_arrival`` when it was reported. So the last windows of a quiet stream close
    ``idle_timeout_ms`` after its last record instead of never. The first record after
    the quiet period makes its partition active and the usual minimum applies again;
    since the emitted watermark never goes back, records behind it are late by the
    usual rules (allowed lateness and the late topic still catch them).
    """

    __slots__ = (
        "_advancing",
        "_current",
        "_deadline",
        "_finished",
        "_idle_advance",
        "_idle_timeout",
        "_min",
        "_parts",
        "_peak",
        "_peak_at",
        "_scanned_at",
        "_stale",
    )

    def __init__(self, idle_timeout_ms: int | None = None, *, idle_advance: bool = False) -> None:
        timeout = idle_timeout_ms
        if timeout is not None and (type(timeout) is not int or timeout <= 0):
            raise ConfigError(f"idle_timeout_ms must be None or an int > 0, not {timeout!r}")
        if idle_advance and timeout is None:
            raise ConfigError("idle_advance needs an idle_timeout_ms")
        self._idle_timeout = idle_timeout_ms
        self._idle_advance = idle_advance
        self._advancing = False
        # the highest partition watermark reported, and the processing time it came at
        self._peak = MIN_TIMESTAMP
        self._peak_at = MIN_TIMESTAMP
        self._parts: dict[P, _Partition] = {}
        self._current = MIN_TIMESTAMP
        self._finished = False
        # cache of the last scan: min over the partitions counted (None: none counted)
        self._stale = True
        self._min: int | None = None
        self._deadline = MAX_TIMESTAMP
        self._scanned_at = MIN_TIMESTAMP

    # -- partitions ---------------------------------------------------------------------
    @property
    def idle_timeout_ms(self) -> int | None:
        return self._idle_timeout

    @property
    def partitions(self) -> list[P]:
        """The assigned partitions, in assignment order."""
        return list(self._parts)

    def assign(self, partition: P, now: int, watermark: int = MIN_TIMESTAMP) -> None:
        """Start tracking ``partition`` at its checkpointed ``watermark`` (or MIN).

        It counts as active from ``now``, so it holds the minimum back until it catches
        up or goes idle. The emitted watermark does not go back.
        """
        if partition in self._parts:
            raise PartitionError(f"partition {partition!r} is already assigned")
        self._parts[partition] = _Partition(watermark, now)
        if watermark > self._peak:  # a restored partition: run on from its assignment
            self._peak = watermark
            self._peak_at = now
        self._stale = True

    def revoke(self, partition: P) -> None:
        """Stop tracking ``partition``; a partition not assigned is ignored."""
        if self._parts.pop(partition, None) is not None:
            self._stale = True

    def _get(self, partition: P) -> _Partition:
        try:
            return self._parts[partition]
        except KeyError:
            raise PartitionError(f"partition {partition!r} is not assigned") from None

    def update(self, partition: P, watermark: int, now: int) -> None:
        """A record of ``partition`` arrived at ``now``; its watermark is ``watermark``.

        Makes the partition active again if it was idle.
        """
        state = self._parts.get(partition)
        if state is None:
            state = self._get(partition)
        old = state.watermark
        previous = state.last_active
        state.watermark = watermark
        state.last_active = now
        if watermark > self._peak:
            self._peak = watermark
            self._peak_at = now
        if self._stale:
            return
        if now < previous or now < self._scanned_at:  # time went back: rescan to be safe
            self._stale = True
        elif state.in_min:
            if watermark < old:
                if self._min is None or watermark < self._min:
                    self._min = watermark
            elif watermark > old and old == self._min:
                self._stale = True  # it may have held the minimum
        else:  # rejoins (or was never counted): it is active now
            state.in_min = True
            if self._min is None or watermark < self._min:
                self._min = watermark
            if self._idle_timeout is not None:
                deadline = now + self._idle_timeout
                if deadline < self._deadline:
                    self._deadline = deadline

    def partition_watermark(self, partition: P) -> int:
        """The watermark ``partition`` last reported (or was assigned with)."""
        return self._get(partition).watermark

    def is_idle(self, partition: P, now: int) -> bool:
        """Whether ``partition`` has had no record for ``idle_timeout_ms`` at ``now``."""
        state = self._get(partition)
        timeout = self._idle_timeout
        return timeout is not None and now - state.last_active >= timeout

    def idle_partitions(self, now: int) -> list[P]:
        """The idle partitions at ``now``, in assignment order."""
        timeout = self._idle_timeout
        if timeout is None:
            return []
        return [p for p, state in self._parts.items() if now - state.last_active >= timeout]

    # -- combining ----------------------------------------------------------------------
    @property
    def current(self) -> int:
        """The last emitted combined watermark (MIN before the first)."""
        return self._current

    @property
    def finished(self) -> bool:
        """Whether :meth:`finish` was called."""
        return self._finished

    def combine(self, now: int) -> int | None:
        """The new combined watermark if it moved forward at ``now``, else None."""
        if self._stale or now >= self._deadline or now < self._scanned_at:
            self._scan(now)
        low = self._min
        if low is None:
            return self._idle_advanced(now)
        self._advancing = False
        if low <= self._current or self._finished:
            return None
        self._current = low
        return low

    @property
    def idle_advancing(self) -> bool:
        """Whether the last :meth:`combine` let event time follow the wall clock."""
        return self._advancing

    def _idle_advanced(self, now: int) -> int | None:
        """Every partition is idle (or none is assigned): idle advance, if enabled."""
        if not self._idle_advance or not self._parts or self._finished:
            self._advancing = False
            return None
        if self._peak == MIN_TIMESTAMP:  # nothing seen yet: no time to run on from
            self._advancing = False
            return None
        self._advancing = True
        # MAX is reserved for the end of bounded input.
        candidate = min(self._peak + (now - self._peak_at), MAX_TIMESTAMP - 1)
        if candidate <= self._current:
            return None
        self._current = candidate
        return candidate

    def _scan(self, now: int) -> None:
        timeout = self._idle_timeout
        low: int | None = None
        deadline = MAX_TIMESTAMP
        for state in self._parts.values():
            if timeout is not None:
                until = state.last_active + timeout
                if now >= until:
                    state.in_min = False
                    continue
                if until < deadline:
                    deadline = until
            state.in_min = True
            if low is None or state.watermark < low:
                low = state.watermark
        self._min = low
        self._deadline = deadline
        self._scanned_at = now
        self._stale = False

    def finish(self) -> int:
        """Bounded input reached its end: the combined watermark becomes MAX, once.

        Returns MAX_TIMESTAMP; afterwards :meth:`combine` never emits again. Calling it
        again returns MAX_TIMESTAMP again (a timer service ignores a watermark that does
        not advance, so delivering it twice is harmless).
        """
        self._finished = True
        self._current = MAX_TIMESTAMP
        return MAX_TIMESTAMP

    # -- snapshots ----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Plain data: the emitted watermark and ``[partition, watermark, last_active]``.

        Tuple partition ids (e.g. ``(topic, partition)``) become lists, as in JSON.
        """
        return {
            "current": self._current,
            "finished": self._finished,
            "partitions": [[_plain(p), s.watermark, s.last_active] for p, s in self._parts.items()],
            "peak": [self._peak, self._peak_at],
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace all state with that of :meth:`snapshot`."""
        parts: dict[P, _Partition] = {}
        for partition, watermark, last_active in snapshot["partitions"]:
            parts[_hashable(partition)] = _Partition(int(watermark), int(last_active))
        self._parts = parts
        self._current = int(snapshot["current"])
        self._finished = bool(snapshot["finished"])
        self._peak, self._peak_at = (int(v) for v in snapshot.get("peak", (MIN_TIMESTAMP,) * 2))
        self._advancing = False
        self._stale = True


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(part) for part in value]
    return value


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(part) for part in value)
    return value
