"""The rules of a running aggregate (``"type": "aggregate"``): how its state TTL fits its
emit interval. Its aggregations are checked by :mod:`.aggregates`, as a window's are."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from service.operators.table.running import DEFAULT_EMIT_INTERVAL_MS
from service.pipeline_spec.rules.base import COMPARES, Problem, Service, rule
from service.pipeline_spec.rules.raw import as_int, running_aggregate_of

__all__ = ["state_ttl_covers_emit_interval"]


@rule(
    reports={"state_ttl_below_emit_interval"},
    beyond_schema={"state_ttl_below_emit_interval": COMPARES},
)
def state_ttl_covers_emit_interval(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A key's idleness is taken once per emit interval (at the tick after its records),
    so a state TTL shorter than the interval would promise an expiry it cannot keep."""
    op = running_aggregate_of(spec)
    if op is None:
        return
    ttl = as_int(op.get("state_ttl_ms"))
    interval = op.get("emit_interval_ms", DEFAULT_EMIT_INTERVAL_MS)
    interval = as_int(interval)
    if ttl is not None and interval is not None and 0 < ttl < interval:
        yield Problem(
            ("operator", "state_ttl_ms"),
            "state_ttl_below_emit_interval",
            f"state_ttl_ms ({ttl}) is below emit_interval_ms ({interval}): a key's idleness "
            "is taken once per emit interval, so its state lives at least one interval",
            ttl,
        )
