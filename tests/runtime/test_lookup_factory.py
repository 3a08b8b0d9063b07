"""The lookup join's operator factory: operators over the table the runtime gives it."""

from __future__ import annotations

from service.core.time import Clock, ManualClock
from service.operators.join.lookup import LookupJoinOperator
from service.runtime.factories import LookupJoinFactory, join_operator_factory

INPUTS = ("orders", "customers")


def test_the_factory_builds_over_the_table_it_is_given() -> None:
    factory = join_operator_factory("p", {"kind": "lookup", "max_rows": 5}, INPUTS, False)
    assert isinstance(factory, LookupJoinFactory)
    table = factory.table()
    clock: Clock = ManualClock(0)
    op = factory.build(clock, table, 3)
    assert isinstance(op, LookupJoinOperator) and op.table is table
    assert factory(clock) is not op
