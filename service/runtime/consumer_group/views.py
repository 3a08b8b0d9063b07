"""What every part of a session reads of it: which pipeline and stage it runs, with
which settings, clock and metrics.

Each part (the loop, the checkpointer, the assignment, the reporter) declares the rest
of what it uses as a protocol extending :class:`SessionBasics`, beside itself: so the
members a part reaches are written down once, where a reader looks for them.
"""

from __future__ import annotations

from typing import Protocol

from service.core.time import Clock
from service.runtime.consumer_group.stages import Stage
from service.runtime.definition import PipelineDefinition
from service.runtime.observability.metrics import RuntimeMetrics
from service.runtime.settings import RuntimeSettings


class SessionBasics(Protocol):
    """The session's identity: fixed for its life."""

    @property
    def name(self) -> str: ...
    @property
    def definition(self) -> PipelineDefinition: ...
    @property
    def stage(self) -> Stage: ...
    @property
    def settings(self) -> RuntimeSettings: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def metrics(self) -> RuntimeMetrics: ...
