"""The regular join of tables (docs/pipeline-spec.md, "Joins of tables"): a new version
of a table row re-upserts its joined rows, a tombstone deletes them (and pads its
partners again on an outer side); then the property that any sequence of upserts and
tombstones, interleaved in any way with the other input and restored anywhere, folds to
the SQL join of the final tables (and every stream row), no row's ``seq`` twice."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.state_cache import StateMaps
from service.operators.base import Upsert
from service.operators.join.factory import build_join_operator
from service.operators.join.regular_tables import TableJoinOperator
from service.operators.join.rows import How, JoinConfigError, Side

from .reference import BACKENDS, PIPELINE, Backend, Driver, Event

STREAM_TABLE = (False, True)
TABLES = (True, True)


def join(
    how: How = How.INNER,
    tables: tuple[bool, bool] = STREAM_TABLE,
    state_maps: StateMaps | None = None,
) -> TableJoinOperator:
    return TableJoinOperator(
        PIPELINE, how, tables, inputs=("orders", "customers"), state_maps=state_maps
    )


def emitted(op: TableJoinOperator) -> list[tuple[str, int, Any]]:
    """``(key, seq, value or None)`` of each upsert since the last call."""
    rows = [(r.key, r.seq, r.result) for r in op.collector.results]
    op.collector.results.clear()
    return rows


def test_a_new_version_of_a_table_row_re_upserts_its_joined_rows() -> None:
    op = join()
    op.process_right([("c", 10, "v1", 0, None)])
    op.process_left([("c", 20, "o1", 5, None)])
    assert emitted(op) == [("c|5|table", 0, {"left": "o1", "right": "v1"})]
    op.process_right([("c", 30, "v2", 1, None)])
    assert emitted(op) == [("c|5|table", 1, {"left": "o1", "right": "v2"})]


def test_a_tombstone_deletes_the_joined_rows_of_its_row() -> None:
    op = join()
    op.process_right([("c", 10, "v1", 0, None)])
    op.process_left([("c", 20, "o1", 5, None)])
    emitted(op)
    op.process_right([("c", 30, None, 1, None)])
    assert emitted(op) == [("c|5|table", 1, None)]
    assert op.rows_held(1) == 0


def test_a_tombstone_pads_its_partners_again_on_an_outer_side() -> None:
    op = join(How.LEFT)
    op.process_left([("c", 5, "o1", 5, None)])
    op.process_right([("c", 10, "v1", 0, None)])
    op.process_right([("c", 30, None, 1, None)])
    assert emitted(op) == [
        ("c|5|none", 0, {"left": "o1", "right": None}),
        ("c|5|none", 1, None),
        ("c|5|table", 2, {"left": "o1", "right": "v1"}),
        ("c|5|table", 3, None),
        ("c|5|none", 4, {"left": "o1", "right": None}),
    ]


def test_a_table_row_without_partner_is_padded_and_its_tombstone_deletes_that() -> None:
    op = join(How.FULL, TABLES)
    op.process_left([("c", 5, "a1", 5, None)])
    op.process_left([("c", 6, "a2", 6, None)])
    op.process_left([("c", 7, None, 7, None)])
    assert emitted(op) == [
        ("c|table|none", 0, {"left": "a1", "right": None}),
        ("c|table|none", 1, {"left": "a2", "right": None}),
        ("c|table|none", 2, None),
    ]
    assert op.snapshot() == {"meta": {"version": 1, "watermark": op.current_watermark}}


def test_a_tombstone_of_a_key_never_held_changes_nothing() -> None:
    op = join(How.FULL)
    op.process_right([("c", 5, None, 0, None)])
    assert emitted(op) == []


def test_a_ttl_drops_stream_rows_silently_and_never_a_table_row() -> None:
    op = TableJoinOperator(PIPELINE, How.INNER, STREAM_TABLE, state_ttl_ms=50)
    op.process_right([("c", 10, "v1", 0, None)])
    op.process_left([("c", 20, "o1", 5, None)])
    emitted(op)
    op.advance_watermark(1_000)
    assert (op.rows_held(0), op.rows_held(1), emitted(op)) == (0, 1, [])
    op.process_right([("c", 1_100, "v2", 1, None)])
    assert emitted(op) == []  # the order expired: nothing of it is joined any more
    op.process_left([("c", 1_200, "o2", 6, None)])
    assert emitted(op) == [("c|6|table", 1, {"left": "o2", "right": "v2"})]


def test_the_factory_builds_a_join_of_tables_when_an_input_is_one() -> None:
    spec = {"kind": "regular", "how": "inner", "left": "orders", "right": "customers"}
    op = build_join_operator(PIPELINE, spec, ("orders", "customers"), False, tables=STREAM_TABLE)
    assert type(op) is TableJoinOperator and op.tables == STREAM_TABLE


def test_a_join_of_tables_has_a_table_input() -> None:
    with pytest.raises(JoinConfigError):
        join(tables=(False, False))


def sql_join(
    left: list[Event], right: list[Event], how: How, tables: tuple[bool, bool]
) -> dict[str, str]:
    """The SQL join of the final inputs (a table side: each key's last version, none
    after a tombstone; a stream side: every row), as ``name -> value JSON``."""

    def rows(events: list[Event], table: bool) -> list[tuple[str, str, Any]]:
        if not table:
            return [(key, str(i), value) for i, (key, _ts, value) in enumerate(events)]
        final: dict[str, Any] = {}
        for key, _ts, value in events:
            final[key] = value
        return [(key, "table", value) for key, value in final.items() if value is not None]

    lefts, rights = rows(left, tables[0]), rows(right, tables[1])
    out: dict[str, str] = {}

    def put(key: str, lname: str, rname: str, lvalue: Any, rvalue: Any) -> None:
        out[f"{key}|{lname}|{rname}"] = orjson.dumps({"left": lvalue, "right": rvalue}).decode()

    for key, lname, lvalue in lefts:
        partners = [(rname, rvalue) for rkey, rname, rvalue in rights if rkey == key]
        for rname, rvalue in partners:
            put(key, lname, rname, lvalue, rvalue)
        if not partners and how.pads(Side.LEFT):
            put(key, lname, "none", lvalue, None)
    if how.pads(Side.RIGHT):
        for key, rname, rvalue in rights:
            if not any(lkey == key for lkey, _, _ in lefts):
                put(key, "none", rname, None, rvalue)
    return out


def ops(table: bool) -> st.SearchStrategy[list[tuple[str, int, int]]]:
    """Steps of one input: ``(key, time step, n)``; a table's ``n`` 0 is a tombstone."""
    return st.lists(
        st.tuples(st.sampled_from("abc"), st.integers(0, 3), st.integers(0 if table else 1, 4)),
        max_size=20,
    )


def events(steps: list[tuple[str, int, int]]) -> list[Event]:
    now, out = 0, []
    for key, step, n in steps:
        now += step
        out.append((key, now, None if n == 0 else {"k": key, "n": n, "i": len(out)}))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=400, deadline=None)
@given(
    how=st.sampled_from(list(TableJoinOperator.hows)),
    tables=st.sampled_from([STREAM_TABLE, (True, False), TABLES]),
    data=st.data(),
    schedule=st.lists(st.integers(0, 1), max_size=50),
    restore=st.one_of(st.none(), st.integers(0, 50)),
)
def test_any_sequence_of_upserts_and_tombstones_folds_to_the_sql_join_of_the_final_tables(
    backend: str,
    how: How,
    tables: tuple[bool, bool],
    data: st.DataObject,
    schedule: list[int],
    restore: int | None,
) -> None:
    left = events(data.draw(ops(tables[0])))
    right = events(data.draw(ops(tables[1])))

    state = Backend(backend)

    def make() -> TableJoinOperator:
        return join(how, tables, state_maps=state.state_maps())

    driver = Driver(make(), 0, state)
    driver.run(left, right, schedule, 1, restore, make)
    upserts: list[Upsert] = driver.emitted  # type: ignore[assignment]
    table: dict[str, str] = {}
    newest: dict[str, int] = {}
    for row in upserts:
        # a row's seq only increases until its delete (seen again, a row may start anew)
        assert row.seq > newest.get(row.id, -1), row
        newest[row.id] = row.seq
        if row.result is None:
            table.pop(row.key, None)
            del newest[row.id]
        else:
            table[row.key] = orjson.dumps(row.result).decode()
    assert table == sql_join(left, right, how, tables)
