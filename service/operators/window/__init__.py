"""The keyed window operator (semantics.md section 5), independent of Kafka.

Build one with :func:`build_window_operator` (from the spec's ``"operator"`` dict) or
:func:`create_window_operator` (from a :class:`WindowOperatorConfig`). The factory
returns :class:`FastWindowOperator` for tumbling/sliding event-time windows with the
default trigger, built-in aggregations and no evictor, else :class:`GeneralWindowOperator`;
both have the same semantics and the same snapshot format.

Fire kinds, precisely. The *time of a firing* is the timer's timestamp when a timer of
the window's own time domain caused it; otherwise (an element, or a timer of the other
domain) it is that domain's current time: the watermark for event-time windows, the
clock for processing-time windows. A firing is ``on_time`` when a timer of the window's
domain fires exactly at ``max_ts``; ``early`` when its time is before ``max_ts``;
``late`` otherwise (an allowed-late element after the watermark passed ``max_ts``).
So count and continuous triggers fire ``early`` inside the window, a processing-time
trigger on an event-time window fires ``early`` while ``W < max_ts``, and every firing
of the global window (``max_ts`` = MAX) before the final watermark is ``early``.
"""

from .aggregate_kinds import AggKind
from .aggregations import AggregationPlan, AggregationSpec
from .assigners import (
    GLOBAL_WINDOW,
    GlobalAssigner,
    SessionAssigner,
    SlidingAssigner,
    TumblingAssigner,
    Window,
    WindowAssigner,
)
from .config import WindowOperatorConfig
from .errors import WindowConfigError, WindowStateError
from .evictors import CountEvictor, Evictor, TimeEvictor
from .factory import WindowOperator, build_window_operator, create_window_operator
from .fast import FastWindowOperator
from .functions import FUNCTION_ERROR, WindowFunction
from .general import GeneralWindowOperator
from .triggers import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerContext,
    TriggerResult,
)

__all__ = [
    "FUNCTION_ERROR",
    "GLOBAL_WINDOW",
    "AggKind",
    "AggregationPlan",
    "AggregationSpec",
    "ContinuousEventTimeTrigger",
    "ContinuousProcessingTimeTrigger",
    "CountEvictor",
    "CountTrigger",
    "EventTimeTrigger",
    "Evictor",
    "FastWindowOperator",
    "GeneralWindowOperator",
    "GlobalAssigner",
    "NeverTrigger",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "SessionAssigner",
    "SlidingAssigner",
    "TimeEvictor",
    "Trigger",
    "TriggerContext",
    "TriggerResult",
    "TumblingAssigner",
    "Window",
    "WindowAssigner",
    "WindowConfigError",
    "WindowFunction",
    "WindowOperator",
    "WindowOperatorConfig",
    "WindowStateError",
    "build_window_operator",
    "create_window_operator",
]
