"""The window operator's configuration: what the API layer builds from a pipeline spec.

Plain, frozen data with the defaults of semantics.md section 5; validation happens
here, once, so the operators trust it on the per-record path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from service.core.state_cache import StateMaps
from service.core.time import Clock, SystemClock, TimeDomain

from .aggregations import AggregationSpec, parse_aggregations
from .assigners import GlobalAssigner, WindowAssigner
from .errors import WindowConfigError
from .evictors import Evictor
from .functions import WindowFunction
from .triggers import EventTimeTrigger, NeverTrigger, ProcessingTimeTrigger, Trigger


@dataclass(frozen=True, slots=True)
class WindowOperatorConfig:
    """Everything a window operator instance needs; exactly one of aggregations/function."""

    pipeline: str
    assigner: WindowAssigner
    time: TimeDomain = TimeDomain.EVENT_TIME
    trigger: Trigger | None = None
    """None: the default of the assigner and time domain (see :meth:`effective_trigger`)."""
    evictor: Evictor | None = None
    evict_after: bool = False
    allowed_lateness_ms: int = 0
    aggregations: Mapping[str, Any] | None = None
    """``{name: (fn, field)}`` (or ``{name: {"fn": ..., "field": ...}}``)."""
    function: WindowFunction | None = None
    late_output: bool = False
    """True: late records go to ``collector.late``; False: counted in ``dropped_late``."""
    on_bad_value: str = "dead_letter"
    """A value an aggregation cannot take: ``dead_letter`` the record (counted nowhere)
    or ``skip`` (aggregate it with that field as NULL); counted either way."""
    clock: Clock = field(default_factory=SystemClock)
    track_keys: bool = False
    """Keep track of changed keys, for :meth:`snapshot_changes` (incremental checkpoints)."""
    state_maps: StateMaps | None = None
    """The rocksdb backend's maps of the partition: the keyed state in their caches (and
    RocksDB behind them) instead of dicts; None: the memory backend."""

    def __post_init__(self) -> None:
        if not isinstance(self.time, TimeDomain):
            raise WindowConfigError(f"time must be a TimeDomain, not {self.time!r}")
        if self.on_bad_value not in ("dead_letter", "skip"):
            raise WindowConfigError(
                f"on_bad_value must be 'dead_letter' or 'skip', not {self.on_bad_value!r}"
            )
        lateness = self.allowed_lateness_ms
        if type(lateness) is not int or lateness < 0:
            raise WindowConfigError(f"allowed_lateness_ms must be an int >= 0, not {lateness!r}")
        if (self.aggregations is None) == (self.function is None):
            raise WindowConfigError("give exactly one of aggregations and a window function")
        if self.function is not None and not callable(self.function):
            raise WindowConfigError("the window function must be callable")
        if self.aggregations is not None:
            self.aggregation_specs()

    def aggregation_specs(self) -> list[AggregationSpec]:
        return parse_aggregations(self.aggregations or {})

    def effective_trigger(self) -> Trigger:
        """The configured trigger, or Flink's default: never for global windows, else by domain."""
        if self.trigger is not None:
            return self.trigger
        if isinstance(self.assigner, GlobalAssigner):
            return NeverTrigger()
        if self.time is TimeDomain.EVENT_TIME:
            return EventTimeTrigger()
        return ProcessingTimeTrigger()

    @property
    def keeps_elements(self) -> bool:
        """Evictors and full-window functions need every element, not an accumulator."""
        return self.evictor is not None or self.function is not None
