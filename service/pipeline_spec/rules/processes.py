"""The rules of a keyed process operator: its function (a built-in or an allowed user
function) and a built-in's params."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from service.core.time import MAX_DURATION_MS
from service.operators.process.builtins import BUILTIN_FUNCTIONS
from service.operators.process.builtins.daily_counter import MAX_OFFSET_MINUTES
from service.pipeline_spec.rules.base import (
    Fragment,
    JsonSchema,
    Loc,
    Problem,
    Service,
    equals,
    rule,
)
from service.pipeline_spec.rules.raw import as_map, as_str
from service.pipeline_spec.rules.user_functions import user_function_pattern, user_ref

__all__ = [
    "BUILTIN_PARAMS_SCHEMAS",
    "BUILTIN_PROCESS_FUNCTIONS",
    "builtin_params",
    "process_function_known",
]

BUILTIN_PROCESS_FUNCTIONS = frozenset(BUILTIN_FUNCTIONS)
"""Keyed process functions that ship with the service (each validates its own params)."""


def _keyed_process_function(spec: Mapping[str, Any]) -> str | None:
    op = as_map(spec.get("operator"))
    if op is None or op.get("type") != "keyed_process":
        return None
    return as_str(op.get("function"))


def _process_function_schema(allowed: Sequence[str]) -> JsonSchema:
    builtins: JsonSchema = {"enum": sorted(BUILTIN_PROCESS_FUNCTIONS)}
    pattern = user_function_pattern(allowed)
    if pattern is None:
        return {"properties": {"function": builtins}}
    reference = {"type": "string", "pattern": pattern, "maxLength": 256}
    return {"properties": {"function": {"anyOf": [builtins, reference]}}}


@rule(
    reports={"unknown_function", "function_not_allowed", "function_ref_invalid"},
    schema=Fragment("KeyedProcessOperator", _process_function_schema),
)
def process_function_known(spec: Mapping[str, Any], service: Service) -> Iterator[Problem]:
    """A keyed process function is a built-in or an allowed module's function."""
    fn = _keyed_process_function(spec)
    if fn is None or fn in BUILTIN_PROCESS_FUNCTIONS:
        return
    if ":" in fn:
        yield from user_ref(("operator", "function"), fn, service.allowed_modules)
    else:
        yield Problem(
            ("operator", "function"),
            "unknown_function",
            f"{fn!r} is not a built-in ({', '.join(sorted(BUILTIN_PROCESS_FUNCTIONS))}) "
            "nor a 'package.module:Name' reference",
            fn,
        )


_TIME_DOMAINS = ["event", "processing"]
_PATH_PARAM = {"type": "string", "pattern": r"^[^.]+(\.[^.]+)*$"}
"""A dotted path as the built-ins split it (no empty part)."""


def _timed_params(duration: str, **more: JsonSchema) -> JsonSchema:
    """The params of a built-in that waits ``duration`` in its time domain (``time``)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": [duration],
        "properties": {
            duration: {"type": "integer", "minimum": 1, "maximum": MAX_DURATION_MS},
            "time": {"enum": _TIME_DOMAINS},
            **more,
        },
    }


BUILTIN_PARAMS_SCHEMAS: Mapping[str, JsonSchema] = {
    "inactivity_timeout": _timed_params("timeout_ms"),
    "dedupe": _timed_params(
        "ttl_ms", fields={"type": "array", "minItems": 1, "items": _PATH_PARAM}
    ),
    "daily_reset_counter": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "utc_offset_minutes": {
                "type": "integer",
                "minimum": -MAX_OFFSET_MINUTES,
                "maximum": MAX_OFFSET_MINUTES,
            }
        },
    },
}
"""The params each built-in keyed process function accepts: what its ``validate_params``
checks, as a schema (a test keeps the two in step)."""


def _builtin_params_schema() -> JsonSchema:
    cases: list[JsonSchema] = []
    for name in sorted(BUILTIN_PROCESS_FUNCTIONS):
        params = BUILTIN_PARAMS_SCHEMAS[name]
        then: JsonSchema = {"properties": {"params": params}}
        if params.get("required"):
            then["required"] = ["params"]
        cases.append({"if": equals("function", name), "then": then})
    return {"allOf": cases}


_PARAM_PATH = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)$")


@rule(
    reports={"invalid_param"},
    schema=Fragment("KeyedProcessOperator", _builtin_params_schema()),
)
def builtin_params(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Params of a built-in, checked by the built-in itself (``"field: message"`` each)."""
    fn = _keyed_process_function(spec)
    if fn is None or fn not in BUILTIN_PROCESS_FUNCTIONS:
        return
    op = as_map(spec.get("operator")) or {}
    params = as_map(op.get("params", {}))  # left out: {} (required params are reported)
    if params is None:
        return
    for text in BUILTIN_FUNCTIONS[fn].validate_params(params):
        where, sep, msg = text.partition(": ")
        match = _PARAM_PATH.match(where) if sep else None
        loc: Loc = ("operator", "params")
        if match is None:
            msg = text
        elif where != "params":
            indexes = tuple(int(i) for i in re.findall(r"\d+", match.group(2)))
            loc = (*loc, match.group(1), *indexes)
        yield Problem(loc, "invalid_param", msg, params.get(match.group(1)) if match else None)


# -- joins (semantics.md section 10) ---------------------------------------------------
