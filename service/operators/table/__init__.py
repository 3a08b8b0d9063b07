"""Operators whose results are a table: an upsert stream keyed by the group key (#50).

:mod:`.running`: the running aggregate, a ``GROUP BY`` without a window. Its results are
:class:`~service.operators.base.Upsert` rows: the key's newest value, at most once per
emit interval (Flink's mini-batch), and a tombstone when its state expires.
:mod:`.table_aggregate`: the same over a table source (``source.changelog: "upsert"``),
each row replaced or deleted taken back first (:mod:`.retracting`'s accumulators).
:mod:`.top_n`: Top-N, the best ``n`` rows of each key (``ROW_NUMBER() OVER (PARTITION BY
... ORDER BY ...) <= n``), as upserts of rank rows.
"""

from .build import build_running_aggregate
from .running import RunningAggregateConfig, RunningAggregateOperator
from .table_aggregate import TableAggregateOperator
from .top_n import TopNConfig, TopNOperator, build_top_n

__all__ = [
    "RunningAggregateConfig",
    "RunningAggregateOperator",
    "TableAggregateOperator",
    "TopNConfig",
    "TopNOperator",
    "build_running_aggregate",
    "build_top_n",
]
