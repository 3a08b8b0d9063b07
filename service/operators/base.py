"""What every operator instance is to the runtime, and what it emits.

An operator instance serves one partition of one pipeline (a partition is the key group:
semantics.md section 7). It is synchronous and does no I/O: the runtime hands it batches
of decoded, timestamped records and watermarks, and drains its :class:`Collector` after
each call to produce what was emitted. That keeps the hot path a plain loop and puts
batching, backpressure and serialization in one place (the runtime's sinks).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

InputRecord = tuple[str, int, Any, int, Any]
"""``(key, timestamp, value, position, source)`` as the runtime hands records in.

``position`` is the record's offset in its partition (deterministic output ids are made
from it); ``source`` is opaque to operators and comes back unchanged in late and failed
outputs, so the runtime can forward the original Kafka key and value untouched.
"""


class FireKind(StrEnum):
    """Why a window result was emitted (semantics.md section 5)."""

    EARLY = "early"
    """Before the watermark passed the window's ``max_ts``."""
    ON_TIME = "on_time"
    """The firing when the watermark reached ``max_ts``."""
    LATE = "late"
    """After that, caused by an allowed-late record."""


@dataclass(slots=True)
class WindowResult:
    """One firing of one window of one key."""

    id: str
    key: str
    start: int
    end: int
    result: Any
    fire: FireKind
    seq: int
    watermark: int

    @property
    def timestamp(self) -> int:
        """A window result is timestamped at the window's ``max_ts``."""
        return self.end - 1


@dataclass(slots=True)
class KeyedOutput:
    """A value emitted by a keyed process function."""

    id: str
    key: str
    timestamp: int | None
    value: Any


@dataclass(slots=True)
class JoinRow:
    """One output row of a join (``operators/join/``)."""

    id: str
    key: str
    kind: str
    """The join's kind: ``interval``, ``window``, ``temporal`` or ``lookup``."""
    timestamp: int
    """``max(l.ts, r.ts)`` for an interval join's pair, a padded row's own, a window's
    ``end - 1``, a temporal join's left row's."""
    value: Any
    """The projection of ``(left, right)``, a missing side being None."""
    window: tuple[int, int] | None = None
    """The window of a window join's row."""


@dataclass(slots=True)
class Upsert:
    """One row of an upsert stream (a running aggregate's or a Top-N's rank row,
    ``operators/table/``; an outer regular join's row, ``operators/join/regular_outer.py``):
    the key's newest ``result``, or, with ``result`` None, the key's delete (a tombstone)."""

    id: str
    key: str
    result: dict[str, Any] | None
    """The aggregations' values (a Top-N's ``{"partition", "rank", "row"}``, a join row's
    ``select``); None: the key is deleted (its state expired, its rank is no longer
    held, its padded row found a partner)."""
    seq: int
    """The key's emissions before this one (0, 1, 2, ...); a delete carries the next."""
    timestamp: int
    """The largest event timestamp folded into the key, a rank row's row's, a join row's
    ``max(l.ts, r.ts)`` (the record's Kafka timestamp)."""


@dataclass(slots=True)
class LateRecord:
    """A record every window of which was already past its cleanup time."""

    source: Any
    key: str
    timestamp: int
    watermark: int
    input: str | None = None
    """The input it came to, for an operator with several (a join); None otherwise."""


@dataclass(slots=True)
class FailedRecord:
    """A record (or timer) that user code or the operator could not process."""

    source: Any
    key: str | None
    reason: str
    detail: str
    headers: tuple[tuple[str, bytes], ...] = ()
    """Extra ``clockwork.*`` headers for the dead letter (a bad value's field and function)."""


@dataclass(slots=True)
class Collector:
    """What an operator emitted since the runtime last drained it.

    The runtime swaps the lists out after each call (``drain``); tests read them.
    """

    results: list[WindowResult | KeyedOutput | JoinRow | Upsert] = field(default_factory=list)
    late: list[LateRecord] = field(default_factory=list)
    failed: list[FailedRecord] = field(default_factory=list)
    dropped_late: int = 0
    """Late records counted and dropped because no late output is configured."""
    bad_values: dict[tuple[str, str], int] = field(default_factory=dict)
    """Values an aggregation could not take, by ``(field, reason)``, since the last drain
    (whether their records were dead-lettered or aggregated with the field as NULL)."""

    def drain(
        self,
    ) -> tuple[
        list[WindowResult | KeyedOutput | JoinRow | Upsert], list[LateRecord], list[FailedRecord]
    ]:
        out = (self.results, self.late, self.failed)
        self.results, self.late, self.failed = [], [], []
        return out


@dataclass(slots=True)
class OperatorGauges:
    """Point-in-time numbers the runtime exports per partition (read per batch, not per record)."""

    event_timers: int
    processing_timers: int
    windows_open: int
    keys: int


class Operator(Protocol):
    """One operator instance, owned by one partition task."""

    collector: Collector

    @property
    def current_watermark(self) -> int:
        """The last watermark delivered (MIN before the first)."""
        ...

    def process_batch(self, records: Sequence[InputRecord]) -> None:
        """Process records in order; emissions go to :attr:`collector`."""
        ...

    def advance_watermark(self, watermark: int) -> None:
        """Fire event-time timers up to ``watermark`` (a smaller one changes nothing)."""
        ...

    def advance_processing_time(self, now: int) -> None:
        """Fire processing-time timers up to ``now``."""
        ...

    def next_processing_time(self) -> int | None:
        """When the runtime must call :meth:`advance_processing_time` next, or None."""
        ...

    def gauges(self) -> OperatorGauges: ...

    def timer_counts(self) -> dict[str, tuple[int, int, int]]:
        """Per domain (``"event"``, ``"processing"``): timers ``(registered, fired, deleted)``
        since creation or restore; O(1), for the runtime's metrics."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """The whole state as plain data (JSON-safe: dicts, lists, str, int, float, bool)."""
        ...

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace the whole state with a :meth:`snapshot`."""
        ...

    def snapshot_changes(self) -> dict[str, Any]:
        """State of the keys changed since the last call, as ``{entry: plain data or None}``.

        ``None`` means the entry is gone (a tombstone). Together with
        :meth:`restore_changes` this is the incremental checkpoint: applying every change
        ever taken, newest last per entry, rebuilds the state.
        """
        ...

    def restore_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        """Rebuild the state from the newest value of each entry (tombstones skipped)."""
        ...


@runtime_checkable
class StreamsChanges(Protocol):
    """An operator whose checkpoint entries can be taken one at a time: the runtime
    encodes each as it comes, so a checkpoint of many changed keys never holds all their
    plain data at once (a session key's is ~1.6 KB as Python objects, ~150 B encoded)."""

    def iter_changes(self) -> Iterator[tuple[str, Any]]:
        """:meth:`Operator.snapshot_changes`'s entries, in its order, the metadata last;
        consumed whole before the operator is used again (it reads the state as it goes)."""
        ...


@runtime_checkable
class AppliesChanges(Protocol):
    """An operator on the rocksdb backend's state maps whose restore can be fed in
    batches: the runtime streams the changelog onto it (bounded memory) instead of
    reading a partition's newest entries into a dict for :meth:`Operator.restore_changes`."""

    def apply_changes(self, entries: Iterable[tuple[str, Any]]) -> None:
        """Apply changelog entries onto the state held now (what the state maps' store
        and the earlier calls hold), in the changelog's order: the last value of an entry
        wins, None deletes it. Called any number of times, instead of
        :meth:`Operator.restore_changes`, on an operator just built."""
        ...


@runtime_checkable
class EmitsAtCheckpoint(Protocol):
    """An operator with outputs held for the checkpoint (a running aggregate under
    exactly-once delivery emits its dirty keys there): the runtime calls
    :meth:`before_checkpoint` right before :meth:`Operator.snapshot_changes` and drains
    what it emitted into the outputs that checkpoint covers."""

    def before_checkpoint(self) -> None: ...
