"""The rules of the pipeline's state backend (``"state"``): which operators keep their
state in RocksDB so far (issue 53: a running aggregate and a Top-N, over a stream or a
table, and a keyed process function)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from service.pipeline_spec.rules.base import (
    Fragment,
    Problem,
    Service,
    equals,
    of_type,
    rule,
)
from service.pipeline_spec.rules.raw import as_map

__all__ = ["ROCKSDB_OPERATORS", "rocksdb_state_supported"]

ROCKSDB_OPERATORS = ("aggregate", "top_n", "keyed_process")
"""The operator types whose state the rocksdb backend holds."""

_ROCKSDB: Mapping[str, Any] = {
    "required": ["state"],
    "properties": {"state": equals("backend", "rocksdb")},
}


@rule(
    reports={"rocksdb_state_unsupported"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": _ROCKSDB,
            "then": {
                "properties": {
                    "operator": {"anyOf": [of_type(kind) for kind in ROCKSDB_OPERATORS]},
                },
            },
        },
    ),
)
def rocksdb_state_supported(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """The rocksdb backend holds a running aggregate's groups (with its state TTL), a
    Top-N's rankings (over a stream or a table) and a keyed process function's states;
    a window's and a join's state are in memory only so far."""
    state = as_map(spec.get("state"))
    if state is None or state.get("backend") != "rocksdb":
        return
    op = as_map(spec.get("operator"))
    if op is None or "type" not in op or op["type"] in ROCKSDB_OPERATORS:
        return
    yield Problem(
        ("state", "backend"),
        "rocksdb_state_unsupported",
        f"the rocksdb state backend does not hold a {op['type']!r} operator's state yet: "
        "only a running aggregate ('aggregate'), a Top-N ('top_n') and a keyed process "
        "function ('keyed_process'); use 'memory'",
        "rocksdb",
    )
