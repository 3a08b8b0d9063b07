"""Typed errors of the keyed process operator.

Each is raised for one reason and says what to fix; the runtime and the API map them to
responses (a pipeline spec problem is a 422, a user-code problem a failed record).
"""

from __future__ import annotations

from collections.abc import Sequence


class ProcessFunctionError(Exception):
    """Base class of the keyed process operator's errors."""


class InvalidParams(ProcessFunctionError, ValueError):
    """A function's params failed validation; ``problems`` lists every one of them."""

    def __init__(self, function: str, problems: Sequence[str]) -> None:
        self.function = function
        self.problems = list(problems)
        super().__init__(f"invalid params for {function!r}: " + "; ".join(self.problems))


class UnknownFunction(ProcessFunctionError, ValueError):
    """The function is neither a built-in nor a ``package.module:Name`` reference."""


class NotAProcessFunction(ProcessFunctionError, TypeError):
    """A user reference resolved to something that is not a KeyedProcessFunction subclass."""


class StateNotJsonSafe(ProcessFunctionError, TypeError):
    """A value written to keyed state cannot be represented in JSON exactly.

    State is checkpointed as plain data (never pickled), so only ``None``, ``bool``,
    ``int``, finite ``float``, ``str``, ``list`` and ``dict`` with ``str`` keys are allowed
    (tuples are refused: they would come back as lists after a restore).
    """

    def __init__(self, state: str, path: str, bad_type: str, why: str = "") -> None:
        self.state = state
        self.path = path
        self.bad_type = bad_type
        where = f" at {path}" if path else ""
        reason = f" ({why})" if why else ""
        super().__init__(
            f"state {state!r}: value of type {bad_type}{where} is not JSON-representable{reason}"
        )


class StateConflict(ProcessFunctionError, ValueError):
    """A state name was asked for with a different kind or TTL than it already has."""


class NoCurrentKey(ProcessFunctionError, RuntimeError):
    """Keyed state or a timer was used outside process_element/on_timer (e.g. in open)."""
