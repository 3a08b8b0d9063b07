"""The rules of the pipeline's state backend (``"state"``): which operators keep their
state in RocksDB so far (issue 53: a window over a stream, a running aggregate and a
Top-N over a stream or a table, a keyed process function, and the joins but the lookup
join, whose table every replica holds in memory), and that standby replicas keep RocksDB
stores."""

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
from service.pipeline_spec.rules.tables import is_table

__all__ = ["ROCKSDB_OPERATORS", "rocksdb_state_supported", "standbys_need_rocksdb"]

ROCKSDB_OPERATORS = ("aggregate", "top_n", "keyed_process")
"""The operator types whose state the rocksdb backend holds whatever their source (a
window's over a stream only, a join's of every kind but lookup)."""

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
                "anyOf": [
                    {
                        "properties": {
                            "operator": {"anyOf": [of_type(kind) for kind in ROCKSDB_OPERATORS]}
                        }
                    },
                    {
                        "properties": {
                            "operator": of_type("window"),
                            "source": {"not": equals("changelog", "upsert")},
                        }
                    },
                    {
                        "properties": {
                            "operator": {
                                "allOf": [of_type("join"), {"not": equals("kind", "lookup")}]
                            }
                        }
                    },
                ]
            },
        },
    ),
)
def rocksdb_state_supported(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """The rocksdb backend holds a window's keys over a stream (every assigner, trigger
    and evictor), a running aggregate's groups (with its state TTL) and a Top-N's
    rankings over a stream or a table, a keyed process function's states, and a join's
    rows (every kind but lookup); a window over a table source, a lookup join's table
    (the replica's, read whole into memory) and the other operators' state are in
    memory only so far."""
    state = as_map(spec.get("state"))
    if state is None or state.get("backend") != "rocksdb":
        return
    op = as_map(spec.get("operator"))
    if op is None or "type" not in op or op["type"] in ROCKSDB_OPERATORS:
        return
    if op["type"] == "join":
        if op.get("kind") != "lookup":
            return
        why = "a lookup join's table"
    elif op["type"] != "window":
        why = f"a {op['type']!r} operator's state"
    elif is_table(spec):
        why = "a window over a table source"
    else:
        return
    yield Problem(
        ("state", "backend"),
        "rocksdb_state_unsupported",
        f"the rocksdb state backend does not hold {why} yet: only a window over a "
        "stream ('window'), a running aggregate ('aggregate'), a Top-N ('top_n'), a keyed "
        "process function ('keyed_process') and a join of any kind but lookup ('join'); "
        "use 'memory'",
        "rocksdb",
    )


_MEMORY: Mapping[str, Any] = {
    "required": ["state"],
    "properties": {"state": equals("backend", "memory")},
}


@rule(
    reports={"standbys_need_rocksdb"},
    schema=Fragment(
        "PipelineSpec",
        {
            "if": _MEMORY,
            "then": {"properties": {"state": {"properties": {"standby_replicas": {"maximum": 0}}}}},
        },
    ),
)
def standbys_need_rocksdb(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A standby replica keeps a warm copy of a partition's RocksDB store: with the
    memory backend there is none to keep."""
    state = as_map(spec.get("state"))
    if state is None or state.get("backend") != "memory":
        return
    replicas = state.get("standby_replicas")
    if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > 0:
        yield Problem(
            ("state", "standby_replicas"),
            "standbys_need_rocksdb",
            "standby replicas keep warm copies of the rocksdb backend's stores: with "
            "backend 'memory' there are none; use 'rocksdb' or 0",
            replicas,
        )
