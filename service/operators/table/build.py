"""Building a running aggregate from its spec: over a stream (:mod:`.running`) or over a
table source, its rows retracted (:mod:`.table_aggregate`, which extends the former; so
the choice between them lives here, above both)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.core.state_cache import StateMaps
from service.core.time import Clock
from service.operators.window.errors import WindowConfigError

from .running import DEFAULT_EMIT_INTERVAL_MS, RunningAggregateConfig, RunningAggregateOperator
from .table_aggregate import TableAggregateOperator

__all__ = ["build_running_aggregate"]


def build_running_aggregate(
    pipeline: str,
    operator_spec: Mapping[str, Any],
    clock: Clock,
    *,
    emit_at_checkpoint: bool = False,
    table: bool = False,
    group_field: str | None = None,
    state_map: StateMaps | None = None,
) -> RunningAggregateOperator:
    """A running aggregate from the spec's ``"operator"`` object (``"type": "aggregate"``);
    ``table``: over a table source, its rows retracted (:mod:`.table_aggregate`), grouped
    by ``group_field`` (None: by the primary key, the record's key). ``state_map``: the
    rocksdb state backend's named maps (None: the memory backend, dicts)."""
    kind = operator_spec.get("type")
    if kind != "aggregate":
        raise WindowConfigError(f"not a running aggregate: type {kind!r}")
    aggregations = operator_spec.get("aggregations")
    if not isinstance(aggregations, Mapping):
        raise WindowConfigError("aggregations must be an object")
    config = RunningAggregateConfig(
        pipeline=pipeline,
        aggregations=aggregations,
        emit_interval_ms=operator_spec.get("emit_interval_ms", DEFAULT_EMIT_INTERVAL_MS),
        state_ttl_ms=operator_spec.get("state_ttl_ms"),
        on_bad_value=operator_spec.get("on_bad_value", "dead_letter"),
        emit_at_checkpoint=emit_at_checkpoint,
        clock=clock,
        state_map=state_map,
    )
    if table:
        return TableAggregateOperator(config, group_field=group_field)
    return RunningAggregateOperator(config)
