"""The window operator's errors, as types.

Configuration problems are found once, when the operator is built, and are
:class:`WindowConfigError` (a :class:`~service.core.errors.ConfigError`, hence a
``ValueError``). They guard a direct construction (tests, benchmarks): a spec's are the
spec's models' and rules' to refuse, first and all in one 422
(``service/pipeline_spec/rules/``), so a validated spec never raises one here.
"""

from __future__ import annotations

from service.core.errors import ConfigError


class WindowConfigError(ConfigError):
    """A window operator (assigner, trigger, evictor, aggregation) was misconfigured."""


class WindowStateError(RuntimeError):
    """The operator's state broke an invariant (a bug, or a corrupt snapshot)."""
