"""A join fed one batch of both inputs: the source number in a position says the side."""

from __future__ import annotations

from service.core.time import MAX_TIMESTAMP
from service.operators.join.inputs import SidedJoin
from service.operators.join.interval import IntervalJoinOperator
from service.operators.join.rows import How, Side


def test_runs_of_each_side_reach_the_join_in_order() -> None:
    join = IntervalJoinOperator("p", How.INNER, 0, 10)
    sided = SidedJoin(join, [Side.LEFT, Side.RIGHT, Side.LEFT])  # sources 0, 1, 2
    sided.process_batch(
        [
            ("k", 100, "l0", 5 << 16 | 0, None),
            ("k", 101, "r1", 6 << 16 | 1, None),
            ("k", 102, "l2", 7 << 16 | 2, None),
            ("k", 103, "r1b", 8 << 16 | 1, None),
        ]
    )
    sided.advance_watermark(MAX_TIMESTAMP)
    assert sorted(r.id for r in sided.collector.results) == [
        f"p|k|{5 << 16}|{6 << 16 | 1}",
        f"p|k|{5 << 16}|{8 << 16 | 1}",
        f"p|k|{7 << 16 | 2}|{8 << 16 | 1}",
    ]
    assert sided.rows_held(Side.LEFT) == 0
