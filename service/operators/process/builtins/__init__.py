"""Built-in keyed process functions, usable from a pipeline spec by name."""

from __future__ import annotations

from service.operators.process.builtins.daily_counter import (
    DailyResetCounter,
    DailyResetCounterParams,
)
from service.operators.process.builtins.dedupe import Dedupe, DedupeParams
from service.operators.process.builtins.inactivity import InactivityParams, InactivityTimeout
from service.operators.process.function import KeyedProcessFunction

BUILTIN_FUNCTIONS: dict[str, type[KeyedProcessFunction]] = {
    InactivityTimeout.NAME: InactivityTimeout,
    Dedupe.NAME: Dedupe,
    DailyResetCounter.NAME: DailyResetCounter,
}
"""Spec name -> class; each has ``validate_params(dict) -> list[str]`` and ``from_params``."""

__all__ = [
    "BUILTIN_FUNCTIONS",
    "DailyResetCounter",
    "DailyResetCounterParams",
    "Dedupe",
    "DedupeParams",
    "InactivityParams",
    "InactivityTimeout",
]
