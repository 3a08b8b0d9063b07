"""The keyed window operator (semantics.md section 5), independent of Kafka.

Build one with :func:`build_window_operator` (from the spec's ``"operator"`` dict) or
:func:`create_window_operator` (from a :class:`WindowOperatorConfig`).
"""

from .aggregations import AggKind, AggregationPlan, AggregationSpec
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
