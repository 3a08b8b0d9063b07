"""Small, pydantic-free validators for built-in function params.

Each built-in exposes ``validate_params(params) -> list[str]`` (every problem, as
``"field: message"``, so an API can return them all in one 422) and a frozen dataclass of
its parsed params. The checks here are the shared vocabulary.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from service.core.time import TimeDomain

TIME_DOMAINS = {d.value: d for d in TimeDomain}


def check_mapping(params: object) -> tuple[Mapping[str, Any], list[str]]:
    """``params`` as a mapping (None counts as empty), or a problem."""
    if params is None:
        return {}, []
    if not isinstance(params, Mapping):
        return {}, [f"params: must be an object, got {type(params).__name__}"]
    return params, []


def check_unknown(params: Mapping[str, Any], allowed: Collection[str]) -> list[str]:
    names = ", ".join(sorted(allowed)) or "none"
    return [
        f"{name}: unexpected parameter (allowed: {names})" for name in params if name not in allowed
    ]


def check_int(
    params: Mapping[str, Any],
    name: str,
    problems: list[str],
    *,
    required: bool,
    minimum: int | None = None,
    maximum: int | None = None,
) -> None:
    if name not in params:
        if required:
            problems.append(f"{name}: required")
        return
    value = params[name]
    if type(value) is not int:
        problems.append(f"{name}: must be an integer, got {value!r}")
        return
    if minimum is not None and value < minimum:
        problems.append(f"{name}: must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        problems.append(f"{name}: must be <= {maximum}, got {value}")


def check_time(params: Mapping[str, Any], problems: list[str]) -> None:
    value = params.get("time", "event")
    # isinstance first: an unhashable value (a list) is a problem, not a TypeError.
    if not isinstance(value, str) or value not in TIME_DOMAINS:
        problems.append(f"time: must be 'event' or 'processing', got {value!r}")
