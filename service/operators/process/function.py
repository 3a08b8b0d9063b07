"""The base class of keyed process functions (Flink's ``KeyedProcessFunction``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.operators.process.context import Context, Out
from service.operators.process.errors import InvalidParams


class KeyedProcessFunction:
    """Subclass this and implement :meth:`process_element` (and usually :meth:`on_timer`).

    One instance serves one operator instance (one partition) and is called from one
    thread. Keep per-key data in keyed state (``ctx.value_state(...)`` and friends), not in
    attributes: state is checkpointed and scoped to the current key, attributes are neither.
    Create state handles once in :meth:`open` and keep them on ``self``.

    An exception raised by user code sends the record (or timer) to the failed output and
    processing goes on with the next one; state changes and outputs made before the
    exception are kept (there is no per-record transaction).
    """

    def open(self, ctx: Context) -> None:
        """Called once before anything else; there is no current key yet."""

    def process_element(self, value: Any, ctx: Context, out: Out) -> None:
        """Called for each record of the current key ``ctx.key``."""
        raise NotImplementedError(f"{type(self).__name__} must implement process_element")

    def on_timer(self, timestamp: int, ctx: Context, out: Out) -> None:
        """Called when a timer of ``ctx.key`` fires; ``ctx.time_domain`` says which kind."""

    # -- construction from a pipeline spec ----------------------------------------------
    @classmethod
    def validate_params(cls, params: Mapping[str, Any]) -> list[str]:
        """Every problem with ``params`` as ``"field: message"``; [] when they are valid.

        The default accepts no params; built-ins override this. User functions that take
        params should override it and :meth:`from_params` together.
        """
        return [f"{name}: unexpected parameter" for name in params]

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> KeyedProcessFunction:
        """Build an instance from spec params; raises :class:`InvalidParams` listing problems."""
        problems = cls.validate_params(params)
        if problems:
            raise InvalidParams(cls.__name__, problems)
        return cls()
