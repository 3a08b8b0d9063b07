"""Watermark generators: one per assigned partition, fed with its records.

semantics.md section 3. A watermark ``W`` asserts that no more records with timestamp
``<= W`` are expected. Each assigned partition has a :class:`WatermarkGenerator` fed
with its records; :class:`~service.core.combiner.WatermarkCombiner` combines them.

Invariant: a generator's watermark never goes back (it is a function of the maximum
seen). Besides taking records, a generator can say how many of a batch's records it
can take before its watermark passes a limit (:meth:`WatermarkGenerator.admit`), which
is what watermark alignment (:mod:`service.core.alignment`) holds partitions back by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from service.core.errors import ConfigError
from service.core.paths import MISSING, compile_path
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP

Stamped = Sequence[Any]
"""A record as generators see it: index 1 is its timestamp, index 2 its payload (the
operators' input record tuples have that shape)."""


class WatermarkGenerator(Protocol):
    """Tracks one partition's records and derives its watermark."""

    def on_event(self, timestamp: int, value: Any) -> None:
        """A record with event time ``timestamp`` and decoded payload ``value`` arrived."""
        ...

    @property
    def current_watermark(self) -> int:
        """The partition's watermark; MIN_TIMESTAMP before the first record."""
        ...

    def watermark_after(self, timestamp: int, value: Any) -> int:
        """The watermark this generator would have after one more record (no change)."""
        ...

    def admit(self, records: Sequence[Stamped], start: int, limit: int) -> int:
        """How many records of ``records[start:]``, in order, can be taken while the
        watermark *before* each of them is at most ``limit``: the last one taken may
        carry the watermark past ``limit`` by its own step, none after it is taken.
        Changes nothing."""
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
        """``B``; -1 for :class:`StrictlyAscending` (its watermark is ``max_ts``)."""
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

    def watermark_after(self, timestamp: int, value: Any) -> int:
        max_ts = self._max_ts
        if max_ts is not None and max_ts >= timestamp:
            return self._watermark
        return self._derive(timestamp)

    def admit(self, records: Sequence[Stamped], start: int, limit: int) -> int:
        if self._watermark > limit:
            return 0
        # The watermark before a record is at most ``limit`` while every earlier
        # timestamp is at most ``ceiling``: the first record above it is the last taken.
        ceiling = limit + self._bound + 1
        end = len(records)
        i = start
        while i < end:
            if records[i][1] > ceiling:
                return i - start + 1
            i += 1
        return end - start

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


class StrictlyAscending(BoundedOutOfOrderness):
    """Timestamps only grow within a partition: ``W = max_ts``, so a record with the
    newest timestamp seen so far is late. Flink SQL's ``WATERMARK FOR ts AS ts``
    ("strictly ascending timestamps" in Flink's docs); the bound of the derivation is -1.
    """

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0)
        self._bound = -1


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
        mark = self._mark(value)
        if mark is None:
            if self._get(value) is not MISSING:
                self.ignored += 1
            return
        if mark > self._watermark:
            self._watermark = mark

    def _mark(self, value: Any) -> int | None:
        """The watermark ``value`` carries (saturated at MAX), None if it carries none."""
        raw = self._get(value)
        kind = type(raw)
        if kind is int:
            mark: int = raw
        elif kind is float and math.isfinite(raw):
            mark = math.floor(raw)
        else:
            return None
        return MAX_TIMESTAMP if mark > MAX_TIMESTAMP else mark

    @property
    def current_watermark(self) -> int:
        return self._watermark

    def watermark_after(self, timestamp: int, value: Any) -> int:
        mark = self._mark(value)
        return self._watermark if mark is None or mark <= self._watermark else mark

    def admit(self, records: Sequence[Stamped], start: int, limit: int) -> int:
        watermark = self._watermark
        mark_of = self._mark
        end = len(records)
        i = start
        while i < end:
            if watermark > limit:
                return i - start
            mark = mark_of(records[i][2])
            if mark is not None and mark > watermark:
                watermark = mark
            i += 1
        return end - start

    def snapshot(self) -> dict[str, Any]:
        return {"watermark": self._watermark}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self._watermark = int(snapshot["watermark"])


STRATEGIES = ("bounded_out_of_orderness", "ascending", "strictly_ascending", "punctuated")


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
    elif strategy == "strictly_ascending":
        if bound:
            raise ConfigError(
                "strategy 'strictly_ascending' takes no max_out_of_orderness_ms (W = max_ts)"
            )
        generator = StrictlyAscending()
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
