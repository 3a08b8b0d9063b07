"""The rules of the pipeline's state backend (``"state"``): which operators keep their
state in RocksDB so far (issue 53: a window and a running aggregate without a state TTL,
over a stream, and the joins but the lookup join, whose table every replica holds in
memory), and that standby replicas keep RocksDB stores."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from service.pipeline_spec.rules.base import (
    Fragment,
    Problem,
    Service,
    equals,
    of_type,
    present,
    rule,
)
from service.pipeline_spec.rules.raw import as_map
from service.pipeline_spec.rules.tables import is_table

__all__ = ["rocksdb_state_supported", "standbys_need_rocksdb"]

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
                            "operator": {
                                "anyOf": [
                                    of_type("window"),
                                    {
                                        "allOf": [
                                            of_type("aggregate"),
                                            {"not": present("state_ttl_ms", "integer")},
                                        ]
                                    },
                                ]
                            },
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
    """The rocksdb backend holds a window's keys (every assigner, trigger and evictor)
    and a running aggregate's keys over a stream, and a join's rows (every kind but
    lookup); a running aggregate's state TTL (which walks every key in the order of its
    last touch), a table source's rows, a lookup join's table (the replica's, read whole
    into memory) and the other operators' state are in memory only so far."""
    state = as_map(spec.get("state"))
    if state is None or state.get("backend") != "rocksdb":
        return
    op = as_map(spec.get("operator"))
    if op is not None and op.get("type") == "join":
        if op.get("kind") != "lookup":
            return
        why = "a lookup join's table"
    elif op is not None and "type" in op and op["type"] not in ("window", "aggregate"):
        why = f"a {op['type']!r} operator's state"
    elif op is not None and op.get("type") != "window" and isinstance(op.get("state_ttl_ms"), int):
        why = "a running aggregate's state TTL"
    elif is_table(spec):
        why = "state over a table source"
    else:
        return
    yield Problem(
        ("state", "backend"),
        "rocksdb_state_unsupported",
        f"the rocksdb state backend does not hold {why} yet: only a window (type "
        "'window') or a running aggregate (type 'aggregate') without state_ttl_ms, over "
        "a stream, and a join of any kind but lookup; use 'memory'",
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
