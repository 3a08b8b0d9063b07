"""The combined watermark of one replica, and the watermark each partition's operator gets.

semantics.md section 3. Each assigned partition has its own operator and its own
watermark generator. The rule, for any set of partitions a replica holds, however they
came to it (the first assignment, a rebalance, the takeover of a dead member's work):

- the **combined watermark** ``C`` is the minimum of the generators' watermarks over the
  partitions held now that are neither idle nor finished; if every partition held is
  finished, ``C`` is ``MAX``; if none is counted (all idle, or none held), ``C`` does not
  move (unless idle advance is on, see below);
- each partition's **delivered watermark** (its operator's) only moves forward: it
  becomes ``C`` whenever ``C`` is above it (``MAX`` once its own input is finished), and
  starts at the watermark its checkpoint delivered (or ``MIN``).

So a lagging partition that joins holds ``C`` back until it catches up: ``C`` may go
*down* when it joins, but no operator is wound back; the others wait. The newcomer's
restored timers fire as soon as the watermark delivered to it passes them, and its
records are judged late against its own delivered watermark only, never against event
time that other partitions made. With input within the out-of-orderness bound, no record
is late, and the outputs equal an uninterrupted run's.

Idleness: a partition is idle once ``now - last_active >= idle_timeout_ms`` (``last_active``:
the processing time of its last record, or of its assignment); ``None`` means never
idle. An idle partition is left out of ``C`` but still gets ``C`` delivered, so its next
records may be late (as in Flink). ``now`` is processing time and must not go back
between calls (a going-back ``now`` is tolerated but forces a full scan).

Idle advance (opt-in, not in Flink): when every counted partition is idle, event time
runs on with the wall clock from the record that raised the highest partition
watermark: ``C = peak + (now - peak_arrival)`` (capped below ``MAX``, which is kept for
the end of bounded input). The first record after the quiet period makes its partition
active and the minimum applies again.

Cost: :meth:`WatermarkCombiner.advance` is O(1) while nothing relevant changed (the
per-record case with ``interval_ms = 0``): the minimum over the partitions counted at the
last scan is cached with the earliest time one of them can turn idle. An update lowers
the cached minimum directly and forces a rescan only when it raises the partition that
held it; assign, revoke, finish and reaching the idle deadline force a rescan. Delivery
touches every partition, O(partitions), only when ``C`` changed or a partition joined or
finished.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Generic, TypeVar

from service.core.errors import ConfigError, PartitionError
from service.core.plain_tuples import hashable, plain
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP

P = TypeVar("P", bound=Hashable)

_NOTHING: tuple[Any, ...] = ()


class _Partition:
    __slots__ = ("delivered", "finished", "in_min", "last_active", "watermark")

    def __init__(self, watermark: int, last_active: int, delivered: int) -> None:
        self.watermark = watermark
        self.last_active = last_active
        self.delivered = delivered
        self.finished = False
        self.in_min = False  # counted in the cached minimum of the combiner


class WatermarkCombiner(Generic[P]):
    """The combined watermark over the partitions a replica holds, and their deliveries."""

    __slots__ = (
        "_advancing",
        "_current",
        "_deadline",
        "_finishing",
        "_idle_advance",
        "_idle_timeout",
        "_joined",
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
        self._joined = False  # a partition joined or finished: deliver at the next advance
        self._finishing = False  # a partition finished: MAX to deliver at the next advance
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

    def assign(
        self,
        partition: P,
        now: int,
        watermark: int = MIN_TIMESTAMP,
        delivered: int = MIN_TIMESTAMP,
    ) -> None:
        """Start tracking ``partition``: its generator is at ``watermark``, its operator
        was last delivered ``delivered`` (both from its checkpoint, or MIN).

        It counts as active from ``now``, so it holds the minimum back until it catches
        up or goes idle.
        """
        if partition in self._parts:
            raise PartitionError(f"partition {partition!r} is already assigned")
        self._parts[partition] = _Partition(watermark, now, delivered)
        if watermark > self._peak:  # a restored partition: run on from its assignment
            self._peak = watermark
            self._peak_at = now
        self._stale = True
        self._joined = True

    def revoke(self, partition: P) -> None:
        """Stop tracking ``partition``; a partition not assigned is ignored."""
        if self._parts.pop(partition, None) is not None:
            self._stale = True

    def finish(self, partition: P) -> None:
        """``partition``'s input ended (bounded input): it leaves the minimum and its
        operator gets ``MAX`` at the next :meth:`advance`."""
        state = self._get(partition)
        if not state.finished:
            state.finished = True
            self._stale = True
            self._joined = True
            self._finishing = True

    def is_finished(self, partition: P) -> bool:
        return self._get(partition).finished

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
        if self._stale or state.finished:
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
        """The watermark ``partition``'s generator last reported (or was assigned with)."""
        return self._get(partition).watermark

    def delivered(self, partition: P) -> int:
        """The watermark last delivered to ``partition``'s operator (never goes back)."""
        return self._get(partition).delivered

    def is_idle(self, partition: P, now: int) -> bool:
        """Whether ``partition`` has had no record for ``idle_timeout_ms`` at ``now``
        (a finished partition is not idle: it is finished)."""
        state = self._get(partition)
        timeout = self._idle_timeout
        return timeout is not None and not state.finished and now - state.last_active >= timeout

    def idle_partitions(self, now: int) -> list[P]:
        """The idle partitions at ``now``, in assignment order."""
        timeout = self._idle_timeout
        if timeout is None:
            return []
        return [
            p
            for p, state in self._parts.items()
            if not state.finished and now - state.last_active >= timeout
        ]

    def minimum(self, now: int, excluding: P | None = None) -> int | None:
        """The minimum over the counted (neither idle nor finished) partitions other than
        ``excluding`` at ``now``; None if there is none. A direct scan, O(partitions):
        what watermark alignment compares a partition with, once per batch."""
        timeout = self._idle_timeout
        low: int | None = None
        for partition, state in self._parts.items():
            if state.finished or partition == excluding:
                continue
            if timeout is not None and now - state.last_active >= timeout:
                continue
            if low is None or state.watermark < low:
                low = state.watermark
        return low

    # -- combining ----------------------------------------------------------------------
    @property
    def current(self) -> int:
        """The combined watermark at the last :meth:`advance` (MIN before the first)."""
        return self._current

    @property
    def idle_advancing(self) -> bool:
        """Whether the last :meth:`advance` let event time follow the wall clock."""
        return self._advancing

    def combine(self, now: int) -> int | None:
        """The combined watermark at ``now`` if it changed since the last call (or a
        partition joined or finished since), else None. It can go down (a lagging
        partition joined); deliveries never do (:meth:`advance`)."""
        if self._stale or now >= self._deadline or now < self._scanned_at:
            self._scan(now)
        low = self._min
        if low is None:
            value = self._idle_advanced(now)
            if value is None:
                return None
        else:
            self._advancing = False
            value = low
        changed = value != self._current or self._joined
        self._current = value
        self._joined = False
        return value if changed else None

    def advance(self, now: int) -> Sequence[tuple[P, int]]:
        """Combine at ``now`` and return the deliveries it makes: ``(partition,
        watermark)`` for every operator whose watermark moves forward, in assignment
        order. Empty (and O(1)) when nothing changed."""
        if self.combine(now) is None:
            if not self._finishing:
                return _NOTHING
            current = MIN_TIMESTAMP  # no minimum now: only the finished ones get MAX
        else:
            current = self._current
        self._finishing = False
        out: list[tuple[P, int]] = []
        for partition, state in self._parts.items():
            target = MAX_TIMESTAMP if state.finished else current
            if target > state.delivered:
                state.delivered = target
                out.append((partition, target))
        return out

    def _idle_advanced(self, now: int) -> int | None:
        """No partition is counted (every one idle, or none held): idle advance, if on."""
        if not self._idle_advance or not self._parts:
            self._advancing = False
            return None
        if self._peak == MIN_TIMESTAMP:  # nothing seen yet: no time to run on from
            self._advancing = False
            return None
        self._advancing = True
        # MAX is reserved for the end of bounded input.
        candidate = min(self._peak + (now - self._peak_at), MAX_TIMESTAMP - 1)
        return max(candidate, self._current)

    def _scan(self, now: int) -> None:
        timeout = self._idle_timeout
        low: int | None = None
        deadline = MAX_TIMESTAMP
        unfinished = False
        for state in self._parts.values():
            state.in_min = False
            if state.finished:
                continue
            unfinished = True
            if timeout is not None:
                until = state.last_active + timeout
                if now >= until:
                    continue
                if until < deadline:
                    deadline = until
            state.in_min = True
            if low is None or state.watermark < low:
                low = state.watermark
        if self._parts and not unfinished:
            low = MAX_TIMESTAMP  # every partition held is finished
        self._min = low
        self._deadline = deadline
        self._scanned_at = now
        self._stale = False

    # -- snapshots ----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Plain data: the combined watermark and, per partition, ``[partition,
        watermark, last_active, delivered, finished]``.

        Tuple partition ids (e.g. ``(topic, partition)``) become lists, as in JSON.
        """
        return {
            "current": self._current,
            "partitions": [
                [plain(p), s.watermark, s.last_active, s.delivered, s.finished]
                for p, s in self._parts.items()
            ],
            "peak": [self._peak, self._peak_at],
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace all state with that of :meth:`snapshot`."""
        parts: dict[P, _Partition] = {}
        for partition, watermark, last_active, delivered, finished in snapshot["partitions"]:
            state = _Partition(int(watermark), int(last_active), int(delivered))
            state.finished = bool(finished)
            parts[hashable(partition)] = state
        self._parts = parts
        self._current = int(snapshot["current"])
        self._peak, self._peak_at = (int(v) for v in snapshot["peak"])
        self._advancing = False
        self._joined = False
        self._finishing = any(state.finished for state in parts.values())
        self._stale = True
