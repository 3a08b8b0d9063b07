"""Event-time timers in an ordered key-value store (the rocksdb backend's; issue #53).

Flink's RocksDB backend keeps its timers in RocksDB by default (its RocksDB priority
queue): a column family ordered by (timestamp, key, namespace), with a small cache of
its head on the heap. This module does the same for the window operators' event-time
timers, on a :class:`~service.core.state_cache.OrderedStore` (one named map of the
partition's RocksDB; :class:`~service.core.state_cache.MemoryStore` in unit tests).

**The order.** A stored timer's key is its ``(timestamp, sequence)`` as 32 hex digits
(the timestamp offset by 2^63, then the sequence number plus one), which sorts bytewise
as the pair does. The sequence number is the registration's, issued by one counter that
survives checkpoints, so the timers fire in :class:`~service.core.timers.TimerQueue`'s
order: by timestamp, ties in registration order, a restored timer before any registered
after the restore. Its value is ``[key, namespace]``.

**What stays on the heap**, bounded whatever the number of timers:

- the *buffer*: the timers registered, and the stored timers deleted or fired, since the
  last write to the store. A checkpoint writes it (:meth:`StoredTimerQueue.flush`, in one
  WriteBatch with ``checkpoint=True``); past :attr:`StoredTimerQueue.limit` entries it is
  written ahead of the checkpoint (``checkpoint=False``, as the state cache's evictions);
- the *head*: up to :data:`HEAD` of the store's next timers, read in order by one scan
  and refilled when used up.

Firing takes the smaller of the head's first live timer and the buffer's earliest
registration, until the limit: a timer registered by a callback at or before the limit
fires in the same advance, after its timestamp's earlier registrations.

**Per key** (:class:`StoredTimerService`): deleting a timer needs its sequence number,
and a checkpoint needs the changed keys' timers; both come from the key's entry in a
second map, the operator's ``"timers"`` :class:`~service.core.state_cache.StateCache`
(``{"event": [[ts, namespace, seq], ...], "processing": [...]}``, what the changelog
holds per key), kept up to date at every registration, deletion and firing. So a
checkpoint reads only its changed keys, and a restore onto a local checkpoint applies
only the changelog's tail: a tail key's old timers (its entry in the store) are deleted
and its new ones stored. The count of queued timers and the next sequence number are
stored with every write (the entry :data:`META_KEY`; none while no timer is queued).

**Processing-time timers stay on the heap** (a :class:`~service.core.timers.TimerQueue`):
their per-key entries are in the same map; a local restore reads every key's entry back
only when the store held processing-time timers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator
from heapq import heapify, heappop, heappush
from typing import Any

from service.core.plain_tuples import hashable, plain
from service.core.state_cache import OrderedStore, StateCache
from service.core.time import MAX_TIMESTAMP, TimeDomain
from service.core.timers import LONE_SEQ, N, TimerCallback, TimerService

__all__ = [
    "HEAD",
    "META_KEY",
    "StoredTimerQueue",
    "StoredTimerService",
    "TimerEntryCodec",
    "timer_key",
]

HEAD = 1024
"""How many of the store's next timers one scan reads onto the heap."""
META_KEY = "!meta"
"""The queue's own entry: ``{"size", "seq", "processing"}`` (sorts before every timer)."""
_FIRST = "0"
"""Where the timers' keys start (after :data:`META_KEY`)."""
_OFFSET = 2**63
_SEQ_MASK = (1 << 64) - 1
BUFFERED_TIMER_BYTES = 250
"""What one buffered registration costs on the heap (its key string, its tuple, a dict
slot and a heap slot): the buffer's bound is the timers map's share of the cache over it."""
MIN_BUFFER = 8
_REBUILD_SLACK = 64


def timer_key(timestamp: int, seq: int) -> str:
    """The stored key of a timer: sorts as ``(timestamp, seq)`` does."""
    return f"{timestamp + _OFFSET:016x}{seq + 1:016x}"


def _ordinal(timestamp: int, seq: int) -> int:
    """A timer's key as the 128-bit number its hex digits spell: what the heap side
    keeps and compares (an int is cheaper than the string, which only the store sees)."""
    return ((timestamp + _OFFSET) << 64) | (seq + 1)


def _name(ordinal: int) -> str:
    return f"{ordinal:032x}"


def _time_of(ordinal: int) -> int:
    return (ordinal >> 64) - _OFFSET


def _seq_of(ordinal: int) -> int:
    return (ordinal & _SEQ_MASK) - 1


def _bound(limit: int) -> int:
    """Every timer whose ordinal is below this has a timestamp at or before ``limit``."""
    if limit >= MAX_TIMESTAMP:
        return 1 << 128
    return (limit + 1 + _OFFSET) << 64


class StoredTimerQueue:
    """Event-time timers in an :class:`OrderedStore`, a bounded buffer and head in memory.

    It knows timers by ``(timestamp, seq)``; which key's timer has which number is its
    caller's (:class:`StoredTimerService`). ``limit``: the buffer's bound, read again at
    every write (a map's share of the cache can change).
    """

    __slots__ = (
        "_deletes",
        "_exhausted",
        "_head",
        "_head_size",
        "_next",
        "_pending",
        "_puts",
        "_shadowed",
        "bound",
        "limit",
        "processing",
        "seq",
        "size",
        "store",
        "writes",
    )

    def __init__(
        self, store: OrderedStore, bound: Callable[[], int] | None = None, head: int = HEAD
    ) -> None:
        self.store = store
        self._head_size = head
        self.bound = bound or (lambda: 4096)
        """What :attr:`limit` is set to at each write."""
        self.limit = self.bound()
        """The buffer's bound: past it, the buffer is written ahead of the checkpoint."""
        self._puts: dict[int, tuple[Any, Any]] = {}
        """Registered since the last write: timer key -> (key, namespace)."""
        self._pending: list[int] = []
        """A heap of the keys of ``_puts`` (a key no longer there is skipped)."""
        self._deletes: set[int] = set()
        """Stored timers deleted or fired since the last write."""
        self._shadowed: set[int] = set()
        """Registrations of a key a delete was buffered for (a restore's re-put): the
        store may hold it, so firing or deleting it deletes it there too."""
        self._head: deque[tuple[int, Any, Any]] = deque()
        """The store's next timers, ``(timer key, key, namespace)``, in order."""
        self._next = _FIRST
        """Where the next scan starts: every live stored timer below it is in the head."""
        self._exhausted = False
        self.writes = 0
        found = store.load(META_KEY)
        meta: dict[str, Any] = found[0] if found is not None else {}
        self.size: int = int(meta.get("size", 0))
        """Timers queued, stored and buffered."""
        self.seq: int = int(meta.get("seq", 0))
        """The next registration's sequence number."""
        self.processing: int = int(meta.get("processing", 0))
        """Processing-time timers at the last write (set by the service)."""

    def __len__(self) -> int:
        return self.size

    @property
    def buffered(self) -> int:
        """Entries held until the next write (registrations and deletes)."""
        return len(self._puts) + len(self._deletes)

    @property
    def held(self) -> int:
        """Timers read into the head."""
        return len(self._head)

    # -- changes ----------------------------------------------------------------------
    def put(self, timestamp: int, seq: int, key: Any, namespace: Any) -> None:
        """Queue a timer under ``(timestamp, seq)`` (a new one: the caller checked)."""
        name = _ordinal(timestamp, seq)
        deletes = self._deletes
        if deletes and name in deletes:
            deletes.remove(name)
            self._shadowed.add(name)
        self._puts[name] = (key, namespace)
        heappush(self._pending, name)
        self.size += 1
        if seq >= self.seq:
            self.seq = seq + 1
        if len(self._puts) + len(deletes) > self.limit:
            self.write(False)

    def remove(self, timestamp: int, seq: int) -> None:
        """Dequeue the timer ``(timestamp, seq)`` (queued: the caller checked)."""
        name = _ordinal(timestamp, seq)
        self.size -= 1
        puts = self._puts
        if puts.pop(name, None) is not None:
            pending = self._pending
            if len(pending) > 2 * len(puts) + _REBUILD_SLACK:
                # the heap's entries of deleted registrations: dropped once they
                # outnumber the live ones (a timer moved by every record)
                pending[:] = puts
                heapify(pending)
            if name not in self._shadowed:
                return
        self._deletes.add(name)
        if len(puts) + len(self._deletes) > self.limit:
            self.write(False)

    def issue(self) -> int:
        """A new registration's sequence number."""
        seq = self.seq
        self.seq = seq + 1
        return seq

    # -- reading ----------------------------------------------------------------------
    def _first_stored(self) -> tuple[int, Any, Any] | None:
        head = self._head
        deletes = self._deletes
        while True:
            while head:
                first = head[0]
                if first[0] not in deletes:
                    return first
                head.popleft()  # deleted since it was read: its delete is buffered
            if self._exhausted:
                return None
            self._fill()

    def _fill(self) -> None:
        size = self._head_size
        rows = self.store.scan(self._next, size)
        head = self._head
        for name, value in rows:
            head.append((int(name, 16), value[0], hashable(value[1])))
        if rows:
            self._next = rows[-1][0] + "\x00"
        self._exhausted = len(rows) < size

    def _first_buffered(self) -> int | None:
        pending = self._pending
        puts = self._puts
        while pending:
            if pending[0] in puts:
                return pending[0]
            heappop(pending)
        return None

    def peek(self) -> int | None:
        """The earliest queued timestamp, or None."""
        stored = self._first_stored()
        buffered = self._first_buffered()
        if stored is None and buffered is None:
            return None
        if stored is None or (buffered is not None and buffered < stored[0]):
            assert buffered is not None
            return _time_of(buffered)
        return _time_of(stored[0])

    def pop_until(self, limit: int) -> tuple[int, int, Any, Any] | None:
        """Dequeue the earliest timer if its timestamp is at or before ``limit``:
        ``(timestamp, seq, key, namespace)``, or None."""
        bound = _bound(limit)
        stored = self._first_stored()
        buffered = self._first_buffered()
        if stored is not None and (buffered is None or stored[0] < buffered):
            name = stored[0]
            if name >= bound:
                return None
            self._head.popleft()
            self._deletes.add(name)
            key, namespace = stored[1], stored[2]
        elif buffered is not None:
            name = buffered
            if name >= bound:
                return None
            heappop(self._pending)
            key, namespace = self._puts.pop(name)
            if name in self._shadowed:
                self._deletes.add(name)
        else:
            return None
        self.size -= 1
        timestamp = _time_of(name)
        seq = _seq_of(name)
        if len(self._deletes) > self.limit:
            self.write(False)
        return timestamp, seq, key, namespace

    def entries(self) -> Iterator[tuple[int, int, Any, Any]]:
        """Every queued timer, ``(timestamp, seq, key, namespace)``, in firing order (reads
        the whole store: snapshots and tests only)."""
        found: list[tuple[int, Any, Any]] = [(n, k, ns) for n, (k, ns) in self._puts.items()]
        start = _FIRST
        deletes = self._deletes
        while True:
            rows = self.store.scan(start, HEAD)
            for name, value in rows:
                ordinal = int(name, 16)
                if ordinal not in deletes and ordinal not in self._puts:
                    found.append((ordinal, value[0], hashable(value[1])))
            if len(rows) < HEAD:
                break
            start = rows[-1][0] + "\x00"
        found.sort(key=lambda item: item[0])
        for ordinal, key, namespace in found:
            yield _time_of(ordinal), _seq_of(ordinal), key, namespace

    # -- the store --------------------------------------------------------------------
    def flush(self) -> None:
        """A checkpoint: the buffer into the store, in one batch."""
        self.write(True)

    def write(self, checkpoint: bool) -> None:
        """The buffer into the store in one batch (with the count and the next sequence
        number); ``checkpoint``: a checkpoint's flush, else ahead of the checkpoint."""
        puts = self._puts
        batch: dict[str, Any] = dict.fromkeys(map(_name, self._deletes))
        for name, (key, namespace) in puts.items():
            batch[_name(name)] = [key, plain(namespace)]
        # With no timer left the numbering may start over: no entry (an empty store).
        batch[META_KEY] = (
            {"size": self.size, "seq": self.seq, "processing": self.processing}
            if self.size or self.processing
            else None
        )
        self.store.write(batch, checkpoint)  # raises: nothing changed here
        self.writes += 1
        # Every live stored timer below the head's first (or the next scan's start) is
        # gone; the written registrations may sort anywhere: scan again from the lowest.
        start = _name(self._head[0][0]) if self._head else self._next
        if puts:
            start = min(start, _name(min(puts)))
        self._next = start
        self._head.clear()
        self._exhausted = False
        puts.clear()
        self._pending.clear()
        self._deletes.clear()
        self._shadowed.clear()
        self.limit = self.bound()

    def clear(self) -> None:
        """Dequeue every timer (the store's are deleted at the next write)."""
        names = [_ordinal(ts, seq) for ts, seq, _, _ in self.entries()]
        self._puts.clear()
        self._pending.clear()
        self._head.clear()
        self._deletes.update(names)
        self._shadowed.clear()
        self._next = _FIRST
        self._exhausted = False
        self.size = 0


class TimerEntryCodec:
    """A key's entry of the ``"timers"`` map: live, namespaces are tuples; stored, lists."""

    entry_overhead_bytes = 500
    """A held entry beyond its encoded size: the dict, its lists and the namespace tuples
    (measured for a session's two timers: ~580 B in all, ~80 B encoded;
    ``tests/operators/test_held_bytes.py``)."""

    def encode(self, value: Any) -> Any:
        return {
            domain: [[ts, plain(ns), seq] for ts, ns, seq in value[domain]]
            for domain in ("event", "processing")
        }

    def decode(self, data: Any) -> Any:
        return {
            domain: [[ts, hashable(ns), seq] for ts, ns, seq in data[domain]]
            for domain in ("event", "processing")
        }


TIMER_ENTRY_CODEC = TimerEntryCodec()


def _empty_entry() -> dict[str, list[list[Any]]]:
    return {"event": [], "processing": []}


class StoredTimerService(TimerService[str, N]):
    """A :class:`~service.core.timers.TimerService` whose event-time timers are in a
    :class:`StoredTimerQueue`, each key's timers in ``per_key`` (module docstring).

    The same behaviour, order, snapshots and counts as the heap service, except that
    the changelog form of a key's timers (:meth:`snapshot_keys`) gives its event-time
    timers their registration numbers where the heap's writes a timestamp's only timer
    as :data:`~service.core.timers.LONE_SEQ`: either restores the same order.
    """

    __slots__ = (
        "_fired_count",
        "_memo_entry",
        "_memo_evictions",
        "_memo_key",
        "_per_key",
        "_queue",
        "_registered",
        "_size_base",
    )

    def __init__(
        self,
        on_event_time: TimerCallback[str, N],
        on_processing_time: TimerCallback[str, N],
        per_key: StateCache,
        queue: StoredTimerQueue,
    ) -> None:
        super().__init__(on_event_time, on_processing_time)
        self._per_key = per_key
        self._queue = queue
        self._registered = 0
        self._fired_count = 0
        self._size_base = queue.size
        # The last key registered or deleted for and its entry, valid while the map
        # evicted nothing since: a record's timer moves (register the new, delete the
        # old) look its entry up once.
        self._memo_key: str | None = None
        self._memo_entry: Any = None
        self._memo_evictions = -1

    # -- time -------------------------------------------------------------------------
    def advance_watermark(self, watermark: int) -> int:
        if watermark <= self._watermark:
            return 0
        self._watermark = watermark
        queue = self._queue
        per_key = self._per_key
        fire = self._on_event
        fired = 0
        while True:
            timer = queue.pop_until(watermark)
            if timer is None:
                break
            timestamp, seq, key, namespace = timer
            entry = per_key.get(key)
            if entry is not None:
                timers = entry["event"]
                for i, (ts, _, s) in enumerate(timers):
                    if s == seq and ts == timestamp:
                        del timers[i]
                        break
                self._changed(key, entry)
            fired += 1
            fire(timestamp, key, namespace)
        self._fired_count += fired
        return fired

    def advance_processing_time(self, now: int) -> int:
        if now > self._processing_time:
            self._processing_time = now
        return self._processing.fire_until(now, self._fire_processing)

    def _fire_processing(self, timestamp: int, key: str, namespace: N) -> None:
        self._forget_processing(timestamp, key, namespace)
        self._on_processing(timestamp, key, namespace)

    def _forget_processing(self, timestamp: int, key: str, namespace: N) -> None:
        """The processing-time timer, gone from the heap, out of the key's entry."""
        entry = self._per_key.get(key)
        if entry is None:
            return
        timers = entry["processing"]
        for i, (ts, ns, _) in enumerate(timers):
            if ts == timestamp and ns == namespace:
                del timers[i]
                break
        self._changed(key, entry)

    def next_event_time(self) -> int | None:
        return self._queue.peek()

    def _changed(self, key: str, entry: dict[str, list[list[Any]]]) -> None:
        """``entry``, got from the map just before, was changed in place."""
        if entry["event"] or entry["processing"]:
            self._per_key.mark_dirty(key)
        else:
            self._memo_key = None
            self._per_key.pop(key)

    # -- registration -----------------------------------------------------------------
    # register and delete inline StoredTimerQueue.put and .remove for a new registration
    # and a buffered one (one Python call per operation on the per-record path): keep
    # them in step.
    def register_event_time_timer(self, timestamp: int, key: str, namespace: N) -> None:
        per_key = self._per_key
        if key is self._memo_key and per_key.evictions == self._memo_evictions:
            entry = self._memo_entry
        else:
            entry = per_key.get(key)
        if entry is None:
            events: list[list[Any]] = []
            per_key[key] = entry = {"event": events, "processing": []}
        else:
            events = entry["event"]
            for timer in events:
                if timer[0] == timestamp and timer[1] == namespace:
                    return
            per_key.mark_dirty(key)
        self._memo_key = key
        self._memo_entry = entry
        self._memo_evictions = per_key.evictions
        queue = self._queue
        seq = queue.seq
        queue.seq = seq + 1
        events.append([timestamp, namespace, seq])
        self._registered += 1
        # StoredTimerQueue.put for a new number (never among the buffered deletes)
        name = ((timestamp + _OFFSET) << 64) | (seq + 1)  # _ordinal
        puts = queue._puts
        puts[name] = (key, namespace)
        heappush(queue._pending, name)
        queue.size += 1
        if len(puts) + len(queue._deletes) > queue.limit:
            queue.write(False)

    def delete_event_time_timer(self, timestamp: int, key: str, namespace: N) -> None:
        per_key = self._per_key
        if key is self._memo_key and per_key.evictions == self._memo_evictions:
            entry = self._memo_entry
        else:
            entry = per_key.get(key)
            if entry is None:
                return
            self._memo_key = key
            self._memo_entry = entry
            self._memo_evictions = per_key.evictions
        events = entry["event"]
        for i, timer in enumerate(events):
            if timer[0] == timestamp and timer[1] == namespace:
                del events[i]
                if events or entry["processing"]:
                    per_key.mark_dirty(key)
                else:
                    self._memo_key = None
                    per_key.pop(key)
                queue = self._queue
                name = ((timestamp + _OFFSET) << 64) | (timer[2] + 1)  # _ordinal
                puts = queue._puts
                if name in puts and not queue._shadowed:  # buffered: StoredTimerQueue.remove
                    del puts[name]
                    queue.size -= 1
                    pending = queue._pending
                    if len(pending) > 2 * len(puts) + _REBUILD_SLACK:
                        pending[:] = puts
                        heapify(pending)
                    return
                queue.remove(timestamp, timer[2])
                return

    def move_event_time_timer(self, old: int, new: int, key: str, namespace: N) -> None:
        self.delete_event_time_timer(old, key, namespace)
        self.register_event_time_timer(new, key, namespace)

    def register_processing_time_timer(self, timestamp: int, key: str, namespace: N) -> None:
        if not self._processing.add(timestamp, key, namespace):
            return
        per_key = self._per_key
        entry = per_key.get(key)
        if entry is None:
            per_key[key] = entry = _empty_entry()
        else:
            per_key.mark_dirty(key)
        entry["processing"].append([timestamp, namespace, None])

    def delete_processing_time_timer(self, timestamp: int, key: str, namespace: N) -> None:
        if self._processing.remove(timestamp, key, namespace):
            self._forget_processing(timestamp, key, namespace)

    # -- metrics ----------------------------------------------------------------------
    @property
    def event_timers(self) -> int:
        return self._queue.size

    def counts(self) -> dict[str, tuple[int, int, int]]:
        registered = self._registered
        fired = self._fired_count
        live = self._queue.size - self._size_base
        return {
            "event": (registered, fired, registered - fired - live),
            "processing": self._processing.counts(),
        }

    def is_queued(self, domain: TimeDomain, timestamp: int, key: str, namespace: N) -> bool:
        if domain is not TimeDomain.EVENT_TIME:
            return (timestamp, key, namespace) in self._processing
        entry = self._per_key.get(key)
        return entry is not None and any(
            ts == timestamp and ns == namespace for ts, ns, _ in entry["event"]
        )

    def timers(self, domain: TimeDomain) -> Iterator[tuple[int, str, N]]:
        if domain is not TimeDomain.EVENT_TIME:
            yield from super().timers(domain)
            return
        for ts, _, key, namespace in self._queue.entries():
            yield ts, key, namespace

    # -- checkpoints ------------------------------------------------------------------
    def flush(self) -> None:
        """A checkpoint's write of the buffered timers (the per-key map is a cache the
        runtime flushes with the others)."""
        self._queue.processing = len(self._processing)
        self._queue.flush()

    def snapshot(self) -> dict[str, Any]:
        """As the heap service's: a timestamp's only timer written as LONE_SEQ."""
        event: list[list[Any]] = []
        previous: int | None = None
        run_start = 0
        for ts, seq, key, namespace in self._queue.entries():
            if ts != previous:
                if len(event) - run_start == 1:
                    event[run_start][3] = LONE_SEQ
                run_start = len(event)
                previous = ts
            event.append([ts, key, plain(namespace), seq])
        if len(event) - run_start == 1:
            event[run_start][3] = LONE_SEQ
        return {
            "watermark": self._watermark,
            "event": event,
            "processing": [[ts, k, plain(ns), s] for ts, k, ns, s in self._processing.entries()],
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Replace every timer (the store's and the map's) and the watermark."""
        self._watermark = int(snapshot["watermark"])
        self._memo_key = None
        self._per_key.clear()
        self._queue.clear()
        entries: dict[Any, dict[str, list[list[Any]]]] = {}
        for ts, key, ns, seq in snapshot["event"]:
            entries.setdefault(key, _empty_entry())["event"].append([ts, hashable(ns), seq])
        processing = [(ts, k, hashable(ns), s) for ts, k, ns, s in snapshot["processing"]]
        for ts, key, ns, seq in processing:
            entries.setdefault(key, _empty_entry())["processing"].append([ts, ns, seq])
        self._processing.restore(processing)
        self._store_entries(entries.items())

    def snapshot_keys(self, keys: Container[str]) -> dict[str, dict[str, list[list[Any]]]]:
        found: dict[str, dict[str, list[list[Any]]]] = {}
        for key in keys:  # type: ignore[attr-defined]  # the operators pass a set
            timers = self.key_timers(key)
            if timers is not None:
                found[key] = timers
        return found

    def key_timers(self, key: str) -> dict[str, list[list[Any]]] | None:
        """The key's timers in the changelog's form (None: it has none), read without
        bringing an evicted entry back into the cache (:meth:`StateCache.peek`), unless
        it has processing-time timers, whose numbers are the heap's now."""
        stored = self._per_key.peek(key)
        if stored is None:
            return None
        if not stored["processing"]:
            return {"event": sorted(stored["event"], key=_order), "processing": []}
        entry = self._per_key.get(key)
        if entry is None:
            return None
        event = sorted(([ts, plain(ns), seq] for ts, ns, seq in entry["event"]), key=_order)
        processing: list[list[Any]] = []
        if entry["processing"]:
            get_seq = self._processing.get_seq
            for timer in entry["processing"]:
                timer[2] = get_seq(timer[0], key, timer[1])  # as the heap numbers it now
            processing = sorted(
                ([ts, plain(ns), seq] for ts, ns, seq in entry["processing"]), key=_order
            )
            self._per_key.mark_dirty(key)
        return {"event": event, "processing": processing}

    def restore_keys(
        self, watermark: int, per_key: Iterable[tuple[str, dict[str, list[list[Any]]]]]
    ) -> None:
        """Apply these keys' timers onto the store's (None or empty: the key has none);
        the other keys keep theirs. Onto an empty store, that is a restore of them all."""
        self._watermark = watermark
        self._memo_key = None
        queue = self._queue
        cache = self._per_key
        stored_processing = queue.processing
        new: list[tuple[Any, dict[str, list[list[Any]]]]] = []
        processing_changed = False
        for key, timers in per_key:
            old = cache.pop(key)
            if old is not None:
                for ts, _, seq in old["event"]:
                    queue.remove(ts, seq)
                processing_changed = processing_changed or bool(old["processing"])
            if timers and (timers["event"] or timers["processing"]):
                new.append((key, TIMER_ENTRY_CODEC.decode(timers)))
                processing_changed = processing_changed or bool(timers["processing"])
        for key, entry in new:
            cache[key] = entry
        if stored_processing or processing_changed:
            # the processing-time timers live on the heap: every key's, read back
            self._processing.restore(
                (ts, key, ns, seq if seq is not None else LONE_SEQ)
                for key, entry in cache.items()
                for ts, ns, seq in entry["processing"]
            )
        else:
            self._processing.restore(())
        self._store_entries(new, in_cache=True)

    def _store_entries(
        self, entries: Iterable[tuple[Any, dict[str, list[list[Any]]]]], in_cache: bool = False
    ) -> None:
        """Store these keys' entries (unless ``in_cache``) and event-time timers, then
        write: a restore's end."""
        queue = self._queue
        cache = self._per_key
        for key, entry in entries:
            if not in_cache:
                cache[key] = entry
            for ts, ns, seq in entry["event"]:
                queue.put(ts, seq, key, ns)
        self._registered = 0
        self._fired_count = 0
        self._size_base = queue.size
        queue.processing = len(self._processing)
        queue.flush()

    def take_dirty_keys(self) -> set[str]:
        return set()


def _order(timer: list[Any]) -> tuple[int, int]:
    return timer[0], timer[2]
