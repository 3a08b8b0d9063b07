"""Keyed state: value, list and map semantics, key isolation, JSON safety."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import IntEnum
from typing import Any

import pytest

from service.functions import (
    Context,
    KeyedProcessFunction,
    NoCurrentKey,
    Out,
    StateConflict,
    StateNotJsonSafe,
)
from tests.operators.process.harness import make, on_both_backends, rec, values
from tests.operators.rocksdb_maps import BACKENDS

Step = Callable[[Context, Any], Any]


@pytest.fixture(autouse=True, params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test here runs on both state backends (rocksdb: a cache of a few entries)."""
    yield from on_both_backends(request)


class Run(KeyedProcessFunction):
    """Applies ``step(ctx, value)`` to each record and emits what it returns."""

    def __init__(self, step: Step) -> None:
        self.step = step

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        out.collect(self.step(ctx, value))


def run(step: Step, items: list[tuple[str, Any]]) -> list[Any]:
    op = make(Run(step))
    op.process_batch([rec(k, 0, v, i) for i, (k, v) in enumerate(items)])
    failed = op.collector.failed
    if failed:
        raise AssertionError(failed)
    return [v for _, _, v in values(op)]


def test_value_state_is_none_until_updated_and_none_clears() -> None:
    def step(ctx: Context, value: Any) -> Any:
        s = ctx.value_state("v")
        before = s.value()
        s.update(value)
        return before

    assert run(step, [("a", 1), ("a", {"x": [1, 2.5]}), ("a", None), ("a", 3)]) == [
        None,
        1,
        {"x": [1, 2.5]},
        None,
    ]


def test_value_state_clear_removes_the_entry() -> None:
    def step(ctx: Context, value: Any) -> Any:
        s = ctx.value_state("v")
        if value == "clear":
            s.clear()
        else:
            s.update(value)
        return s.value()

    assert run(step, [("a", 1), ("a", "clear")]) == [1, None]


def test_state_is_isolated_between_keys() -> None:
    def step(ctx: Context, value: Any) -> Any:
        s = ctx.value_state("count")
        n = (s.value() or 0) + 1
        s.update(n)
        return (ctx.key, n)

    assert run(step, [("a", 0), ("b", 0), ("a", 0), ("c", 0), ("b", 0), ("a", 0)]) == [
        ("a", 1),
        ("b", 1),
        ("a", 2),
        ("c", 1),
        ("b", 2),
        ("a", 3),
    ]


def test_states_with_different_names_are_independent() -> None:
    def step(ctx: Context, value: Any) -> Any:
        ctx.value_state("x").update(value)
        return ctx.value_state("y").value()

    assert run(step, [("a", 1), ("a", 2)]) == [None, None]


def test_list_state_add_get_update_and_clear() -> None:
    def step(ctx: Context, value: Any) -> Any:
        s = ctx.list_state("l")
        op, arg = value
        if op == "add":
            s.add(arg)
        elif op == "add_all":
            s.add_all(arg)
        elif op == "update":
            s.update(arg)
        elif op == "clear":
            s.clear()
        return s.get()

    assert run(
        step,
        [
            ("a", ("add", 1)),
            ("a", ("add_all", [2, 3])),
            ("b", ("add", "other")),
            ("a", ("update", [9])),
            ("a", ("add", 10)),
            ("a", ("clear", None)),
            ("a", ("add", 1)),
            ("a", ("update", [])),
        ],
    ) == [[1], [1, 2, 3], ["other"], [9], [9, 10], [], [1], []]


def test_list_state_get_returns_a_copy() -> None:
    def step(ctx: Context, value: Any) -> Any:
        s = ctx.list_state("l")
        s.add(value)
        s.get().append("not stored")
        return s.get()

    assert run(step, [("a", 1)]) == [[1]]


def test_map_state_put_get_remove_iterate() -> None:
    def step(ctx: Context, value: Any) -> Any:
        m = ctx.map_state("m")
        op, *args = value
        if op == "put":
            m.put(args[0], args[1])
        elif op == "put_all":
            m.put_all(args[0])
        elif op == "remove":
            m.remove(args[0])
        elif op == "clear":
            m.clear()
        return (m.items(), m.get("x"), m.contains(1), m.is_empty())

    assert run(
        step,
        [
            ("a", ("put", "x", 1)),
            ("a", ("put_all", {1: "one", "y": [2]})),
            ("a", ("remove", "x")),
            ("b", ("put", "x", 5)),
            ("a", ("remove", "nope")),
            ("a", ("clear",)),
        ],
    ) == [
        ([("x", 1)], 1, False, False),
        ([("x", 1), (1, "one"), ("y", [2])], 1, True, False),
        ([(1, "one"), ("y", [2])], None, True, False),
        ([("x", 5)], 5, False, False),
        ([(1, "one"), ("y", [2])], None, True, False),
        ([], None, False, True),
    ]


def test_map_state_removing_last_entry_leaves_no_key_behind() -> None:
    class PutRemove(KeyedProcessFunction):
        def open(self, ctx: Context) -> None:
            self.m = ctx.map_state("m")

        def process_element(self, value: Any, ctx: Context, out: Out) -> None:
            self.m.put("k", 1)
            self.m.remove("k")

    op = make(PutRemove())
    op.process_batch([rec("a", 0)])
    assert op.gauges().keys == 0


@pytest.mark.parametrize(
    ("bad", "type_name"),
    [
        ((1, 2), "tuple"),
        ({1, 2}, "set"),
        (b"x", "bytes"),
        (float("nan"), "float"),
        ({"a": {"b": object()}}, "object"),
        ({1: "int key"}, "int"),
        ([1, [2, (3,)]], "tuple"),
    ],
)
def test_non_json_value_is_refused_naming_the_state_and_type(bad: Any, type_name: str) -> None:
    def step(ctx: Context, value: Any) -> Any:
        with pytest.raises(StateNotJsonSafe) as info:
            ctx.value_state("profile").update(bad)
        return str(info.value)

    [message] = run(step, [("a", None)])
    assert "'profile'" in message
    assert type_name in message


class Level(IntEnum):
    LOW = 1


class Tag(str):
    pass


@pytest.mark.parametrize("ttl_ms", [None, 1_000])
@pytest.mark.parametrize(
    ("bad", "type_name"),
    [
        (Level.LOW, "Level"),  # an int subclass: not an exact int, so not the fast path
        (Tag("x"), "Tag"),
        (float("inf"), "float"),
        (float("-inf"), "float"),
        (float("nan"), "float"),
    ],
)
def test_value_state_refuses_scalars_that_would_not_round_trip(
    bad: Any, type_name: str, ttl_ms: int | None
) -> None:
    def step(ctx: Context, value: Any) -> Any:
        s = ctx.value_state("v", ttl_ms=ttl_ms)
        s.update(7)
        with pytest.raises(StateNotJsonSafe) as info:
            s.update(bad)
        return (s.value(), type_name in str(info.value))

    assert run(step, [("a", None)]) == [(7, True)]


@pytest.mark.parametrize("ttl_ms", [None, 1_000])
def test_value_state_keeps_every_json_scalar_and_container(ttl_ms: int | None) -> None:
    written = [0, -(2**70), "", "x", True, False, 0.0, -2.5, 1e308, [1, "a"], {"k": [None]}]

    def step(ctx: Context, value: Any) -> Any:
        s = ctx.value_state("v", ttl_ms=ttl_ms)
        s.update(value)
        got = s.value()
        return got is value

    assert run(step, [("a", v) for v in written]) == [True] * len(written)


def test_non_json_value_in_list_and_map_state_is_refused() -> None:
    def step(ctx: Context, value: Any) -> Any:
        with pytest.raises(StateNotJsonSafe):
            ctx.list_state("l").add((1,))
        with pytest.raises(StateNotJsonSafe):
            ctx.map_state("m").put("k", {1, 2})
        with pytest.raises(StateNotJsonSafe):
            ctx.map_state("m").put((1, 2), "tuple key")  # type: ignore[arg-type]
        return (ctx.list_state("l").get(), ctx.map_state("m").items())

    assert run(step, [("a", None)]) == [([], [])]


def test_refused_write_goes_to_failed_output_with_the_state_name() -> None:
    class Bad(KeyedProcessFunction):
        def process_element(self, value: Any, ctx: Context, out: Out) -> None:
            ctx.value_state("session").update({"started": {1, 2}})

    op = make(Bad())
    op.process_batch([rec("a", 0)])
    [failed] = op.collector.failed
    assert "StateNotJsonSafe" in failed.detail
    assert "'session'" in failed.detail
    assert "set" in failed.detail


def test_same_name_with_another_kind_is_a_conflict() -> None:
    def step(ctx: Context, value: Any) -> Any:
        ctx.value_state("s")
        with pytest.raises(StateConflict):
            ctx.list_state("s")
        with pytest.raises(StateConflict):
            ctx.value_state("s", ttl_ms=5)
        return "ok"

    assert run(step, [("a", None)]) == ["ok"]


def test_writing_state_in_open_has_no_current_key() -> None:
    class WritesInOpen(KeyedProcessFunction):
        def open(self, ctx: Context) -> None:
            ctx.value_state("v").update(1)

    with pytest.raises(NoCurrentKey):
        make(WritesInOpen())


@pytest.mark.parametrize("ttl_ms", [None, 1_000])
@pytest.mark.parametrize("value", [1, "x", True, 1.5, None, {"a": 1}, (1,)])
def test_every_value_state_write_in_open_has_no_current_key(value: Any, ttl_ms: int | None) -> None:
    """Whatever the value (fast path or checked), a write without a key is refused first."""

    class WritesInOpen(KeyedProcessFunction):
        def open(self, ctx: Context) -> None:
            ctx.value_state("v", ttl_ms=ttl_ms).update(value)

    with pytest.raises(NoCurrentKey):
        make(WritesInOpen())


WRITES_WITHOUT_KEY: list[Callable[[Context, int | None], None]] = [
    lambda ctx, ttl: ctx.value_state("v", ttl_ms=ttl).clear(),
    lambda ctx, ttl: ctx.list_state("l", ttl_ms=ttl).add(1),
    lambda ctx, ttl: ctx.list_state("l", ttl_ms=ttl).add_all([1]),
    lambda ctx, ttl: ctx.list_state("l", ttl_ms=ttl).update([1]),
    lambda ctx, ttl: ctx.list_state("l", ttl_ms=ttl).clear(),
    lambda ctx, ttl: ctx.map_state("m", ttl_ms=ttl).put("k", 1),
    lambda ctx, ttl: ctx.map_state("m", ttl_ms=ttl).put_all({"k": 1}),
    lambda ctx, ttl: ctx.map_state("m", ttl_ms=ttl).remove("k"),
    lambda ctx, ttl: ctx.map_state("m", ttl_ms=ttl).clear(),
]


@pytest.mark.parametrize("ttl_ms", [None, 1_000])
@pytest.mark.parametrize("write", WRITES_WITHOUT_KEY)
def test_every_list_and_map_write_in_open_has_no_current_key(
    write: Callable[[Context, int | None], None], ttl_ms: int | None
) -> None:
    class WritesInOpen(KeyedProcessFunction):
        def open(self, ctx: Context) -> None:
            write(ctx, ttl_ms)

    with pytest.raises(NoCurrentKey):
        make(WritesInOpen())


@pytest.mark.parametrize("ttl_ms", [None, 1_000])
def test_reads_in_open_see_empty_state(ttl_ms: int | None) -> None:
    seen: list[Any] = []

    class ReadsInOpen(KeyedProcessFunction):
        def open(self, ctx: Context) -> None:
            lst = ctx.list_state("l", ttl_ms=ttl_ms)
            m = ctx.map_state("m", ttl_ms=ttl_ms)
            seen.extend(
                [
                    ctx.value_state("v", ttl_ms=ttl_ms).value(),
                    lst.get(),
                    m.get("k", "default"),
                    m.contains("k"),
                    m.keys(),
                    m.values(),
                    m.items(),
                    m.is_empty(),
                ]
            )

    make(ReadsInOpen())
    assert seen == [None, [], "default", False, [], [], [], True]


def test_snapshot_keys_equals_snapshot_key_of_each_key() -> None:
    class Fill(KeyedProcessFunction):
        def open(self, ctx: Context) -> None:
            self.v = ctx.value_state("v", ttl_ms=1000)
            self.m = ctx.map_state("m")

        def process_element(self, value: Any, ctx: Context, out: Out) -> None:
            self.v.update(value)
            if value > 1:
                self.m.put("x", value)

    op = make(Fill())
    op.process_batch([rec("a", 0, 1, 0), rec("b", 0, 2, 1), rec("c", 0, 3, 2)])
    backend = op._state
    keys = ["a", "b", "c", "absent"]
    values_by_key, expiries_by_key = backend.snapshot_keys(keys)
    for key in keys:
        key_values, key_expiries = backend.snapshot_key(key)
        assert values_by_key.get(key, {}) == key_values
        assert expiries_by_key.get(key, {}) == key_expiries
    assert set(values_by_key) == {"a", "b", "c"}
