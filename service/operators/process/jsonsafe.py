"""Checking that a state value survives a JSON round trip unchanged.

Why check on write: a checkpoint that fails hours after the bad write names neither the
state nor the record; failing the write itself points at the line of user code (and the
record goes to the failed output). The check is cheap for the common case: callers skip
it for ``str``/``int``/``bool``/``None`` (a test of the exact type; value state also for a
finite ``float``) and only walk containers and the rest.
"""

from __future__ import annotations

import math
from typing import Any, Final

from service.operators.process.errors import StateNotJsonSafe

SIMPLE_TYPES: Final = frozenset({str, int, bool, type(None)})
"""Exact types that need no further check; callers test ``type(v) in SIMPLE_TYPES``."""

_MAX_DEPTH: Final = 64


def check_json_safe(value: Any, state: str) -> None:
    """Raise :class:`StateNotJsonSafe` unless ``value`` is exactly JSON-representable.

    Exact types only: ``dict`` with ``str`` keys, ``list``, ``str``, ``int``, finite
    ``float``, ``bool``, ``None``. Subclasses (``IntEnum``, ``OrderedDict``), tuples, sets,
    bytes and non-finite floats are refused, because they would not come back as the same
    value after a restore.
    """
    _check(value, state, "", 0)


def _check(value: Any, state: str, path: str, depth: int) -> None:
    t = type(value)
    if t in SIMPLE_TYPES:
        return
    if t is float:
        if not math.isfinite(value):
            raise StateNotJsonSafe(state, path, "float", f"{value!r} is not finite")
        return
    if depth >= _MAX_DEPTH:
        raise StateNotJsonSafe(state, path, t.__name__, f"nested deeper than {_MAX_DEPTH}")
    if t is list:
        for i, item in enumerate(value):
            if type(item) not in SIMPLE_TYPES:
                _check(item, state, f"{path}[{i}]", depth + 1)
        return
    if t is dict:
        for k, item in value.items():
            if type(k) is not str:
                raise StateNotJsonSafe(
                    state, f"{path}{{{k!r}}}", type(k).__name__, "dict keys must be str"
                )
            if type(item) not in SIMPLE_TYPES:
                _check(item, state, f"{path}.{k}", depth + 1)
        return
    raise StateNotJsonSafe(state, path, t.__name__)


def copy_plain(value: Any) -> Any:
    """A deep copy of already-checked plain data (cheaper than ``copy.deepcopy``)."""
    t = type(value)
    if t is list:
        return [copy_plain(item) for item in value]
    if t is dict:
        return {k: copy_plain(item) for k, item in value.items()}
    return value
