"""Building a window operator: from a config object, or from the spec's plain dict.

:func:`build_window_operator` takes the contract's ``"operator"`` JSON (already
validated by the API layer's pydantic models) and returns the fastest operator class
that implements it exactly; every problem it still finds is a
:class:`~service.operators.window.errors.WindowConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.core.state_cache import StateMaps
from service.core.time import Clock, TimeDomain

from .assigners import (
    GlobalAssigner,
    SessionAssigner,
    SlidingAssigner,
    TumblingAssigner,
    WindowAssigner,
)
from .config import WindowOperatorConfig
from .errors import WindowConfigError
from .evictors import CountEvictor, Evictor, TimeEvictor
from .fast import FastWindowOperator, supports
from .functions import WindowFunction
from .general import GeneralWindowOperator
from .triggers import (
    CountTrigger,
    EventTimeTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    continuous_trigger,
)

WindowOperator = FastWindowOperator | GeneralWindowOperator


def create_window_operator(config: WindowOperatorConfig) -> WindowOperator:
    """The fast path where it applies exactly, else the general operator."""
    if supports(config):
        return FastWindowOperator(config)
    return GeneralWindowOperator(config)


def build_window_operator(
    pipeline: str,
    operator_spec: Mapping[str, Any],
    clock: Clock,
    late_output: bool,
    *,
    function: WindowFunction | None = None,
    track_keys: bool = False,
    state_maps: StateMaps | None = None,
) -> WindowOperator:
    """A window operator from the pipeline spec's ``"operator"`` object.

    Its window config errors are defensive only: the spec's models and rules
    (``pipeline_spec/rules/windows.py``, ``aggregates.py``) refuse every such spec first.

    ``function`` is the loaded window function when the spec names one
    (``"function": "package.module:Name"``); loading it is the UDF loader's job.
    ``state_maps``: the rocksdb backend's maps of the partition (None: memory).
    """
    kind = operator_spec.get("type", "window")
    if kind != "window":
        raise WindowConfigError(f"not a window operator: type {kind!r}")
    time = _time(operator_spec.get("time", "event"))
    aggregations = operator_spec.get("aggregations")
    if operator_spec.get("function") is not None:
        if function is None:
            raise WindowConfigError("the spec names a window function but none was passed")
        if aggregations:
            raise WindowConfigError("give either aggregations or a function, not both")
    elif function is not None:
        raise WindowConfigError("a window function was passed but the spec names none")
    evictor_spec = operator_spec.get("evictor")
    config = WindowOperatorConfig(
        pipeline=pipeline,
        assigner=_assigner(_mapping("assigner", operator_spec.get("assigner"))),
        time=time,
        trigger=_trigger(operator_spec.get("trigger"), time),
        evictor=_evictor(evictor_spec),
        evict_after=bool(evictor_spec.get("after", False)) if evictor_spec else False,
        allowed_lateness_ms=operator_spec.get("allowed_lateness_ms", 0),
        aggregations=aggregations if function is None else None,
        function=function,
        late_output=late_output,
        on_bad_value=operator_spec.get("on_bad_value", "dead_letter"),
        clock=clock,
        track_keys=track_keys,
        state_maps=state_maps,
    )
    return create_window_operator(config)


def _mapping(name: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise WindowConfigError(f"{name} must be an object")
    return value


def _time(value: Any) -> TimeDomain:
    try:
        return TimeDomain(value)
    except ValueError:
        raise WindowConfigError(f"time must be 'event' or 'processing', not {value!r}") from None


def _assigner(spec: Mapping[str, Any]) -> WindowAssigner:
    kind = spec.get("type")
    try:
        if kind == "tumbling":
            return TumblingAssigner(spec["size_ms"], spec.get("offset_ms", 0))
        if kind == "sliding":
            return SlidingAssigner(spec["size_ms"], spec["slide_ms"], spec.get("offset_ms", 0))
        if kind == "session":
            return SessionAssigner(spec["gap_ms"])
    except KeyError as missing:
        raise WindowConfigError(f"{kind} assigner needs {missing.args[0]}") from None
    if kind == "global":
        return GlobalAssigner()
    raise WindowConfigError(f"unknown assigner type {kind!r}")


def _trigger(spec: Any, time: TimeDomain) -> Trigger | None:
    if spec is None:
        return None
    spec = _mapping("trigger", spec)
    kind = spec.get("type")
    trigger: Trigger
    try:
        if kind == "event_time":
            trigger = EventTimeTrigger()
        elif kind == "processing_time":
            trigger = ProcessingTimeTrigger()
        elif kind == "count":
            trigger = CountTrigger(spec["count"])
        elif kind == "continuous":
            trigger = continuous_trigger(spec["interval_ms"], time)
        else:
            raise WindowConfigError(f"unknown trigger type {kind!r}")
    except KeyError as missing:
        raise WindowConfigError(f"{kind} trigger needs {missing.args[0]}") from None
    if spec.get("purge", False):
        trigger = PurgingTrigger(trigger)
    return trigger


def _evictor(spec: Any) -> Evictor | None:
    if spec is None:
        return None
    spec = _mapping("evictor", spec)
    kind = spec.get("type")
    try:
        if kind == "count":
            return CountEvictor(spec["max_count"])
        if kind == "time":
            return TimeEvictor(spec["keep_ms"])
    except KeyError as missing:
        raise WindowConfigError(f"{kind} evictor needs {missing.args[0]}") from None
    raise WindowConfigError(f"unknown evictor type {kind!r}")
