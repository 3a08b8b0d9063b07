"""State TTL: expired entries are invisible and are cleaned up without being read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from service.core.time import ManualClock
from service.functions import Context, KeyedProcessFunction, Out, StateNotJsonSafe
from service.operators.process import (
    KeyedProcessOperator,
    ListState,
    MapState,
    StateKind,
    ValueState,
)
from service.operators.process.state import KeyedStateBackend
from tests.operators.process.harness import make, on_both_backends, rec, values
from tests.operators.rocksdb_maps import BACKENDS


@pytest.fixture(autouse=True, params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test here runs on both state backends (rocksdb: a cache of a few entries)."""
    yield from on_both_backends(request)


class Remember(KeyedProcessFunction):
    """``("set", v)`` writes the TTL'd states, ``("get",)`` emits what they hold."""

    def open(self, ctx: Context) -> None:
        self.v = ctx.value_state("v", ttl_ms=1_000)
        self.lst = ctx.list_state("l", ttl_ms=1_000)
        self.m = ctx.map_state("m", ttl_ms=1_000)

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        if value[0] == "set":
            self.v.update(value[1])
            self.lst.add(value[1])
            self.m.put("k", value[1])
        else:
            out.collect((self.v.value(), self.lst.get(), self.m.get("k")))


def test_read_before_expiry_sees_the_value() -> None:
    clock = ManualClock(0)
    op = make(Remember(), clock)
    op.process_batch([rec("a", 0, ("set", 1))])
    clock.set(999)
    op.process_batch([rec("a", 0, ("get",))])
    assert values(op) == [("a", 0, (1, [1], 1))]


def test_read_after_expiry_sees_nothing() -> None:
    clock = ManualClock(0)
    op = make(Remember(), clock)
    op.process_batch([rec("a", 0, ("set", 1))])
    clock.set(1_000)
    op.process_batch([rec("a", 0, ("get",))])
    assert values(op) == [("a", 0, (None, [], None))]


def test_a_write_restarts_the_ttl() -> None:
    clock = ManualClock(0)
    op = make(Remember(), clock)
    op.process_batch([rec("a", 0, ("set", 1))])
    clock.set(800)
    op.process_batch([rec("a", 0, ("set", 2))])
    clock.set(1_500)
    op.process_batch([rec("a", 0, ("get",))])
    assert values(op) == [("a", 0, (2, [1, 2], 2))]


def test_expired_entries_of_unread_keys_are_cleaned_up() -> None:
    clock = ManualClock(0)
    op = make(Remember(), clock)
    for i in range(1_000):
        clock.set(i)
        op.process_batch([rec(f"k{i}", 0, ("set", i))])
    assert op.gauges().keys == 1_000
    clock.set(1_500)
    op.advance_processing_time(1_500)
    # Only the keys written within the last ttl_ms are still held.
    assert op.gauges().keys == 499
    assert op.counters.state_expired == 3 * 501
    clock.set(3_000)
    op.process_batch([])
    assert op.gauges().keys == 0


def test_memory_stays_bounded_under_a_steady_stream_of_new_keys() -> None:
    clock = ManualClock(0)
    op = make(Remember(), clock)
    peak = 0
    for i in range(5_000):
        clock.set(i * 10)
        op.process_batch([rec(f"k{i}", 0, ("set", i))])
        peak = max(peak, op.gauges().keys)
    # 1_000 ms of TTL at one new key per 10 ms: at most 100 live keys (+1 for the batch).
    assert peak <= 101


class WriteValue(KeyedProcessFunction):
    """Writes each record's value to a TTL'd value state (a refused write is caught)."""

    def open(self, ctx: Context) -> None:
        self.v = ctx.value_state("v", ttl_ms=1_000)

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        if value == ("get",):
            out.collect(self.v.value())
            return
        try:
            self.v.update(value)
        except StateNotJsonSafe:
            out.collect("refused")


def expiry_of(op: KeyedProcessOperator, key: str) -> int | None:
    return op.snapshot()["state"]["v"]["expiry"].get(key)  # type: ignore[no-any-return]


@pytest.mark.parametrize("value", [2, "two", 2.5, True, [2], {"n": 2}])
def test_every_kind_of_value_write_restarts_the_ttl(value: Any) -> None:
    clock = ManualClock(0)
    op = make(WriteValue(), clock)
    op.process_batch([rec("a", 0, 1)])
    clock.set(800)
    op.process_batch([rec("a", 0, value)])
    assert expiry_of(op, "a") == 1_800
    clock.set(1_500)
    op.process_batch([rec("a", 0, ("get",))])
    clock.set(1_800)
    op.process_batch([rec("a", 0, ("get",))])
    assert values(op) == [("a", 0, value), ("a", 0, None)]


def test_writing_none_clears_the_value_and_its_expiry() -> None:
    op = make(WriteValue())
    op.process_batch([rec("a", 0, 1), rec("a", 0, None), rec("a", 0, ("get",))])
    assert values(op) == [("a", 0, None)]
    assert expiry_of(op, "a") is None
    assert op.gauges().keys == 0


def test_a_refused_write_keeps_the_value_and_its_expiry() -> None:
    clock = ManualClock(0)
    op = make(WriteValue(), clock)
    op.process_batch([rec("a", 0, 1)])
    clock.set(500)
    op.process_batch([rec("a", 0, float("inf")), rec("a", 0, ("get",))])
    assert values(op) == [("a", 0, "refused"), ("a", 0, 1)]
    assert expiry_of(op, "a") == 1_000


class Scope:
    key: str | None = "a"


def test_a_read_never_returns_an_expired_entry_even_before_the_sweep() -> None:
    """The operator sweeps before every call, so through it an expired entry is always
    gone already; read at the backend, expiry is still checked (and the entry removed)."""
    backend = KeyedStateBackend(Scope())
    v = backend.handle("v", StateKind.VALUE, 1_000)
    lst = backend.handle("l", StateKind.LIST, 1_000)
    m = backend.handle("m", StateKind.MAP, 1_000)
    assert isinstance(v, ValueState)
    assert isinstance(lst, ListState)
    assert isinstance(m, MapState)
    v.update(1)
    lst.add(1)
    m.put("k", 1)
    backend.now = 999
    assert (v.value(), lst.get(), m.get("k")) == (1, [1], 1)
    backend.now = 1_000
    assert (v.value(), lst.get(), m.get("k"), m.is_empty()) == (None, [], None, True)
    assert all(not store.data and not store.expiry for store in backend.stores.values())
