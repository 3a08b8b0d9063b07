"""The value schema of a window pipeline's results, derived from its spec, for a sink
in a format with a schema (``sink.format``; docs/formats.md, "Results").

A result is ``{pipeline, key, window: {start, end}, result: {<aggregation>: ...},
fire, seq, watermark, id}``; each aggregation's type follows from its function: the
counts are longs, a sum a long or a double (as its inputs were), an average a double,
min and max a number or a string, first, last, max_by, min_by and collect's elements
any scalar (a JSON object or array among them is written as its JSON text); null where
the function can give none (nothing to average).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

AVRO_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""What Avro allows as a field name (an aggregation's output name in the result)."""

_SCALAR: list[Any] = ["null", "boolean", "long", "double", "string"]
_DEFAULTS: dict[str, Any] = {"count": 0, "count_distinct": 0, "sum": 0, "collect": []}
"""Each field has a default (the others: null), so adding or removing an aggregation
keeps the schema backward and forward compatible; changing one's type may not."""
_TYPES: dict[str, Any] = {
    "count": "long",
    "count_distinct": "long",
    "sum": ["long", "double"],
    "avg": ["null", "double"],
    "min": ["null", "long", "double", "string"],
    "max": ["null", "long", "double", "string"],
    "first": _SCALAR,
    "last": _SCALAR,
    "max_by": _SCALAR,
    "min_by": _SCALAR,
    "collect": {"type": "array", "items": _SCALAR},
}


def _name(pipeline: str) -> str:
    """The pipeline's name as an Avro name part (``orders-per-user`` -> ``orders_per_user``)."""
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", pipeline)
    return cleaned if re.match(r"[A-Za-z_]", cleaned) else f"p_{cleaned}"


def window_result_avro_schema(pipeline: str, aggregations: Mapping[str, Any]) -> dict[str, Any]:
    """The Avro schema of the results of a window pipeline with ``aggregations`` (the
    spec's ``operator.aggregations``: output name -> ``{"fn": ..., "field": ...}``)."""
    namespace = f"clockwork.{_name(pipeline)}"
    fields = [
        {"name": out, "type": _TYPES[str(agg["fn"])], "default": _DEFAULTS.get(str(agg["fn"]))}
        for out, agg in aggregations.items()
    ]
    return {
        "type": "record",
        "name": "WindowResult",
        "namespace": namespace,
        "fields": [
            {"name": "pipeline", "type": "string"},
            {"name": "key", "type": "string"},
            {
                "name": "window",
                "type": {
                    "type": "record",
                    "name": "Window",
                    "fields": [
                        {"name": "start", "type": "long"},
                        {"name": "end", "type": "long"},
                    ],
                },
            },
            {"name": "result", "type": {"type": "record", "name": "Result", "fields": fields}},
            {"name": "fire", "type": "string"},
            {"name": "seq", "type": "long"},
            {"name": "watermark", "type": "long"},
            {"name": "id", "type": "string"},
        ],
    }
