"""The spec's build is the one place a spec becomes the runtime's definition."""

from __future__ import annotations

import dataclasses
from typing import Any

from service.core.time import ManualClock
from service.operators.join.interval import IntervalJoinOperator
from service.operators.join.regular_tables import TableJoinOperator
from service.operators.join.rows import How
from service.operators.join.temporal import TemporalJoinOperator
from service.operators.join.window import WindowJoinOperator
from service.pipeline_spec.build import build_definition, state_fingerprint
from service.pipeline_spec.models import WatermarkSpec, validate_spec
from service.runtime.definition import (
    InputSettings,
    PipelineDefinition,
    ShuffleSettings,
    SinkSettings,
    TimestampSettings,
    WatermarkSettings,
)


def test_the_runtimes_watermark_settings_are_the_models_fields_and_defaults() -> None:
    """The build copies the watermark field for field: a setting declared in the model
    and not in the runtime (or the other way round), or a default that differs, fails
    here rather than in a pipeline."""
    fields = {f.name for f in dataclasses.fields(WatermarkSettings)}
    assert fields == set(WatermarkSpec.model_fields)
    assert WatermarkSettings(**WatermarkSpec().model_dump()) == WatermarkSettings()


# -- joins ------------------------------------------------------------------------------


def orders_paid(**changes: Any) -> dict[str, Any]:
    """The issue's example (#31): an interval left join of orders and payments."""
    spec: dict[str, Any] = {
        "name": "orders-paid",
        "inputs": {
            "orders": {
                "source": {"topics": ["orders"], "bounded": True},
                "key": {"field": "order_id"},
                "timestamp": {"field": "ts"},
                "watermark": {"max_out_of_orderness_ms": 2000, "interval_ms": 500},
            },
            "payments": {
                "source": {"topics": ["payments", "payments.eu"], "bounded": True},
                "steps": [{"filter": "amount > 0"}],
                "key": {"field": "order", "shuffle_partitions": 6},
                "timestamp": {"field": "paid_at", "format": "epoch_seconds"},
                "watermark": {"max_out_of_orderness_ms": 5000, "interval_ms": 50},
            },
        },
        "operator": {
            "type": "join",
            "kind": "interval",
            "how": "left",
            "left": "orders",
            "right": "payments",
            "between": {"lower_ms": 0, "upper_ms": 3600000},
            "select": {"order_id": "orders.order_id", "delay_ms": "payments.paid_at - orders.ts"},
        },
        "sink": {"topic": "orders-paid", "late_topic": "orders-paid.late"},
    }
    spec.update(changes)
    return spec


def build(spec: dict[str, Any]) -> PipelineDefinition:
    return build_definition(validate_spec(spec, ()), ())


def test_a_join_builds_two_inputs_through_one_shuffle() -> None:
    definition = build(orders_paid())
    assert definition.topics == ("orders", "payments", "payments.eu")
    assert definition.shuffle == ShuffleSettings(partitions=6)
    assert definition.bounded and definition.start_from == "earliest"
    assert definition.sink == SinkSettings("orders-paid", "orders-paid.dlq", "orders-paid.late")
    assert definition.inputs is not None
    orders, payments = definition.inputs
    assert orders == InputSettings(
        name="orders",
        topics=("orders",),
        key_field="order_id",
        timestamp=TimestampSettings(source="field", field="ts"),
        watermark=WatermarkSettings(max_out_of_orderness_ms=2000, interval_ms=500),
    )
    assert payments.name == "payments" and payments.key_field == "order"
    assert payments.topics == ("payments", "payments.eu")
    assert payments.timestamp == TimestampSettings("field", "paid_at", "epoch_seconds")
    assert payments.steps is not None and orders.steps is None
    assert definition.input_of("payments.eu") == 1
    # the smaller interval; idleness and drift as the inputs share them
    assert definition.watermark == WatermarkSettings(interval_ms=50)
    operator = definition.operator_factory(ManualClock(0))
    assert isinstance(operator, IntervalJoinOperator)
    assert (operator.lower, operator.upper, operator.how) == (0, 3_600_000, How.LEFT)
    assert operator.inputs == ("orders", "payments") and operator.late_output


def test_the_joins_sides_are_left_and_right_not_the_order_of_inputs() -> None:
    spec = orders_paid()
    spec["operator"].update(left="payments", right="orders", how="right")
    definition = build(spec)
    assert definition.inputs is not None
    assert [i.name for i in definition.inputs] == ["payments", "orders"]
    assert definition.topics == ("payments", "payments.eu", "orders")
    assert definition.operator_factory(ManualClock(0)).inputs == ("payments", "orders")  # type: ignore[attr-defined]


def test_window_and_temporal_joins_build_their_operators() -> None:
    window = orders_paid()
    window["operator"] = {
        "type": "join",
        "kind": "window",
        "how": "anti",
        "left": "orders",
        "right": "payments",
        "assigner": {"type": "sliding", "size_ms": 10_000, "slide_ms": 5_000},
    }
    assert isinstance(build(window).operator_factory(ManualClock(0)), WindowJoinOperator)
    temporal = orders_paid()
    temporal["operator"] = {
        "type": "join",
        "kind": "temporal",
        "left": "orders",
        "right": "payments",
    }
    del temporal["sink"]["late_topic"]
    definition = build(temporal)
    operator = definition.operator_factory(ManualClock(0))
    assert isinstance(operator, TemporalJoinOperator) and not operator.late_output
    # the right input is a versioned table (tombstones delete), the left is not
    assert definition.inputs is not None
    assert [i.table for i in definition.inputs] == [False, True]
    assert [i.table for i in build(window).inputs or ()] == [False, False]


def test_without_shuffle_partitions_the_shuffle_is_the_widest_topics() -> None:
    spec = orders_paid()
    del spec["inputs"]["payments"]["key"]  # the Kafka key
    definition = build(spec)
    assert definition.shuffle == ShuffleSettings(partitions=None)
    assert definition.inputs is not None and definition.inputs[1].key_field is None


def test_the_join_fingerprint_changes_with_what_the_state_is() -> None:
    same = state_fingerprint(validate_spec(orders_paid(), ()))
    sink_only = orders_paid(sink={"topic": "elsewhere"})
    assert state_fingerprint(validate_spec(sink_only, ())) == same
    for change in (
        lambda s: s["inputs"]["orders"]["key"].update(field="id"),
        lambda s: s["inputs"]["payments"].update(steps=[]),
        lambda s: s["inputs"]["payments"]["key"].update(shuffle_partitions=7),
        lambda s: s["operator"]["between"].update(upper_ms=1),
        lambda s: s["operator"].update(left="payments", right="orders", how="right"),
    ):
        spec = orders_paid()
        change(spec)
        assert state_fingerprint(validate_spec(spec, ())) != same


def table_join() -> dict[str, Any]:
    """A regular left join of the orders with the payments as a table (its primary key,
    the Kafka key, is the join key)."""
    spec = orders_paid()
    payments = spec["inputs"]["payments"]
    payments["source"]["changelog"] = "upsert"
    del payments["key"], payments["steps"]
    spec["operator"] = {
        "type": "join",
        "kind": "regular",
        "how": "left",
        "left": "orders",
        "right": "payments",
    }
    del spec["sink"]["late_topic"]
    return spec


def test_a_regular_join_of_a_table_reads_it_as_a_table_into_a_join_of_tables() -> None:
    definition = build(table_join())
    assert [i.table for i in definition.inputs or ()] == [False, True]
    operator = definition.operator_factory(ManualClock(0))
    assert isinstance(operator, TableJoinOperator) and operator.tables == (False, True)


def test_a_table_input_changes_the_join_fingerprint() -> None:
    spec = table_join()
    table = state_fingerprint(validate_spec(spec, ()))
    del spec["inputs"]["payments"]["source"]["changelog"]
    assert state_fingerprint(validate_spec(spec, ())) != table


def _map_spec(**changes: Any) -> dict[str, Any]:
    return {
        "name": "big-orders",
        "source": {"topics": ["orders"]},
        "key": {"field": "user"},
        "timestamp": {"field": "ts"},
        "steps": [{"filter": "amount > 10"}],
        "operator": {"type": "map"},
        "sink": {"topic": "big-orders"},
        **changes,
    }


def test_a_map_pipeline_never_shuffles_its_key_only_names_the_outputs() -> None:
    definition = build_definition(validate_spec(_map_spec(), ()), ())
    assert definition.shuffle is None
    assert definition.key_partitioned is False
    assert definition.key_field == "user"


def test_a_map_pipelines_state_is_its_input_positions_alone() -> None:
    before = state_fingerprint(validate_spec(_map_spec(), ()))
    changed = _map_spec(
        steps=[{"filter": "amount > 100"}, {"select": ["user"]}],
        key={"field": "region"},
        timestamp={"field": "paid_at"},
    )
    assert state_fingerprint(validate_spec(changed, ())) == before
    other_topic = _map_spec(source={"topics": ["orders", "refunds"]})
    assert state_fingerprint(validate_spec(other_topic, ())) != before
