"""The base class of keyed process functions (Flink's ``KeyedProcessFunction``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from service.operators.base import InputRecord
from service.operators.process.context import Context, Out
from service.operators.process.errors import InvalidParams

RecordFailed = Callable[[Any, str, Exception, int], None]
"""``failed(source, key, exc, position)``: a record's call raised (see RecordsPath)."""

RecordsPath = Callable[[Sequence[InputRecord], RecordFailed], None]
"""A whole batch in one call; see :attr:`KeyedProcessFunction.process_records`."""


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

    process_records: RecordsPath | None = None
    """For the built-in functions: when set by :meth:`open`, the operator hands it each
    batch instead of calling :meth:`process_element` per record. It must do exactly what
    the per-record calls would (same state, timers and outputs) and report a record whose
    processing raised through ``failed``; it saves the per-record call and context set-up
    on the hottest path of a function whose per-record work is a few dict operations."""

    queryable_state: tuple[str, ...] = ()
    """The names of the states a pull query may read (``GET /pipelines/{name}/state/{key}``,
    docs/pull-queries.md); the others stay private to the function. Declare it on the
    class: ``queryable_state = ("count",)``."""

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
