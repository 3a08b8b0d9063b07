"""Property-based tests: the timer service and the combiner against simple models.

The timer model is a plain list of ``(ts, seq, key, ns)`` per domain; firing always takes
the smallest ``(ts, seq)`` at or below the limit, which is the whole of semantics.md
section 4 (order, ties by registration, timers registered or deleted by callbacks).
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.combiner import WatermarkCombiner
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP, TimeDomain
from service.core.timers import KeyTimers, ScopedTimers, TimerService

KEYS = ("a", "b", "c", "d")
NAMESPACES: tuple[Any, ...] = (None, "", ("w", 0, 10))
DOMAINS = (True, False)  # is event time
HOOK_BUDGET = 40
EVENT_TIME = TimeDomain.EVENT_TIME
PROCESSING_TIME = TimeDomain.PROCESSING_TIME

Timer = tuple[int, int, str, Any]  # ts, seq, key, ns
Hook = tuple[str, bool, int, str, Any]  # op, is_event, delta ts, key, ns


class Model:
    def __init__(self, hooks: dict[str, Hook]) -> None:
        self.queues: dict[bool, list[Timer]] = {True: [], False: []}
        self.seq = 0
        self.watermark = MIN_TIMESTAMP
        self.fired: list[tuple[bool, int, str, Any]] = []
        self.hooks = hooks
        self.budget = HOOK_BUDGET

    def register(self, is_event: bool, ts: int, key: str, ns: Any) -> None:
        queue = self.queues[is_event]
        if not any(t[0] == ts and t[2] == key and t[3] == ns for t in queue):
            queue.append((ts, self.seq, key, ns))
            self.seq += 1

    def delete(self, is_event: bool, ts: int, key: str, ns: Any) -> None:
        queue = self.queues[is_event]
        queue[:] = [t for t in queue if not (t[0] == ts and t[2] == key and t[3] == ns)]

    def fire(self, is_event: bool, limit: int) -> None:
        queue = self.queues[is_event]
        while True:
            due = [t for t in queue if t[0] <= limit]
            if not due:
                return
            timer = min(due)
            queue.remove(timer)
            ts, _, key, ns = timer
            self.fired.append((is_event, ts, key, ns))
            hook = self.hooks.get(key)
            if hook is not None and self.budget > 0:
                self.budget -= 1
                op, dom, delta, key2, ns2 = hook
                (self.register if op == "register" else self.delete)(dom, ts + delta, key2, ns2)

    def advance_watermark(self, w: int) -> None:
        if w > self.watermark:
            self.watermark = w
            self.fire(True, w)

    def ordered(self, is_event: bool) -> list[tuple[int, str, Any]]:
        return [(ts, key, ns) for ts, _, key, ns in sorted(self.queues[is_event])]


class Impl:
    def __init__(self, hooks: dict[str, Hook], track: bool) -> None:
        self.hooks = hooks
        self.track = track
        self.budget = HOOK_BUDGET
        self.fired: list[tuple[bool, int, str, Any]] = []
        self.service = self.new_service()

    def new_service(self) -> TimerService[str, Any]:
        return TimerService(self._on_event, self._on_processing, track_keys=self.track)

    def _on_event(self, ts: int, key: str, ns: Any) -> None:
        self._fire(True, ts, key, ns)

    def _on_processing(self, ts: int, key: str, ns: Any) -> None:
        self._fire(False, ts, key, ns)

    def _fire(self, is_event: bool, ts: int, key: str, ns: Any) -> None:
        self.fired.append((is_event, ts, key, ns))
        hook = self.hooks.get(key)
        if hook is not None and self.budget > 0:
            self.budget -= 1
            op, dom, delta, key2, ns2 = hook
            s = self.service
            if op == "register":
                (s.register_event_time_timer if dom else s.register_processing_time_timer)(
                    ts + delta, key2, ns2
                )
            else:
                (s.delete_event_time_timer if dom else s.delete_processing_time_timer)(
                    ts + delta, key2, ns2
                )


timestamps = st.integers(min_value=0, max_value=40)
timer_args = st.tuples(
    st.sampled_from(DOMAINS), timestamps, st.sampled_from(KEYS), st.sampled_from(NAMESPACES)
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("register"), timer_args),
        st.tuples(st.just("delete"), timer_args),
        st.tuples(st.just("move"), st.tuples(timer_args, timestamps)),
        st.tuples(st.just("watermark"), timestamps),
        st.tuples(st.just("processing"), timestamps),
        st.tuples(st.just("snapshot"), st.just(None)),
        st.tuples(st.just("checkpoint"), st.just(None)),
        st.tuples(st.just("recover"), st.just(None)),
    ),
    max_size=60,
)
hooks = st.dictionaries(
    st.sampled_from(KEYS),
    st.tuples(
        st.sampled_from(("register", "delete")),
        st.sampled_from(DOMAINS),
        st.integers(min_value=-5, max_value=5),
        st.sampled_from(KEYS),
        st.sampled_from(NAMESPACES),
    ),
)


@settings(max_examples=300, deadline=None)
@given(ops=operations, hooks=hooks, track=st.booleans())
def test_timer_service_matches_the_sorted_list_model(
    ops: list[tuple[str, Any]], hooks: dict[str, Hook], track: bool
) -> None:
    model = Model(hooks)
    impl = Impl(hooks, track)
    # the last incremental checkpoint: per-key store, watermark, and the model then
    store: dict[str, Any] = {}
    checkpoint: tuple[int, dict[bool, list[Timer]]] | None = None
    for op, arg in ops:
        s = impl.service
        if op == "register":
            is_event, ts, key, ns = arg
            model.register(is_event, ts, key, ns)
            (s.register_event_time_timer if is_event else s.register_processing_time_timer)(
                ts, key, ns
            )
        elif op == "delete":
            is_event, ts, key, ns = arg
            model.delete(is_event, ts, key, ns)
            (s.delete_event_time_timer if is_event else s.delete_processing_time_timer)(ts, key, ns)
        elif op == "move":
            (is_event, old, key, ns), new = arg
            model.delete(is_event, old, key, ns)
            model.register(is_event, new, key, ns)
            (s.move_event_time_timer if is_event else s.move_processing_time_timer)(
                old, new, key, ns
            )
        elif op == "watermark":
            model.advance_watermark(arg)
            s.advance_watermark(arg)
        elif op == "processing":
            model.fire(False, arg)
            s.advance_processing_time(arg)
        elif op == "snapshot":
            data = json.loads(json.dumps(s.snapshot()))
            impl.service = impl.new_service()
            impl.service.restore(data)
            if track:  # the per-key store must now describe the restored state
                store = {k: impl.service.snapshot_key(k) for k in KEYS}
                impl.service.take_dirty_keys()
                checkpoint = (data["watermark"], {d: list(q) for d, q in model.queues.items()})
        elif op == "checkpoint" and track:
            for key in s.take_dirty_keys():
                store[key] = json.loads(json.dumps(s.snapshot_key(key)))
            checkpoint = (s.current_watermark, {d: list(q) for d, q in model.queues.items()})
        elif op == "recover" and track and checkpoint is not None:
            impl.service = impl.new_service()
            impl.service.restore_keys(checkpoint[0], store.items())
            model.watermark = checkpoint[0]
            model.queues = {d: list(q) for d, q in checkpoint[1].items()}
        s = impl.service
        assert impl.fired == model.fired
        assert s.current_watermark == model.watermark
        assert s.event_timers == len(model.queues[True])
        assert s.processing_timers == len(model.queues[False])
        assert list(s.timers(EVENT_TIME)) == model.ordered(True)
        assert list(s.timers(PROCESSING_TIME)) == model.ordered(False)
        expected_next = min((t[0] for t in model.queues[False]), default=None)
        assert s.next_processing_time() == expected_next
        assert s.next_event_time() == min((t[0] for t in model.queues[True]), default=None)


# -- combiner -----------------------------------------------------------------------------
combiner_ops = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 3), st.integers(-5, 100), st.integers(-5, 100)),
        st.tuples(st.just("revoke"), st.integers(0, 3), st.just(0), st.just(0)),
        st.tuples(st.just("update"), st.integers(0, 3), st.integers(-5, 100), st.just(0)),
        st.tuples(st.just("finish"), st.integers(0, 3), st.just(0), st.just(0)),
        st.tuples(st.just("tick"), st.just(0), st.integers(0, 40), st.just(0)),
        st.tuples(st.just("snapshot"), st.just(0), st.just(0), st.just(0)),
    ),
    max_size=80,
)


class _Held:
    """The direct model of one held partition."""

    def __init__(self, watermark: int, last_active: int, delivered: int) -> None:
        self.watermark = watermark
        self.last_active = last_active
        self.delivered = delivered
        self.finished = False


@settings(max_examples=400, deadline=None)
@given(ops=combiner_ops, idle=st.one_of(st.none(), st.integers(1, 30)))
def test_every_operator_is_delivered_the_minimum_over_the_partitions_held_now(
    ops: list[tuple[str, int, int, int]], idle: int | None
) -> None:
    """Against a direct computation, after every step (issue 18's rule): the combined
    watermark is the minimum over the held partitions that are neither idle nor
    finished (MAX if all are finished; unchanged if none counts); each operator gets it
    when it is above what that operator has (MAX once finished), never anything lower."""
    combiner: WatermarkCombiner[int] = WatermarkCombiner(idle_timeout_ms=idle)
    held: dict[int, _Held] = {}
    current = MIN_TIMESTAMP
    now = 0
    for op, partition, value, extra in ops:
        if op == "assign" and partition not in held:
            held[partition] = _Held(value, now, extra)
            combiner.assign(partition, now, value, extra)
        elif op == "revoke":
            held.pop(partition, None)
            combiner.revoke(partition)
        elif op == "update" and partition in held and not held[partition].finished:
            held[partition].watermark = value
            held[partition].last_active = now
            combiner.update(partition, value, now)
        elif op == "finish" and partition in held:
            held[partition].finished = True
            combiner.finish(partition)
        elif op == "tick":
            now += value
        elif op == "snapshot":
            data = json.loads(json.dumps(combiner.snapshot()))
            combiner = WatermarkCombiner(idle_timeout_ms=idle)
            combiner.restore(data)
        counted = [
            p.watermark
            for p in held.values()
            if not p.finished and (idle is None or now - p.last_active < idle)
        ]
        if counted:
            current = min(counted)
        elif held and all(p.finished for p in held.values()):
            current = MAX_TIMESTAMP
        expected = []
        for partition_id, p in held.items():
            target = MAX_TIMESTAMP if p.finished else current
            if (counted or p.finished or target == MAX_TIMESTAMP) and target > p.delivered:
                p.delivered = target
                expected.append((partition_id, target))
        assert list(combiner.advance(now)) == expected
        assert combiner.current == current
        assert {p: combiner.delivered(p) for p in combiner.partitions} == {
            p: h.delivered for p, h in held.items()
        }
        assert sorted(combiner.idle_partitions(now)) == sorted(
            p
            for p, h in held.items()
            if idle is not None and not h.finished and now - h.last_active >= idle
        )


# -- keyed views ----------------------------------------------------------------------------
view_ops = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(("register", "delete")), st.sampled_from(KEYS), timestamps),
        st.tuples(st.just("watermark"), st.just(""), timestamps),
        st.tuples(st.just("snapshot"), st.just(""), st.just(0)),
    ),
    max_size=80,
)


class _Scope:
    key: str | None = None


def _never(key: Any, timestamp: Any) -> NoReturn:
    raise AssertionError((key, timestamp))


@settings(max_examples=300, deadline=None)
@given(ops=view_ops)
def test_keyed_views_match_direct_calls_without_namespace(ops: list[tuple[str, str, int]]) -> None:
    """KeyTimers and ScopedTimers (namespace None) inline the service's event-time paths,
    lone entries included: driven by the same operations, all three queues agree."""
    fired: dict[str, list[tuple[int, str]]] = {"direct": [], "scoped": [], "bare": []}

    def service(name: str) -> TimerService[str, None]:
        def on_event(ts: int, key: str, _ns: None) -> None:
            fired[name].append((ts, key))

        return TimerService(on_event, lambda *_: None)

    services = {name: service(name) for name in fired}
    scope = _Scope()

    def views() -> tuple[ScopedTimers[str, None], KeyTimers[str]]:
        return (
            ScopedTimers(services["scoped"], scope, None, _never),
            KeyTimers(services["bare"], scope, _never),
        )

    scoped, bare = views()
    for op, key, ts in ops:
        if op == "register":
            scope.key = key
            services["direct"].register_event_time_timer(ts, key, None)
            scoped.register_event_time_timer(ts)
            bare.register_event_time_timer(ts)
        elif op == "delete":
            scope.key = key
            services["direct"].delete_event_time_timer(ts, key, None)
            scoped.delete_event_time_timer(ts)
            bare.delete_event_time_timer(ts)
        elif op == "watermark":
            for s in services.values():
                s.advance_watermark(ts)
        else:
            for name, s in list(services.items()):
                services[name] = service(name)
                services[name].restore(json.loads(json.dumps(s.snapshot())))
            scoped, bare = views()
        direct = services["direct"]
        assert fired["scoped"] == fired["bare"] == fired["direct"]
        for s in (services["scoped"], services["bare"]):
            assert list(s.timers(EVENT_TIME)) == list(direct.timers(EVENT_TIME))
            assert s.snapshot() == direct.snapshot()
            assert s.event_timers == direct.event_timers
            assert s.counts() == direct.counts()
