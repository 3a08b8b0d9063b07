"""The rules of a Top-N operator (``"type": "top_n"``): how its row key fits the key."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from service.pipeline_spec.rules.base import COMPARES, Problem, Service, rule
from service.pipeline_spec.rules.raw import as_map, top_n_of

__all__ = ["row_key_is_not_the_key"]


@rule(reports={"row_key_is_the_key"}, beyond_schema={"row_key_is_the_key": COMPARES})
def row_key_is_not_the_key(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A row key equal to the pipeline's key makes every record of a key one row, so
    its top n would always be that one row: a running ``last_value``, not a ranking."""
    op = top_n_of(spec)
    key = as_map(spec.get("key"))
    if op is None or key is None:
        return
    row_key = op.get("row_key")
    if isinstance(row_key, str) and row_key == key.get("field"):
        yield Problem(
            ("operator", "row_key"),
            "row_key_is_the_key",
            f"row_key {row_key!r} is the pipeline's key: every record of a key would be one "
            "row, always ranked first; name the field that tells a key's rows apart",
            row_key,
        )
