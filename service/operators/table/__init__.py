"""Operators whose results are a table: an upsert stream keyed by the group key (#50).

:mod:`.running`: the running aggregate, a ``GROUP BY`` without a window. Its results are
:class:`~service.operators.base.Upsert` rows: the key's newest value, at most once per
emit interval (Flink's mini-batch), and a tombstone when its state expires.
:mod:`.top_n`: Top-N, the best ``n`` rows of each key (``ROW_NUMBER() OVER (PARTITION BY
... ORDER BY ...) <= n``), as upserts of rank rows.
"""

from .running import (
    RunningAggregateConfig,
    RunningAggregateOperator,
    build_running_aggregate,
)
from .top_n import TopNConfig, TopNOperator, build_top_n

__all__ = [
    "RunningAggregateConfig",
    "RunningAggregateOperator",
    "TopNConfig",
    "TopNOperator",
    "build_running_aggregate",
    "build_top_n",
]
