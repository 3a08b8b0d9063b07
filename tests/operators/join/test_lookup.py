"""The lookup join (semantics.md section 10, issue 31 point 4): each left row joined at
once with the table row of its key present then (processing time), a tombstone deletes,
``max_rows`` bounds the table, and the operator's checkpoint is its watermark alone."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.operators.join.factory import build_join_operator
from service.operators.join.lookup import (
    SOURCE_BITS,
    LookupJoinOperator,
    LookupTable,
    LookupTableFull,
)
from service.operators.join.rows import How, JoinConfigError, Side

from .reference import PIPELINE

INPUTS = ("orders", "customers")


def join(how: How = How.INNER, max_rows: int = 10, source: int = 0) -> LookupJoinOperator:
    return LookupJoinOperator(
        PIPELINE, how, LookupTable("customers", max_rows), inputs=INPUTS, source=source
    )


def rows(op: LookupJoinOperator) -> list[tuple[str, int, Any]]:
    emitted = [(r.id, r.timestamp, r.value) for r in op.collector.results]
    op.collector.results.clear()
    return emitted


def at(position: int, source: int = 0) -> int:
    return position << SOURCE_BITS | source


def test_a_left_row_meets_the_table_row_present_when_it_arrives() -> None:
    op = join()
    op.process_right([("c1", 5, {"name": "Ann"}, 1, None)])
    op.process_batch([("c1", 100, {"order": 1}, 7, None)])
    op.process_right([("c1", 6, {"name": "Bea"}, 2, None)])  # an update: later rows see it
    op.process_batch([("c1", 50, {"order": 2}, 8, None)])  # event time plays no part
    assert rows(op) == [
        (f"p|c1|{at(7)}|none", 100, {"left": {"order": 1}, "right": {"name": "Ann"}}),
        (f"p|c1|{at(8)}|none", 50, {"left": {"order": 2}, "right": {"name": "Bea"}}),
    ]


def test_inner_drops_and_left_pads_a_row_without_a_table_row() -> None:
    inner, left = join(How.INNER), join(How.LEFT)
    for op in (inner, left):
        op.process_batch([("c9", 10, "o", 1, None)])
    assert rows(inner) == []
    assert rows(left) == [(f"p|c9|{at(1)}|none", 10, {"left": "o", "right": None})]


def test_a_tombstone_deletes_the_table_row() -> None:
    op = join(How.LEFT)
    op.process_right([("c1", 5, "Ann", 1, None), ("c1", 6, None, 2, None)])
    op.process_batch([("c1", 10, "o", 3, None)])
    assert rows(op) == [(f"p|c1|{at(3)}|none", 10, {"left": "o", "right": None})]
    assert len(op.table) == 0


def test_nothing_waits_for_the_watermark_and_nothing_is_late() -> None:
    op = join(How.LEFT)
    op.advance_watermark(1_000)
    op.process_batch([("c1", 1, "old", 1, None)])  # far below W: joined all the same
    assert len(rows(op)) == 1
    assert op.collector.late == [] and op.collector.dropped_late == 0
    assert op.current_watermark == 1_000


def test_ids_name_the_left_row_and_its_partition() -> None:
    """The same offset on two left partitions gives two ids; a replay of one row meeting
    a newer version of its table row keeps its id (de-duplicated as one row)."""
    table = LookupTable("customers", 10)
    one = LookupJoinOperator(PIPELINE, How.INNER, table, inputs=INPUTS, source=0)
    two = LookupJoinOperator(PIPELINE, How.INNER, table, inputs=INPUTS, source=1)
    table.apply([("c1", 0, "Ann", 1, None)])
    one.process_batch([("c1", 10, "o", 5, None)])
    two.process_batch([("c1", 10, "o", 5, None)])
    table.apply([("c1", 0, "Bea", 2, None)])
    one.process_batch([("c1", 10, "o", 5, None)])  # the replay
    ids = [r[0] for r in rows(one)] + [r[0] for r in rows(two)]
    assert ids[0] == ids[1] != ids[2]


def test_more_keys_than_max_rows_raises_table_full() -> None:
    table = LookupTable("customers", 2)
    table.apply([("a", 0, 1, 0, None), ("b", 0, 1, 1, None), ("a", 0, 2, 2, None)])
    table.apply([("b", 0, None, 3, None), ("c", 0, 1, 4, None)])  # a delete makes room
    assert sorted(table.rows) == ["a", "c"]
    with pytest.raises(LookupTableFull, match="max_rows=2"):
        table.apply([("d", 0, 1, 5, None)])


def test_the_checkpoint_is_the_watermark_alone() -> None:
    op = join()
    op.process_right([("c1", 5, "Ann", 1, None)])
    op.process_batch([("c1", 10, "o", 3, None)])
    op.advance_watermark(42)
    snapshot = op.snapshot()
    assert snapshot == {"meta": {"version": 1, "watermark": 42}}
    assert op.snapshot_changes() == snapshot
    fresh = join()
    fresh.restore(snapshot)
    assert fresh.current_watermark == 42
    with pytest.raises(JoinConfigError):
        fresh.restore_changes([("l:c1", [])])


def test_numbers_count_no_rows_per_partition() -> None:
    op = join()
    op.process_right([("c1", 5, "Ann", 1, None)])
    assert op.rows_held(Side.LEFT) == op.rows_held(Side.RIGHT) == 0
    assert len(op.table) == 1


def test_built_from_the_spec() -> None:
    spec = {"kind": "lookup", "how": "left", "max_rows": 3, "select": None}
    op = build_join_operator(PIPELINE, {k: v for k, v in spec.items() if v}, INPUTS, False)
    assert isinstance(op, LookupJoinOperator)
    assert op.table.max_rows == 3
    with pytest.raises(JoinConfigError, match="max_rows"):
        build_join_operator(PIPELINE, {"kind": "lookup"}, INPUTS, False)
    with pytest.raises(JoinConfigError, match="inner or left"):
        build_join_operator(
            PIPELINE, {"kind": "lookup", "how": "full", "max_rows": 1}, INPUTS, False
        )


Step = tuple[str, str, int | None]
"""``("table", key, value or None for a tombstone)`` or ``("left", key, order)``."""

steps = st.lists(
    st.tuples(
        st.sampled_from(["table", "left"]),
        st.sampled_from(["a", "b", "c"]),
        st.one_of(st.none(), st.integers(0, 9)),
    ),
    max_size=40,
)


def reference_lookup(script: list[Step], how: How) -> list[tuple[str, int, Any]]:
    """Each left row with the table row of its key as the table stood when the row came
    (processing time: arrival order), straightforwardly."""
    table: dict[str, Any] = {}
    out: list[tuple[str, int, Any]] = []
    for position, (kind, key, value) in enumerate(script):
        if kind == "table":
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        elif key in table or how is How.LEFT:
            out.append((key, position, table.get(key)))
    return out


@settings(max_examples=200, deadline=None)
@given(script=steps, how=st.sampled_from([How.INNER, How.LEFT]), batch=st.integers(1, 5))
def test_any_interleaving_gives_the_reference_rows_however_the_left_rows_are_batched(
    script: list[Step], how: How, batch: int
) -> None:
    op = join(how, max_rows=10)
    pending: list[Any] = []

    def flush() -> None:
        op.process_batch(pending)
        pending.clear()

    for position, (kind, key, value) in enumerate(script):
        if kind == "table":
            flush()  # a table record arrives after every left row before it
            op.process_right([(key, 0, value, position, None)])
        else:
            pending.append((key, position, {"n": position}, position, None))
            if len(pending) >= batch:
                flush()
    flush()
    got = [(r.id.split("|")[1], r.timestamp, r.value["right"]) for r in op.collector.results]
    assert got == reference_lookup(script, how)
