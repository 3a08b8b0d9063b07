"""The keyed process operator (Flink's KeyedProcessOperator + KeyedProcessFunction).

Modules: :mod:`function` (the user base class), :mod:`context` (ctx, timers, out),
:mod:`state` (keyed state with TTL), :mod:`operator` (the Operator implementation),
:mod:`builtins` (functions usable by name), :mod:`factory` (spec -> operator).
"""

from __future__ import annotations

from service.operators.process.builtins import BUILTIN_FUNCTIONS
from service.operators.process.context import Context, Out, TimerServiceView
from service.operators.process.errors import (
    InvalidParams,
    NoCurrentKey,
    NotAProcessFunction,
    ProcessFunctionError,
    StateConflict,
    StateNotJsonSafe,
    UnknownFunction,
)
from service.operators.process.factory import (
    build_process_function,
    build_process_operator,
    validate_function,
)
from service.operators.process.function import KeyedProcessFunction
from service.operators.process.operator import KeyedProcessOperator, ProcessCounters
from service.operators.process.state import ListState, MapState, StateKind, ValueState

__all__ = [
    "BUILTIN_FUNCTIONS",
    "Context",
    "InvalidParams",
    "KeyedProcessFunction",
    "KeyedProcessOperator",
    "ListState",
    "MapState",
    "NoCurrentKey",
    "NotAProcessFunction",
    "Out",
    "ProcessCounters",
    "ProcessFunctionError",
    "StateConflict",
    "StateKind",
    "StateNotJsonSafe",
    "TimerServiceView",
    "UnknownFunction",
    "ValueState",
    "build_process_function",
    "build_process_operator",
    "validate_function",
]
