"""Building a keyed process operator from a pipeline spec's ``function`` and ``params``.

``function`` is a built-in name (:data:`BUILTIN_FUNCTIONS`) or a ``package.module:Name``
reference to a :class:`KeyedProcessFunction` subclass in an allowed module.
:func:`validate_function` finds every problem without importing anything, for a 422;
:func:`build_process_operator` is what the runtime calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from service.core.state_cache import StateMaps
from service.core.time import Clock
from service.operators.process.builtins import BUILTIN_FUNCTIONS
from service.operators.process.errors import InvalidParams, NotAProcessFunction, UnknownFunction
from service.operators.process.function import KeyedProcessFunction
from service.operators.process.operator import KeyedProcessOperator
from service.operators.udf import UdfError, check_allowed, load_user_object, parse_ref


def _unknown(function: str) -> str:
    names = ", ".join(sorted(BUILTIN_FUNCTIONS))
    return (
        f"unknown function {function!r}: expected a built-in ({names}) "
        "or 'package.module:Name' from an allowed module"
    )


def validate_function(
    function: str, params: Mapping[str, Any] | None, allowed_modules: Sequence[str]
) -> list[str]:
    """Every problem with ``function``/``params``; never imports user code.

    Params of a user function are only checked when it is built (that needs the import).
    """
    builtin = BUILTIN_FUNCTIONS.get(function)
    if builtin is not None:
        return [f"params.{p}" for p in builtin.validate_params(params or {})]
    if not isinstance(function, str) or ":" not in function:
        return [f"function: {_unknown(function)}"]
    try:
        module, _ = parse_ref(function)
        check_allowed(module, allowed_modules)
    except UdfError as exc:
        return [f"function: {exc}"]
    return []


def build_process_function(
    function: str, params: Mapping[str, Any] | None, allowed_modules: Sequence[str]
) -> KeyedProcessFunction:
    """The function instance for a spec; typed errors for every way it can be wrong."""
    builtin = BUILTIN_FUNCTIONS.get(function)
    if builtin is not None:
        return builtin.from_params(params or {})
    if not isinstance(function, str) or ":" not in function:
        raise UnknownFunction(_unknown(function))
    obj = load_user_object(function, allowed_modules)
    if not (isinstance(obj, type) and issubclass(obj, KeyedProcessFunction)):
        raise NotAProcessFunction(
            f"{function!r} is {type(obj).__name__} {obj!r}, not a KeyedProcessFunction subclass"
        )
    instance = obj.from_params(params or {})
    if not isinstance(instance, KeyedProcessFunction):
        raise NotAProcessFunction(f"{function!r}.from_params returned {type(instance).__name__}")
    return instance


def build_process_operator(
    pipeline: str,
    function: str,
    params: Mapping[str, Any] | None,
    clock: Clock,
    allowed_modules: Sequence[str],
    state_maps: StateMaps | None = None,
) -> KeyedProcessOperator:
    """One operator instance (one partition) of a ``keyed_process`` pipeline; its states
    in the named maps ``state_maps`` makes (the rocksdb backend), or in dicts (None).

    Raises :class:`InvalidParams`, :class:`UnknownFunction`, :class:`NotAProcessFunction`
    or a :class:`~service.operators.udf.UdfError`.
    """
    return KeyedProcessOperator(
        pipeline, build_process_function(function, params, allowed_modules), clock, state_maps
    )


__all__ = [
    "BUILTIN_FUNCTIONS",
    "InvalidParams",
    "build_process_function",
    "build_process_operator",
    "validate_function",
]
