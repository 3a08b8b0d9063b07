"""The timer service: keyed, deduplicated, deletable timers in two time domains.

One :class:`TimerService` belongs to one operator instance (one partition). Operators
register timers; the service owns the queues and fires them, as Flink's
``InternalTimerServiceImpl`` does.

Why the queue looks the way it does: most timers share a timestamp (every key's window
ends at the same instant), so a queue is a heap of *distinct* timestamps plus, per
timestamp, an insertion-ordered bucket of timers (see below). Registering into an
existing timestamp is two dictionary operations and no heap work; firing drains a whole
bucket per heap pop. Buckets are dicts, so dedup and delete are O(1), and their order is
registration order, which gives the stricter tie rule (equal timestamps fire in the order
they were registered). A timestamp whose bucket was emptied by deletes stays in the heap
as a stale entry until the heap is rebuilt; rebuilding once stale entries outnumber live
ones keeps the garbage bounded by the number of live timestamps.

A timestamp with a single timer holds that timer's entry itself (a *lone* entry) instead
of a one-entry dict: the other common case is a timestamp of its own per timer (a
timeout moved by every record, a session's end), where the dict was allocated on every
register, freed on every delete and was a cold object more to touch on each. A lone
entry becomes a dict when a second timer joins it. Its sequence number is not kept: a
lone timer is older than any timer that later joins its timestamp (the dict it becomes
numbers it just below the newcomer), and snapshots write the only timer of a timestamp
as ``-1`` (:data:`LONE_SEQ`, below every number the counter issues), so a restore orders
it first as well.

A bucket's entry is the bare key for a timer without a namespace (the keyed process
operator's), else the tuple ``(key, namespace)``. A bare key hashes from its cached string
hash and compares by identity, where a tuple is built, hashed and compared item by item
on every operation: for the one-moving-timer-per-key pattern (a timeout pushed back by
every record) the bare entry makes a move about a quarter cheaper. Keys are therefore
strings or ints, never tuples, so the two forms cannot be mistaken for each other.

Invariants:
- at most one timer per ``(timestamp, key, namespace)`` per domain;
- the watermark seen by the service never goes back;
- a timer registered while firing with ``timestamp <= limit`` fires in the same advance.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Hashable, Iterable, Iterator
from heapq import heapify, heappop, heappush
from itertools import count
from typing import Any, Generic, NoReturn, Protocol, TypeVar

from service.core.plain_tuples import hashable, plain
from service.core.time import MIN_TIMESTAMP, TimeDomain

K = TypeVar("K", bound=str | int)
N = TypeVar("N", bound=Hashable)

TimerCallback = Callable[[int, K, N], None]
"""Called as ``callback(timestamp, key, namespace)`` when a timer fires."""

InvalidTimer = Callable[[Any, Any], NoReturn]
"""Called as ``invalid(key, timestamp)`` by :class:`ScopedTimers` on misuse; must raise."""

_ABSENT: Any = object()
_REBUILD_SLACK = 64


Bucket = dict[Any, int]
"""One timestamp's timers: entry (``key`` or ``(key, namespace)``) -> registration seq."""

Slot = Any
"""What a timestamp maps to: a :data:`Bucket`, or the entry of its only timer (a str, int
or tuple; never a dict, so ``type(slot) is dict`` tells the two apart)."""

LONE_SEQ = -1
"""The sequence number a lone timer is written with (below every issued number)."""


def _entry(key: Any, namespace: Any) -> Any:
    """A timer's entry in its bucket: the bare key without a namespace (see above)."""
    return key if namespace is None else (key, namespace)


def _rebuild(heap: list[int], buckets: dict[int, Slot]) -> None:
    """Make ``heap`` the live timestamps (the keys of ``buckets``), dropping stale entries.

    In place: a firing loop may hold the list. ``heapify`` is linear where sorting was
    n log n; with one delete emptying a bucket per record (a moving timeout), sorting
    was about 7% of a timer move's instructions.
    """
    heap[:] = buckets
    heapify(heap)


def _split(entry: Any) -> tuple[Any, Any]:
    """``(key, namespace)`` of a bucket entry."""
    return entry if type(entry) is tuple else (entry, None)


def _slot_items(slot: Slot) -> Iterable[tuple[Any, int]]:
    """``(entry, seq)`` of a timestamp's timers in registration order, as snapshots write
    them: a timestamp's only timer has :data:`LONE_SEQ` whether it is lone or the last
    one left in a dict, so a restored queue writes exactly what the original wrote."""
    if type(slot) is not dict:
        return ((slot, LONE_SEQ),)
    if len(slot) == 1:
        return ((next(iter(slot)), LONE_SEQ),)
    return slot.items()


def _joined(slot: Slot, entry: Any, seq: int) -> Bucket:
    """The bucket a lone ``slot`` becomes when ``entry`` (numbered ``seq``) joins it."""
    return {slot: seq - 1, entry: seq}


class TimerQueue(Generic[K, N]):
    """Timers of one time domain, ordered by timestamp, ties by registration order."""

    __slots__ = ("_buckets", "_fired", "_heap", "_seq", "_seq_base", "_size", "_size_base")

    def __init__(self) -> None:
        # Both containers are only ever mutated in place, never rebound: the
        # TimerService keeps direct references to them for its inlined hot paths.
        self._heap: list[int] = []
        # timestamp -> {entry (key, or (key, namespace)): registration sequence number},
        # or the entry alone (see the module docstring)
        self._buckets: dict[int, Slot] = {}
        self._size = 0
        # Sequence numbers only order ties (and survive snapshots); gaps are harmless.
        self._seq = count()
        # For counts(): registrations are read off the sequence (every new timer takes
        # one number), fires are summed per fire_until call, deletes follow from both,
        # so the per-timer paths pay nothing for the counts.
        self._seq_base = 0
        self._size_base = 0
        self._fired = 0

    def __len__(self) -> int:
        return self._size

    def __contains__(self, timer: tuple[int, K, N]) -> bool:
        slot = self._buckets.get(timer[0])
        entry = _entry(timer[1], timer[2])
        if type(slot) is dict:
            return entry in slot
        return slot is not None and slot == entry

    def add(self, timestamp: int, key: K, namespace: N) -> bool:
        """Queue a timer; returns False (and changes nothing) if it is already queued."""
        buckets = self._buckets
        slot = buckets.get(timestamp)
        entry = _entry(key, namespace)
        if slot is None:
            buckets[timestamp] = entry
            next(self._seq)
            heappush(self._heap, timestamp)
        elif type(slot) is dict:
            if entry in slot:
                return False
            slot[entry] = next(self._seq)
        elif slot == entry:
            return False
        else:
            buckets[timestamp] = _joined(slot, entry, next(self._seq))
        self._size += 1
        return True

    def remove(self, timestamp: int, key: K, namespace: N) -> bool:
        """Dequeue a timer; returns False if it was not queued."""
        buckets = self._buckets
        slot = buckets.get(timestamp)
        entry = _entry(key, namespace)
        if type(slot) is dict:
            if slot.pop(entry, _ABSENT) is _ABSENT:
                return False
            self._size -= 1
            if slot:
                return True
        elif slot is None or slot != entry:
            return False
        else:
            self._size -= 1
        del buckets[timestamp]
        if len(self._heap) > 2 * len(buckets) + _REBUILD_SLACK:
            _rebuild(self._heap, buckets)
        return True

    def peek(self) -> int | None:
        """The earliest queued timestamp, or None; drops stale heap entries on the way."""
        heap = self._heap
        buckets = self._buckets
        while heap:
            ts = heap[0]
            if ts in buckets:
                return ts
            heappop(heap)
        return None

    def fire_until(self, limit: int, fire: Callable[[int, K, N], None]) -> int:
        """Fire, in order, every timer with ``timestamp <= limit``; returns how many fired.

        ``fire`` may add and remove timers of this queue. An added timer due by ``limit``
        fires in this call (an earlier one pre-empts the rest of the current timestamp);
        a removed timer that has not fired yet does not fire.
        """
        heap = self._heap
        buckets = self._buckets
        fired = 0
        while heap:
            ts = heap[0]
            if ts > limit:
                break
            bucket = buckets.get(ts)
            if bucket is None:  # stale: emptied by deletes, or a duplicate heap entry
                heappop(heap)
                continue
            if type(bucket) is not dict:  # a lone timer: dequeue it, then fire it
                del buckets[ts]
                heappop(heap)
                self._size -= 1
                fired += 1
                if type(bucket) is tuple:
                    fire(ts, bucket[0], bucket[1])
                else:
                    fire(ts, bucket, None)  # type: ignore[arg-type]  # bare: N is None
                continue
            preempted = False
            for entry in list(bucket):
                if bucket.pop(entry, _ABSENT) is _ABSENT:  # deleted by an earlier callback
                    continue
                self._size -= 1
                fired += 1
                if type(entry) is tuple:
                    fire(ts, entry[0], entry[1])
                else:
                    fire(ts, entry, None)  # type: ignore[arg-type]  # bare: N is None
                if not heap or heap[0] != ts:  # an earlier timer was registered
                    preempted = True
                    break
            if not bucket and buckets.get(ts) is bucket:
                del buckets[ts]
                if not preempted:
                    heappop(heap)
        self._fired += fired
        return fired

    def counts(self) -> tuple[int, int, int]:
        """``(registered, fired, deleted)`` since creation or the last :meth:`restore`.

        A move (delete + register at another time) counts as one of each; a
        registration of a timer already queued counts as none.
        """
        issued = next(self._seq)
        self._seq = count(issued)  # put the number back: reading uses none up
        registered = issued - self._seq_base
        return (
            registered,
            self._fired,
            registered - self._fired - (self._size - self._size_base),
        )

    def entries(self) -> Iterator[tuple[int, K, N, int]]:
        """Every queued timer as ``(timestamp, key, namespace, seq)`` in firing order
        (a lone timer's seq is :data:`LONE_SEQ`)."""
        for ts in sorted(self._buckets):
            for entry, seq in _slot_items(self._buckets[ts]):
                key, namespace = _split(entry)
                yield ts, key, namespace, seq

    def restore(self, timers: Iterable[tuple[int, K, N, int]]) -> None:
        """Replace the contents with ``timers``; ties are re-ordered by their ``seq``.

        New registrations get sequence numbers above every restored one, so they order
        after the restored timers of their timestamp, as in an uninterrupted run.
        """
        grouped: dict[int, Bucket] = {}
        size = 0
        top = -1
        for ts, key, namespace, seq in sorted(timers, key=lambda t: (t[0], t[3])):
            bucket = grouped.get(ts)
            if bucket is None:
                bucket = grouped[ts] = {}
            entry = _entry(key, namespace)
            if entry not in bucket:
                bucket[entry] = seq
                size += 1
            if seq > top:
                top = seq
        buckets = self._buckets
        buckets.clear()
        for ts, bucket in grouped.items():
            buckets[ts] = next(iter(bucket)) if len(bucket) == 1 else bucket
        self._heap[:] = buckets  # inserted in timestamp order, so this is already a heap
        heapify(self._heap)  # (cheap, and keeps the invariant obvious)
        self._size = size
        self._seq = count(top + 1)
        self._seq_base = top + 1
        self._size_base = size
        self._fired = 0

    def get_seq(self, timestamp: int, key: K, namespace: N) -> int | None:
        slot = self._buckets.get(timestamp)
        entry = _entry(key, namespace)
        if type(slot) is dict:
            seq = slot.get(entry)
            return LONE_SEQ if seq is not None and len(slot) == 1 else seq
        return LONE_SEQ if slot is not None and slot == entry else None


class TimerService(Generic[K, N]):
    """Event-time and processing-time timers of one operator instance.

    The operator passes its two callbacks in; the service calls them as
    ``callback(timestamp, key, namespace)``. With ``track_keys`` the service also keeps,
    per key, the set of its queued timers and a set of keys whose timers changed since
    :meth:`take_dirty_keys`, so a checkpoint can write just those keys.
    """

    __slots__ = (
        "_dirty",
        "_event",
        "_event_buckets",
        "_index",
        "_on_event",
        "_on_processing",
        "_processing",
        "_processing_buckets",
        "_processing_time",
        "_track",
        "_watermark",
    )

    def __init__(
        self,
        on_event_time: TimerCallback[K, N],
        on_processing_time: TimerCallback[K, N],
        *,
        track_keys: bool = False,
    ) -> None:
        self._on_event = on_event_time
        self._on_processing = on_processing_time
        self._event: TimerQueue[K, N] = TimerQueue()
        self._processing: TimerQueue[K, N] = TimerQueue()
        # Direct references for the inlined registration path (the queues never rebind
        # them): registration is the hottest call of a window operator.
        self._event_buckets = self._event._buckets
        self._processing_buckets = self._processing._buckets
        self._watermark = MIN_TIMESTAMP
        self._processing_time = MIN_TIMESTAMP
        self._track = track_keys
        # key -> {(domain is event, timestamp, namespace)}
        self._index: dict[K, set[tuple[bool, int, N]]] = {}
        self._dirty: set[K] = set()

    # -- time ---------------------------------------------------------------------------
    @property
    def current_watermark(self) -> int:
        """The last watermark this service advanced to (MIN before the first)."""
        return self._watermark

    @property
    def current_processing_time(self) -> int:
        """The processing time of the last :meth:`advance_processing_time`."""
        return self._processing_time

    def advance_watermark(self, watermark: int) -> int:
        """Move event time to ``watermark`` and fire every event timer at or before it.

        The new watermark is visible to the callbacks. A watermark that is not greater
        than the current one changes nothing. Returns how many timers fired.
        """
        if watermark <= self._watermark:
            return 0
        self._watermark = watermark
        if self._track:
            return self._event.fire_until(watermark, self._fire_event_tracked)
        return self._event.fire_until(watermark, self._on_event)

    def advance_processing_time(self, now: int) -> int:
        """Fire every processing-time timer at or before ``now``; returns how many fired."""
        if now > self._processing_time:
            self._processing_time = now
        if self._track:
            return self._processing.fire_until(now, self._fire_processing_tracked)
        return self._processing.fire_until(now, self._on_processing)

    def next_processing_time(self) -> int | None:
        """When the earliest processing-time timer is due; the runtime's one wake-up."""
        return self._processing.peek()

    def next_event_time(self) -> int | None:
        """The earliest event-time timer, or None."""
        return self._event.peek()

    # -- registration -------------------------------------------------------------------
    # The register methods inline TimerQueue.add, and delete_event_time_timer inlines
    # TimerQueue.remove: one Python call per operation on the per-record paths. Keep them
    # in step with TimerQueue.add/remove.
    def register_event_time_timer(self, timestamp: int, key: K, namespace: N) -> None:
        """Queue an event-time timer; a no-op if ``(timestamp, key, namespace)`` is queued."""
        # dict.get, not try/except KeyError: a raised KeyError costs ~0.4 us, and every
        # timer with a timestamp of its own (timeouts, sessions) would pay it.
        buckets = self._event_buckets
        slot = buckets.get(timestamp)
        entry = key if namespace is None else (key, namespace)
        queue = self._event
        if slot is None:
            buckets[timestamp] = entry
            next(queue._seq)
            heappush(queue._heap, timestamp)
        elif type(slot) is dict:
            if entry in slot:
                return
            slot[entry] = next(queue._seq)
        elif slot == entry:
            return
        else:
            buckets[timestamp] = _joined(slot, entry, next(queue._seq))
        queue._size += 1
        if self._track:
            self._index_add(key, (True, timestamp, namespace))

    def delete_event_time_timer(self, timestamp: int, key: K, namespace: N) -> None:
        """Dequeue an event-time timer; a no-op if it is not queued."""
        # TimerQueue.remove inlined (one Python call per delete instead of two).
        buckets = self._event_buckets
        slot = buckets.get(timestamp)
        entry = key if namespace is None else (key, namespace)
        if type(slot) is dict:
            if slot.pop(entry, _ABSENT) is _ABSENT:
                return
            emptied = not slot
        elif slot is None or slot != entry:
            return
        else:
            emptied = True
        queue = self._event
        queue._size -= 1
        if emptied:
            del buckets[timestamp]
            heap = queue._heap
            if len(heap) > 2 * len(buckets) + _REBUILD_SLACK:
                _rebuild(heap, buckets)
        if self._track:
            self._index_remove(key, (True, timestamp, namespace))

    def move_event_time_timer(self, old: int, new: int, key: K, namespace: N) -> None:
        """``delete_event_time_timer(old, ...)`` then ``register_event_time_timer(new, ...)``.

        One call for the move-a-deadline pattern (a timeout pushed back by every record).
        Exactly the two operations: the moved timer orders after the timers already
        queued at ``new`` (even when ``new == old``), and an absent ``old`` is ignored.
        """
        buckets = self._event_buckets
        queue = self._event
        entry = key if namespace is None else (key, namespace)
        slot = buckets.get(old)
        if slot is not None:
            if type(slot) is dict:
                removed = slot.pop(entry, _ABSENT) is not _ABSENT
                emptied = removed and not slot
            else:
                removed = emptied = slot == entry
            if emptied:
                del buckets[old]
                heap = queue._heap
                if len(heap) > 2 * len(buckets) + _REBUILD_SLACK:
                    _rebuild(heap, buckets)
            if removed:
                queue._size -= 1
                if self._track:
                    self._index_remove(key, (True, old, namespace))
        slot = buckets.get(new)
        if slot is None:
            buckets[new] = entry
            next(queue._seq)
            heappush(queue._heap, new)
        elif type(slot) is dict:
            if entry in slot:
                return
            slot[entry] = next(queue._seq)
        elif slot == entry:
            return
        else:
            buckets[new] = _joined(slot, entry, next(queue._seq))
        queue._size += 1
        if self._track:
            self._index_add(key, (True, new, namespace))

    def register_processing_time_timer(self, timestamp: int, key: K, namespace: N) -> None:
        """Queue a processing-time timer; a no-op if it is already queued."""
        if self._processing.add(timestamp, key, namespace) and self._track:
            self._index_add(key, (False, timestamp, namespace))

    def delete_processing_time_timer(self, timestamp: int, key: K, namespace: N) -> None:
        """Dequeue a processing-time timer; a no-op if it is not queued."""
        if self._processing.remove(timestamp, key, namespace) and self._track:
            self._index_remove(key, (False, timestamp, namespace))

    def move_processing_time_timer(self, old: int, new: int, key: K, namespace: N) -> None:
        """``delete_processing_time_timer(old, ...)`` then ``register_processing_time_timer``."""
        self.delete_processing_time_timer(old, key, namespace)
        self.register_processing_time_timer(new, key, namespace)

    def register(self, domain: TimeDomain, timestamp: int, key: K, namespace: N) -> None:
        if domain is TimeDomain.EVENT_TIME:
            self.register_event_time_timer(timestamp, key, namespace)
        else:
            self.register_processing_time_timer(timestamp, key, namespace)

    def delete(self, domain: TimeDomain, timestamp: int, key: K, namespace: N) -> None:
        if domain is TimeDomain.EVENT_TIME:
            self.delete_event_time_timer(timestamp, key, namespace)
        else:
            self.delete_processing_time_timer(timestamp, key, namespace)

    # -- metrics ------------------------------------------------------------------------
    @property
    def event_timers(self) -> int:
        """How many event-time timers are queued."""
        return len(self._event)

    @property
    def processing_timers(self) -> int:
        """How many processing-time timers are queued."""
        return len(self._processing)

    def counts(self) -> dict[str, tuple[int, int, int]]:
        """Per domain (``"event"``, ``"processing"``): ``(registered, fired, deleted)``
        since creation or restore. For metrics, read per batch; costs O(1)."""
        return {"event": self._event.counts(), "processing": self._processing.counts()}

    def is_queued(self, domain: TimeDomain, timestamp: int, key: K, namespace: N) -> bool:
        queue = self._event if domain is TimeDomain.EVENT_TIME else self._processing
        return (timestamp, key, namespace) in queue

    def timers(self, domain: TimeDomain) -> Iterator[tuple[int, K, N]]:
        """The queued timers of ``domain`` in firing order."""
        queue = self._event if domain is TimeDomain.EVENT_TIME else self._processing
        for ts, key, namespace, _ in queue.entries():
            yield ts, key, namespace

    # -- snapshots ----------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """All timers and the watermark as plain data (lists, ints; JSON-safe keys).

        Each timer is ``[timestamp, key, namespace, seq]``; ``seq`` keeps the order of
        timers that share a timestamp across a restore.
        """
        return {
            "watermark": self._watermark,
            "event": [[ts, k, plain(ns), s] for ts, k, ns, s in self._event.entries()],
            "processing": [[ts, k, plain(ns), s] for ts, k, ns, s in self._processing.entries()],
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace all timers and the watermark with those of ``snapshot``."""
        self._watermark = int(snapshot["watermark"])
        self._restore_queues(snapshot["event"], snapshot["processing"])

    def snapshot_key(self, key: K) -> dict[str, list[list[Any]]]:
        """The queued timers of one key (needs ``track_keys``), for incremental checkpoints."""
        event: list[list[Any]] = []
        processing: list[list[Any]] = []
        for is_event, ts, namespace in self._index.get(key, ()):
            queue = self._event if is_event else self._processing
            target = event if is_event else processing
            target.append([ts, plain(namespace), queue.get_seq(ts, key, namespace)])
        event.sort(key=lambda t: (t[0], t[2]))
        processing.sort(key=lambda t: (t[0], t[2]))
        return {"event": event, "processing": processing}

    def snapshot_keys(self, keys: Container[K]) -> dict[K, dict[str, list[list[Any]]]]:
        """The queued timers of ``keys``, as :meth:`snapshot_key` gives them, by key.

        Keys with no queued timer are left out. One scan of both queues instead of the
        per-key index: for operators that know their changed keys themselves and would
        rather not pay the index on every registration (``track_keys`` is not needed).
        """
        found: dict[K, dict[str, list[list[Any]]]] = {}
        for domain, queue in (("event", self._event), ("processing", self._processing)):
            buckets = queue._buckets
            for ts in sorted(buckets):
                # a bucket is in registration order, which is seq order
                for entry, seq in _slot_items(buckets[ts]):
                    key, namespace = _split(entry)
                    if key in keys:
                        per_key = found.get(key)
                        if per_key is None:
                            per_key = found[key] = {"event": [], "processing": []}
                        per_key[domain].append([ts, plain(namespace), seq])
        return found

    def restore_keys(
        self, watermark: int, per_key: Iterable[tuple[K, dict[str, list[list[Any]]]]]
    ) -> None:
        """Replace all timers with those of :meth:`snapshot_key` results, and the watermark."""
        event: list[list[Any]] = []
        processing: list[list[Any]] = []
        for key, timers in per_key:
            event.extend([ts, key, ns, seq] for ts, ns, seq in timers["event"])
            processing.extend([ts, key, ns, seq] for ts, ns, seq in timers["processing"])
        self._watermark = watermark
        self._restore_queues(event, processing)

    def take_dirty_keys(self) -> set[K]:
        """Keys whose timers changed since the last call (needs ``track_keys``)."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    # -- internals ----------------------------------------------------------------------
    def _restore_queues(self, event: list[list[Any]], processing: list[list[Any]]) -> None:
        self._event.restore((ts, k, hashable(ns), s) for ts, k, ns, s in event)
        self._processing.restore((ts, k, hashable(ns), s) for ts, k, ns, s in processing)
        self._index = {}
        self._dirty = set()
        if self._track:
            for is_event, queue in ((True, self._event), (False, self._processing)):
                for ts, key, namespace, _ in queue.entries():
                    self._index.setdefault(key, set()).add((is_event, ts, namespace))

    def _index_add(self, key: K, timer: tuple[bool, int, N]) -> None:
        timers = self._index.get(key)
        if timers is None:
            self._index[key] = {timer}
        else:
            timers.add(timer)
        self._dirty.add(key)

    def _index_remove(self, key: K, timer: tuple[bool, int, N]) -> None:
        timers = self._index.get(key)
        if timers is not None:
            timers.discard(timer)
            if not timers:
                del self._index[key]
        self._dirty.add(key)

    def _fire_event_tracked(self, timestamp: int, key: K, namespace: N) -> None:
        # _index_remove inlined: this runs once per fired timer.
        timers = self._index.get(key)
        if timers is not None:
            timers.discard((True, timestamp, namespace))
            if not timers:
                del self._index[key]
        self._dirty.add(key)
        self._on_event(timestamp, key, namespace)

    def _fire_processing_tracked(self, timestamp: int, key: K, namespace: N) -> None:
        timers = self._index.get(key)
        if timers is not None:
            timers.discard((False, timestamp, namespace))
            if not timers:
                del self._index[key]
        self._dirty.add(key)
        self._on_processing(timestamp, key, namespace)


class KeyScope(Protocol):
    """Whatever holds the current key (an operator's context)."""

    @property
    def key(self) -> Any: ...


class ScopedTimers(Generic[K, N]):
    """The timers of one namespace of a service, for the key a scope holds at the call.

    Flink's keyed timer service: the operator points ``scope.key`` at the current key,
    and user code registers and deletes timers by timestamp alone. With no current key,
    or a registered timestamp that is not an ``int``, ``invalid(key, timestamp)`` is
    called and must raise. Each method checks the call and hands it to the service;
    :class:`KeyTimers`, the view of namespace ``None`` that keyed process functions get,
    inlines the event-time ones (one Python call per operation on the per-record path).
    """

    __slots__ = ("_invalid", "_namespace", "_scope", "_service")

    def __init__(
        self,
        service: TimerService[K, N],
        scope: KeyScope,
        namespace: N,
        invalid: InvalidTimer,
    ) -> None:
        self._service = service
        self._scope = scope
        self._namespace = namespace
        self._invalid = invalid

    def register_event_time_timer(self, timestamp: int) -> None:
        key = self._scope.key
        if key is None or type(timestamp) is not int:
            self._invalid(key, timestamp)
        self._service.register_event_time_timer(timestamp, key, self._namespace)

    def delete_event_time_timer(self, timestamp: int) -> None:
        key = self._scope.key
        if key is None:
            self._invalid(key, timestamp)
        self._service.delete_event_time_timer(timestamp, key, self._namespace)

    def register_processing_time_timer(self, timestamp: int) -> None:
        key = self._scope.key
        if key is None or type(timestamp) is not int:
            self._invalid(key, timestamp)
        self._service.register_processing_time_timer(timestamp, key, self._namespace)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        key = self._scope.key
        if key is None:
            self._invalid(key, timestamp)
        self._service.delete_processing_time_timer(timestamp, key, self._namespace)


class KeyTimers(ScopedTimers[K, None]):
    """:class:`ScopedTimers` of the namespace ``None``: a timer's entry is the bare key.

    The same behaviour; its event-time methods inline the service's, for bare entries:
    one Python call per operation instead of two, on the path a timeout moved by every
    record takes twice per record.
    """

    __slots__ = ("_buckets", "_heap", "_queue", "_track")

    def __init__(
        self, service: TimerService[K, None], scope: KeyScope, invalid: InvalidTimer
    ) -> None:
        super().__init__(service, scope, None, invalid)
        # The service's event queue and its containers, read once here instead of through
        # the service on every call (none of them is ever rebound; see TimerQueue). Keep
        # the two methods below in step with the service's register_event_time_timer and
        # delete_event_time_timer.
        self._queue = service._event
        self._buckets = service._event_buckets
        self._heap = service._event._heap
        self._track = service._track

    def register_event_time_timer(self, timestamp: int) -> None:
        key = self._scope.key
        if key is None or type(timestamp) is not int:
            self._invalid(key, timestamp)
        buckets = self._buckets
        slot = buckets.get(timestamp)
        queue = self._queue
        if slot is None:
            buckets[timestamp] = key
            next(queue._seq)
            heappush(self._heap, timestamp)
        elif type(slot) is dict:
            if key in slot:
                return
            slot[key] = next(queue._seq)
        elif slot == key:
            return
        else:
            seq = next(queue._seq)
            buckets[timestamp] = {slot: seq - 1, key: seq}  # _joined, inlined
        queue._size += 1
        if self._track:
            self._service._index_add(key, (True, timestamp, None))

    def delete_event_time_timer(self, timestamp: int) -> None:
        key = self._scope.key
        if key is None:
            self._invalid(key, timestamp)
        buckets = self._buckets
        slot = buckets.get(timestamp)
        if type(slot) is dict:
            if slot.pop(key, _ABSENT) is _ABSENT:
                return
            emptied = not slot
        elif slot is None or slot != key:
            return
        else:
            emptied = True
        self._queue._size -= 1
        if emptied:
            del buckets[timestamp]
            heap = self._heap
            if len(heap) > 2 * len(buckets) + _REBUILD_SLACK:
                _rebuild(heap, buckets)
        if self._track:
            self._service._index_remove(key, (True, timestamp, None))
