"""A join operator from the pipeline spec's ``"operator"`` object (``"type": "join"``).

``kind`` picks the operator (``interval``, ``window``, ``temporal``, ``lookup``,
``regular``), ``how`` the rows
besides the matches, ``select`` the output fields (none: ``{"left", "right"}``). The
spec layer validates the object first (every problem at its path); this builder raises
:class:`~service.operators.join.rows.JoinConfigError` or
:class:`~service.operators.join.projection.SelectError` for anything it cannot build.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from service.core.state_cache import StateMaps
from service.operators.join.inputs import TwoInputOperator
from service.operators.join.interval import IntervalJoinOperator
from service.operators.join.kinds import KINDS
from service.operators.join.lookup import LookupJoinOperator, LookupTable
from service.operators.join.projection import projection_for
from service.operators.join.regular import RegularJoinOperator
from service.operators.join.regular_outer import OuterRegularJoinOperator
from service.operators.join.regular_tables import TableJoinOperator
from service.operators.join.rows import How, JoinConfigError, Projection
from service.operators.join.temporal import TemporalJoinOperator
from service.operators.join.window import WindowJoinOperator
from service.operators.window.assigners import SlidingAssigner, TumblingAssigner
from service.operators.window.errors import WindowConfigError


def build_join_operator(
    pipeline: str,
    spec: Mapping[str, Any],
    inputs: tuple[str, str],
    late_output: bool,
    project: Projection | None = None,
    table: LookupTable | None = None,
    source: int = 0,
    tables: tuple[bool, bool] = (False, False),
    state_maps: StateMaps | None = None,
) -> TwoInputOperator:
    """``project``: the compiled ``select`` when the caller built it once already.
    ``table`` and ``source`` (a lookup join's): the replica's table (None: a new, empty
    one, as a check that the spec builds) and the left partition's number. ``tables``:
    which inputs are tables (``changelog: "upsert"``; a regular join's only).
    ``state_maps``: the rocksdb backend's named maps of the partition (None: memory;
    every kind but ``lookup``, whose table is the replica's, takes them)."""
    kind = spec.get("kind")
    try:
        how = How(spec.get("how", "inner"))
    except ValueError:
        raise JoinConfigError(f"unknown how {spec.get('how')!r}") from None
    lateness = int(spec.get("allowed_lateness_ms", 0))
    if project is None:
        project = projection_for(spec, inputs)
    if kind == "interval":
        between = spec.get("between") or {}
        return IntervalJoinOperator(
            pipeline,
            how,
            int(between.get("lower_ms", 0)),
            int(between.get("upper_ms", 0)),
            lateness,
            project,
            inputs,
            late_output,
            state_maps,
        )
    if kind == "window":
        assigner_spec = spec.get("assigner") or {}
        try:
            if assigner_spec.get("type") == "tumbling":
                assigner: Any = TumblingAssigner(
                    assigner_spec["size_ms"], assigner_spec.get("offset_ms", 0)
                )
            elif assigner_spec.get("type") == "sliding":
                assigner = SlidingAssigner(
                    assigner_spec["size_ms"],
                    assigner_spec["slide_ms"],
                    assigner_spec.get("offset_ms", 0),
                )
            else:
                raise JoinConfigError("a window join takes a tumbling or sliding assigner")
        except (KeyError, WindowConfigError) as exc:
            raise JoinConfigError(f"window join assigner: {exc}") from None
        return WindowJoinOperator(
            pipeline, how, assigner, lateness, project, inputs, late_output, state_maps
        )
    if kind == "temporal":
        return TemporalJoinOperator(
            pipeline, how, lateness, project, inputs, late_output, state_maps
        )
    if kind == "regular":
        ttl = None if spec.get("state_ttl_ms") is None else int(spec["state_ttl_ms"])
        if any(tables):
            return TableJoinOperator(
                pipeline, how, tables, ttl, project, inputs, late_output, state_maps
            )
        regular = RegularJoinOperator if how is How.INNER else OuterRegularJoinOperator
        return regular(pipeline, how, ttl, project, inputs, late_output, state_maps)
    if kind == "lookup":
        if table is None:
            table = LookupTable(inputs[1], max_rows(spec))
        return LookupJoinOperator(pipeline, how, table, project, inputs, source)
    raise JoinConfigError(f"unknown join kind {kind!r} (one of {', '.join(KINDS)})")


def max_rows(spec: Mapping[str, Any]) -> int:
    """A lookup join's ``max_rows`` (required: the spec's rules say so)."""
    value = spec.get("max_rows")
    if type(value) is not int or value < 1:
        raise JoinConfigError(f"a lookup join needs max_rows, a positive integer, not {value!r}")
    return value
