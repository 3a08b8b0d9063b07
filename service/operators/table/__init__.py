"""Operators whose results are a table: an upsert stream keyed by the group key (#50).

:mod:`.running`: the running aggregate, a ``GROUP BY`` without a window. Its results are
:class:`~service.operators.base.Upsert` rows: the key's newest value, at most once per
emit interval (Flink's mini-batch), and a tombstone when its state expires.
"""

from .running import (
    RunningAggregateConfig,
    RunningAggregateOperator,
    build_running_aggregate,
)

__all__ = ["RunningAggregateConfig", "RunningAggregateOperator", "build_running_aggregate"]
