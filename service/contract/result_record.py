"""A window result record's fields: what a window pipeline's sink writes for each firing
and what the compaction job reads back (docs/semantics.md; pipeline-spec.md's sink).

The JSON value of a result record has these fields, in this order, each of the JSON type
given; ``window`` is an object of :data:`WINDOW_FIELDS`, ``result`` an object of the
pipeline's aggregations. The sink (``runtime/partition/sinks.py``) writes them as a dict
literal, the fastest way per result, and ``tests/runtime/test_result_record.py`` holds it
to this; the compaction job types its read of the topics from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["UPSERT_OP", "UPSERT_RESULT_FIELDS", "WINDOW_FIELDS", "WINDOW_RESULT_FIELDS"]

WINDOW_FIELDS = ("start", "end")
"""The window's bounds: integers, epoch milliseconds, ``end`` exclusive."""

WINDOW_RESULT_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "pipeline": "string",
        "key": "string",
        "window": "window",  # an object of WINDOW_FIELDS
        "result": "object",
        "fire": "string",
        "seq": "integer",
        "watermark": "integer",
        "id": "string",
    }
)
"""Field -> its JSON type (``window``: the window's object, :data:`WINDOW_FIELDS`)."""

UPSERT_RESULT_FIELDS: Mapping[str, str] = MappingProxyType(
    {
        "pipeline": "string",
        "key": "string",
        "result": "object",
        "op": "string",  # UPSERT_OP
        "seq": "integer",
        "id": "string",
    }
)
"""A running aggregate's record (an upsert stream, #50): field -> its JSON type. The
Kafka key is the group key; ``seq`` counts the key's upserts from 0; ``id`` is
``<pipeline>|<key>``, the same for every upsert of the key. A delete has no value (a
tombstone), so a compacted topic holds the table. A Top-N writes the same record per rank
row: its ``key`` (and Kafka key) ``<partition key>|<rank>``, its ``result``
``{"partition", "rank", "row"}``. An outer regular join writes it per output row: its
``key`` (and Kafka key) ``<join key>|<left row>|<right row>`` (the rows' positions,
``none`` for a padded side), its ``result`` the row's ``select``."""

UPSERT_OP = "upsert"
"""The ``op`` of every upsert record (a delete is a tombstone, with no value at all)."""
