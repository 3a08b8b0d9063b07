"""A ``GROUP BY`` without a window -> the running aggregate (``"type": "aggregate"``).

```sql
SET emit_interval = INTERVAL '1' SECOND;   -- the default
INSERT INTO totals
SELECT "user", COUNT(*) AS orders, SUM(amount) AS revenue FROM purchases GROUP BY "user";
```

Flink SQL's group aggregate: the result of a key changes with every record, so the sink
gets an upsert stream (docs/pipeline-spec.md, "Running aggregates"): each key's newest
result at most once per ``emit_interval`` (Flink's mini-batch,
``table.exec.mini-batch.allow-latency``, says the same), and a delete when ``SET
state_ttl`` (``table.exec.state.ttl``; processing time here, as in Flink) expires an
idle key. The key and the aggregates are read as a window aggregation's are
(:mod:`.windows`): one group key column is the spec's ``key.field``, several or an
expression are joined into ``_sql_key``, none is the one key ``all``.

Over a table (``CREATE TABLE ... WITH (changelog = 'upsert')`` or a ``PRIMARY KEY``) the
aggregate takes replaced and deleted rows back; grouped by the one ``PRIMARY KEY``
column it is keyed by the Kafka key (no shuffle), by anything else it goes through the
retraction shuffle (``runtime/shuffle/table_writer.py``).
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from .context import Compilation
from .expressions import one_source_query, write_source
from .problems import SqlProblem
from .sink import Settings
from .sources import Source
from .windows import aggregations_of, group_key

__all__ = ["compile_running_aggregate"]

_WINDOW_ONLY = ("allowed_lateness", "early_fire")
"""Settings of windows (and joins) that a running aggregate has no use for."""


def compile_running_aggregate(
    comp: Compilation, source: Source, select: exp.Select, statement: int, settings: Settings
) -> None:
    """Write the running aggregate of ``select`` over ``source`` into the spec."""
    scope, steps = one_source_query(comp, source, select, statement)
    computed: dict[str, str] = {}
    key = group_key(comp, scope, source, select, statement, computed, windowed=False)
    if (
        key is not None
        and source.source.get("changelog") == "upsert"
        and source.primary_key == (key.get("field"),)
    ):
        key = None  # grouped by the table's primary key: its Kafka key, nothing shuffled
    aggregations = aggregations_of(comp, scope, select, statement, computed, windowed=False)
    if computed:
        comp.came_from(("steps", len(steps)), select, statement)
        steps.append({"set": computed})
    spec = write_source(comp, source, steps)
    if key is not None:
        spec["key"] = key
        comp.came_from(("key",), select.args.get("group") or select, statement)
    if source.timestamp:
        spec["timestamp"] = source.timestamp
    if source.watermark:
        spec["watermark"] = source.watermark
    values = settings.values
    for name in _WINDOW_ONLY:
        if name in values:
            comp.problems.append(
                SqlProblem(
                    settings.at[name],
                    "sql_option",
                    f"SET {name} is for windows, not a GROUP BY without one (its results "
                    "are upserts: emit_interval says how often)",
                )
            )
    operator: dict[str, Any] = {"type": "aggregate", "aggregations": aggregations}
    if "emit_interval" in values:
        operator["emit_interval_ms"] = values["emit_interval"]
        comp.origins[("operator", "emit_interval_ms")] = settings.at["emit_interval"]
    if "state_ttl" in values:
        operator["state_ttl_ms"] = values["state_ttl"]
        comp.origins[("operator", "state_ttl_ms")] = settings.at["state_ttl"]
    if "on_bad_value" in values:
        operator["on_bad_value"] = values["on_bad_value"]
    spec["operator"] = operator
    comp.came_from(("operator",), select, statement)
