"""Dotted field paths into decoded JSON payloads (``"a.b"`` is ``value["a"]["b"]``).

Used on the per-record path (timestamps, keys, punctuated watermarks), so a path is
split once, when the pipeline is built, and looking it up is a short loop of
subscripts with no string work. Only dicts are traversed: a list, a string or a number
on the way means the field is missing, never an index into it. A field name cannot
contain a dot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from service.core.errors import ConfigError


class _Missing:
    """The type of :data:`MISSING`; distinct from ``None``, which a field can hold."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final[Any] = _Missing()
"""Returned by a path lookup when the field is absent (``None`` is a present value)."""

PathGetter = Callable[[Any], Any]
"""``getter(value)`` returns the field's value, or :data:`MISSING`."""

_LOOKUP_ERRORS = (KeyError, TypeError, IndexError)


def split_path(dotted: str) -> tuple[str, ...]:
    """The parts of ``dotted``; a ConfigError for an empty path or an empty part."""
    if not isinstance(dotted, str):
        raise ConfigError(f"field path must be a string, not {type(dotted).__name__}")
    parts = tuple(dotted.split("."))
    if not dotted or any(not part for part in parts):
        raise ConfigError(f"invalid field path {dotted!r}: empty part")
    return parts


def compile_path(dotted: str) -> PathGetter:
    """A getter for ``dotted``, specialised for one and two parts (the common cases)."""
    parts = split_path(dotted)
    if len(parts) == 1:
        (first,) = parts

        def get_one(value: Any) -> Any:
            if type(value) is dict:
                return value.get(first, MISSING)
            return _slow_get(value, parts)

        return get_one
    if len(parts) == 2:
        first, second = parts

        def get_two(value: Any) -> Any:
            try:
                inner = value[first]
                if type(inner) is dict:
                    return inner.get(second, MISSING)
            except _LOOKUP_ERRORS:
                return MISSING
            return _slow_get(value, parts)

        return get_two

    def get_many(value: Any) -> Any:
        return _slow_get(value, parts)

    return get_many


def _slow_get(value: Any, parts: tuple[str, ...]) -> Any:
    for part in parts:
        if not isinstance(value, dict):
            return MISSING
        value = value.get(part, MISSING)
        if value is MISSING:
            return MISSING
    return value


_CACHE: dict[str, PathGetter] = {}
_CACHE_LIMIT = 1024


def get_path(value: Any, dotted: str) -> Any:
    """``value``'s field at ``dotted``, or :data:`MISSING`.

    Convenience for code that does not keep a compiled getter: the split path is cached
    per distinct string (bounded), so repeated calls do no string work either.
    """
    getter = _CACHE.get(dotted)
    if getter is None:
        getter = compile_path(dotted)
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[dotted] = getter
    return getter(value)


def key_text(raw: Any) -> str | None:
    """A payload key as text: strings as they are, booleans and numbers as JSON writes
    them; None for anything else (no key). The decoder's payload keys and a table
    aggregate's groups are this one text, so stage 1 routes a group where stage 2 keeps it."""
    if type(raw) is str:
        return raw
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int | float):
        return orjson.dumps(raw).decode()
    return None
