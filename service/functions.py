"""The API for user-written keyed process functions, in one import.

Write a module with a :class:`KeyedProcessFunction` subclass, list its package in
``SERVICE_UDF_MODULES`` and reference it from a pipeline spec as
``{"type": "keyed_process", "function": "package.module:Name", "params": {...}}``::

    from service.functions import Context, KeyedProcessFunction, Out

    class CountPerKey(KeyedProcessFunction):
        def open(self, ctx: Context) -> None:
            self.count = ctx.value_state("count")

        def process_element(self, value, ctx: Context, out: Out) -> None:
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            out.collect({"count": n})

State values must be JSON-representable; state and timers are checkpointed with the
partition and restored after a restart or a rebalance.
"""

from __future__ import annotations

from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP, TimeDomain
from service.operators.process.context import Context, Out, TimerServiceView
from service.operators.process.errors import (
    InvalidParams,
    NoCurrentKey,
    StateConflict,
    StateNotJsonSafe,
)
from service.operators.process.function import KeyedProcessFunction
from service.operators.process.state import ListState, MapState, StateKind, ValueState

__all__ = [  # noqa: RUF022 -- grouped by topic, as aiokafka does
    # the function and what it is called with
    "Context",
    "KeyedProcessFunction",
    "Out",
    "TimerServiceView",
    # keyed state
    "ListState",
    "MapState",
    "StateKind",
    "ValueState",
    # time
    "MAX_TIMESTAMP",
    "MIN_TIMESTAMP",
    "TimeDomain",
    # errors user code may see or raise
    "InvalidParams",
    "NoCurrentKey",
    "StateConflict",
    "StateNotJsonSafe",
]
