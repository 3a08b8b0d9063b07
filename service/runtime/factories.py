"""Operator factories for :class:`~service.runtime.definition.PipelineDefinition`: the
only place one is made (the spec's build, ``service/pipeline_spec/build.py``, and the tests and
benchmarks that build definitions directly all call these).

The runtime checkpoints incrementally (``snapshot_changes``), which needs operators
built with ``track_keys=True``; these helpers build factories that always do, so no
caller can forget it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from service.core.state_cache import StateMaps
from service.core.time import Clock, SystemClock
from service.operators.base import Operator
from service.operators.join.factory import build_join_operator, max_rows
from service.operators.join.lookup import LookupTable
from service.operators.join.projection import projection_for
from service.operators.join.rows import Projection
from service.operators.map import MapOperator
from service.operators.process import build_process_operator
from service.operators.table import build_running_aggregate, build_top_n
from service.operators.window import WindowFunction, build_window_operator
from service.runtime.definition import OperatorFactory


class StateBackedOperators:
    """A factory whose operators keep their keyed state in RocksDB when given the maps
    of a partition's store (a :class:`~service.runtime.definition.StateBackedFactory`),
    in memory when called with a clock alone."""

    __slots__ = ()

    def __call__(self, clock: Clock) -> Operator:
        return self.with_state(clock, None)

    def with_state(self, clock: Clock, state_map: StateMaps | None) -> Operator:
        raise NotImplementedError


def window_operator_factory(
    pipeline: str,
    operator_spec: Mapping[str, Any],
    late_output: bool,
    function: WindowFunction | None = None,
) -> OperatorFactory:
    """A factory of window operators for the spec's ``"operator"`` object.

    Builds one instance eagerly, so a bad spec fails here (at submission), not later
    in a partition assignment.
    """
    factory = WindowOperatorFactory(pipeline, dict(operator_spec), late_output, function)
    factory(SystemClock())
    return factory


class WindowOperatorFactory(StateBackedOperators):
    """Window operators of one spec (a :class:`~service.runtime.definition.StateBackedFactory`:
    every kind can keep its keys in RocksDB)."""

    __slots__ = ("function", "late_output", "pipeline", "spec")

    def __init__(
        self,
        pipeline: str,
        spec: dict[str, Any],
        late_output: bool,
        function: WindowFunction | None,
    ) -> None:
        self.pipeline = pipeline
        self.spec = spec
        self.late_output = late_output
        self.function = function

    def with_state(self, clock: Clock, state_map: StateMaps | None) -> Operator:
        return build_window_operator(
            self.pipeline,
            self.spec,
            clock,
            self.late_output,
            function=self.function,
            track_keys=True,
            state_maps=state_map,
        )


def running_aggregate_factory(
    pipeline: str,
    operator_spec: Mapping[str, Any],
    emit_at_checkpoint: bool,
    *,
    table: bool = False,
    group_field: str | None = None,
) -> OperatorFactory:
    """A factory of running aggregates (``"type": "aggregate"``); ``emit_at_checkpoint``
    under exactly-once delivery; ``table``: over a table source, its rows keyed by primary
    key and grouped by ``group_field`` (None: the primary key). Validated eagerly like the
    window one."""
    factory = RunningAggregateFactory(
        pipeline, dict(operator_spec), emit_at_checkpoint, table, group_field
    )
    factory(SystemClock())
    return factory


class RunningAggregateFactory(StateBackedOperators):
    """Running aggregates of one spec (a :class:`~service.runtime.definition.StateBackedFactory`:
    over a stream or a table, with a state TTL or without, their keys can be in RocksDB)."""

    __slots__ = ("emit_at_checkpoint", "group_field", "pipeline", "spec", "table")

    def __init__(
        self,
        pipeline: str,
        spec: dict[str, Any],
        emit_at_checkpoint: bool,
        table: bool,
        group_field: str | None,
    ) -> None:
        self.pipeline = pipeline
        self.spec = spec
        self.emit_at_checkpoint = emit_at_checkpoint
        self.table = table
        self.group_field = group_field

    def with_state(self, clock: Clock, state_map: StateMaps | None) -> Operator:
        return build_running_aggregate(
            self.pipeline,
            self.spec,
            clock,
            emit_at_checkpoint=self.emit_at_checkpoint,
            table=self.table,
            group_field=self.group_field,
            state_map=state_map,
        )


def top_n_factory(
    pipeline: str,
    operator_spec: Mapping[str, Any],
    emit_at_checkpoint: bool,
    *,
    table: bool = False,
    partition_by: str | None = None,
) -> OperatorFactory:
    """A factory of Top-N operators (``"type": "top_n"``); ``emit_at_checkpoint`` under
    exactly-once delivery; ``table``: over a table source, partitioned by
    ``partition_by``. Validated eagerly like the window one."""
    factory = TopNFactory(pipeline, dict(operator_spec), emit_at_checkpoint, table, partition_by)
    factory(SystemClock())
    return factory


class TopNFactory(StateBackedOperators):
    """Top-N operators of one spec (a :class:`~service.runtime.definition.StateBackedFactory`:
    over a stream or a table, their keys can be in RocksDB)."""

    __slots__ = ("emit_at_checkpoint", "partition_by", "pipeline", "spec", "table")

    def __init__(
        self,
        pipeline: str,
        spec: dict[str, Any],
        emit_at_checkpoint: bool,
        table: bool,
        partition_by: str | None,
    ) -> None:
        self.pipeline = pipeline
        self.spec = spec
        self.emit_at_checkpoint = emit_at_checkpoint
        self.table = table
        self.partition_by = partition_by

    def with_state(self, clock: Clock, state_map: StateMaps | None) -> Operator:
        return build_top_n(
            self.pipeline,
            self.spec,
            clock,
            emit_at_checkpoint=self.emit_at_checkpoint,
            table=self.table,
            partition_by=self.partition_by,
            state_maps=state_map,
        )


def process_operator_factory(
    pipeline: str,
    function: str,
    params: Mapping[str, Any] | None,
    allowed_modules: Sequence[str] = (),
) -> OperatorFactory:
    """A factory of keyed process operators; validated eagerly like the window one."""
    factory = ProcessOperatorFactory(
        pipeline,
        function,
        dict(params) if params is not None else None,
        tuple(allowed_modules),
    )
    factory(SystemClock())
    return factory


class ProcessOperatorFactory(StateBackedOperators):
    """Keyed process operators of one spec (a
    :class:`~service.runtime.definition.StateBackedFactory`: their value, list and map
    states can be in RocksDB, one named map per state)."""

    __slots__ = ("allowed_modules", "function", "params", "pipeline")

    def __init__(
        self,
        pipeline: str,
        function: str,
        params: dict[str, Any] | None,
        allowed_modules: tuple[str, ...],
    ) -> None:
        self.pipeline = pipeline
        self.function = function
        self.params = params
        self.allowed_modules = allowed_modules

    def with_state(self, clock: Clock, state_map: StateMaps | None) -> Operator:
        return build_process_operator(
            self.pipeline, self.function, self.params, clock, self.allowed_modules, state_map
        )


def join_operator_factory(
    pipeline: str,
    operator_spec: Mapping[str, Any],
    inputs: tuple[str, str],
    late_output: bool,
    tables: tuple[bool, bool] = (False, False),
) -> OperatorFactory:
    """A factory of join operators for the spec's ``"operator"`` object (``"type":
    "join"``); the ``select`` is compiled once, and one instance built eagerly so that a
    bad spec fails here. A lookup join's is a :class:`LookupJoinFactory`. ``tables``:
    which inputs are tables (a regular join of tables)."""
    spec = dict(operator_spec)
    project = projection_for(spec, inputs)
    if spec.get("kind") == "lookup":
        return LookupJoinFactory(pipeline, spec, inputs, project)
    factory = JoinFactory(pipeline, spec, inputs, late_output, project, tables)
    factory(SystemClock())
    return factory


class JoinFactory(StateBackedOperators):
    """Join operators of one spec, every kind but ``lookup`` (a
    :class:`~service.runtime.definition.StateBackedFactory`: their rows can be in RocksDB,
    one named map per side)."""

    __slots__ = ("inputs", "late_output", "pipeline", "project", "spec", "tables")

    def __init__(
        self,
        pipeline: str,
        spec: dict[str, Any],
        inputs: tuple[str, str],
        late_output: bool,
        project: Projection,
        tables: tuple[bool, bool],
    ) -> None:
        self.pipeline = pipeline
        self.spec = spec
        self.inputs = inputs
        self.late_output = late_output
        self.project = project
        self.tables = tables

    def with_state(self, clock: Clock, state_map: StateMaps | None) -> Operator:
        operator = build_join_operator(
            self.pipeline,
            self.spec,
            self.inputs,
            self.late_output,
            self.project,
            tables=self.tables,
            state_maps=state_map,
        )
        return cast(Operator, operator)


class LookupJoinFactory:
    """A lookup join's operators: each over the table the runtime keeps for the pipeline
    on this replica (one :meth:`table`, read by its table reader) and numbered by the
    left partition it reads. Called with a clock alone (what any operator factory is),
    it builds one over a new, empty table: a check that the spec builds, nothing more."""

    def __init__(
        self,
        pipeline: str,
        spec: dict[str, Any],
        inputs: tuple[str, str],
        project: Projection,
    ) -> None:
        self.pipeline = pipeline
        self.spec = spec
        self.inputs = inputs
        self.project = project
        self.max_rows = max_rows(spec)
        self(SystemClock())

    def table(self) -> LookupTable:
        """A new, empty table for this join."""
        return LookupTable(self.inputs[1], self.max_rows)

    def build(self, clock: Clock, table: LookupTable, source: int) -> Operator:
        operator = build_join_operator(
            self.pipeline, self.spec, self.inputs, False, self.project, table, source
        )
        return cast(Operator, operator)

    def __call__(self, clock: Clock) -> Operator:
        return self.build(clock, self.table(), 0)


class PerPartitionFactory:
    """A factory whose operators are told the partition they serve (``topic/partition``):
    the stage builds them with :meth:`for_partition`. Called with a clock alone, as any
    operator factory, it builds one for no partition: a check that the spec builds."""

    def for_partition(self, clock: Clock, partition: str) -> Operator:
        raise NotImplementedError

    def __call__(self, clock: Clock) -> Operator:
        return self.for_partition(clock, "-")


class MapOperatorFactory(PerPartitionFactory):
    """Stateless map operators: their output ids name the partition read."""

    def __init__(self, pipeline: str, fields: Sequence[str] | None = None) -> None:
        self.pipeline = pipeline
        self.fields = tuple(fields) if fields is not None else None

    def for_partition(self, clock: Clock, partition: str) -> Operator:
        return MapOperator(self.pipeline, partition, self.fields)
