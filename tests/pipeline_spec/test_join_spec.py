"""A join in the spec (#31): two named inputs and a join operator. Every bad join is
one 422 (the registry's ``SpecInvalid``, what the routes answer) with every problem at
its JSON path, together with the problems of the rest of the spec."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from service.api.registry import PipelineRegistry, SpecInvalid
from service.settings import Settings

ALLOWED = ("examples",)


def join_spec() -> dict[str, Any]:
    """The issue's example: valid."""
    return {
        "name": "orders-paid",
        "inputs": {
            "orders": {
                "source": {"topics": ["orders"]},
                "key": {"field": "order_id"},
                "timestamp": {"field": "ts"},
                "watermark": {"max_out_of_orderness_ms": 2000},
            },
            "payments": {
                "source": {"topics": ["payments"]},
                "key": {"field": "order_id"},
                "timestamp": {"field": "paid_at"},
                "watermark": {"max_out_of_orderness_ms": 5000},
            },
        },
        "operator": {
            "type": "join",
            "kind": "interval",
            "how": "left",
            "left": "orders",
            "right": "payments",
            "between": {"lower_ms": 0, "upper_ms": 3600000},
            "allowed_lateness_ms": 0,
            "select": {
                "order_id": "orders.order_id",
                "amount": "orders.amount",
                "paid_at": "payments.paid_at",
                "delay_ms": "payments.paid_at - orders.ts",
            },
        },
        "sink": {"topic": "orders-paid", "late_topic": "orders-paid.late"},
    }


def registry() -> PipelineRegistry:
    registry = PipelineRegistry.__new__(PipelineRegistry)
    registry._settings = Settings(udf_modules=ALLOWED)
    return registry


def problems(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """The 422's problems: (JSON path, type), in the answer's order."""
    with pytest.raises(SpecInvalid) as info:
        registry().parse(spec)
    return [(".".join(map(str, e["loc"])), e["type"]) for e in info.value.errors]


def edited(change: Any) -> dict[str, Any]:
    spec = copy.deepcopy(join_spec())
    change(spec)
    return spec


def test_the_issues_example_is_valid_and_builds() -> None:
    spec, definition = registry().parse(join_spec())
    assert spec.to_json() == join_spec()
    assert definition.inputs is not None
    assert [i.name for i in definition.inputs] == ["orders", "payments"]


def test_an_unknown_input_is_reported_at_left_or_right() -> None:
    spec = edited(lambda s: s["operator"].update(left="order"))
    assert problems(spec) == [("operator.left", "unknown_input")]


def test_the_same_input_on_both_sides() -> None:
    spec = edited(lambda s: s["operator"].update(right="orders"))
    assert problems(spec) == [("operator.right", "same_input")]


def test_a_join_without_two_inputs() -> None:
    with_source = edited(lambda s: s.pop("inputs") and s.update(source={"topics": ["orders"]}))
    assert problems(with_source) == [("inputs", "join_without_inputs")]
    one = edited(lambda s: s["inputs"].pop("payments"))
    assert problems(one) == [("inputs", "too_short"), ("operator.right", "unknown_input")]
    neither = edited(lambda s: s.pop("inputs"))
    assert problems(neither) == [("source", "missing"), ("inputs", "join_without_inputs")]


def test_inputs_without_a_join() -> None:
    spec = edited(
        lambda s: s.update(
            operator={"type": "keyed_process", "function": "dedupe", "params": {"ttl_ms": 5}}
        )
    )
    spec["sink"].pop("late_topic")
    assert problems(spec) == [("operator.type", "inputs_without_join")]


def test_a_select_naming_an_unknown_input_is_reported_at_its_field() -> None:
    spec = edited(
        lambda s: s["operator"]["select"].update(amount="order.amount", late="payments.ts >")
    )
    assert problems(spec) == [
        ("operator.select.amount", "invalid_select"),
        ("operator.select.late", "invalid_select"),
    ]
    [message] = [
        e["msg"]
        for e in _errors(spec)
        if e["loc"] == ["operator", "select", "amount"]  # names the input it does not know
    ]
    assert "order is not an input" in message and "orders and payments" in message


def _errors(spec: dict[str, Any]) -> list[dict[str, Any]]:
    with pytest.raises(SpecInvalid) as info:
        registry().parse(spec)
    return info.value.errors


@pytest.mark.parametrize(
    ("kind", "how", "extra"),
    [
        ("interval", "semi", {}),
        ("temporal", "right", {}),
        ("temporal", "full", {}),
    ],
)
def test_a_how_the_kind_does_not_take(kind: str, how: str, extra: dict[str, Any]) -> None:
    def change(s: dict[str, Any]) -> None:
        s["operator"].update(kind=kind, how=how, **extra)
        if kind != "interval":
            s["operator"].pop("between")

    assert problems(edited(change)) == [("operator.how", "how_not_for_kind")]


def test_every_how_each_kind_takes_is_valid() -> None:
    kinds: dict[str, tuple[dict[str, Any], list[str]]] = {
        "interval": ({"between": {"lower_ms": -10, "upper_ms": 10}}, ["left", "right", "full"]),
        "window": (
            {"assigner": {"type": "tumbling", "size_ms": 1000}},
            ["inner", "left", "right", "full", "semi", "anti"],
        ),
        "temporal": ({}, ["inner", "left"]),
    }
    for kind, (fields, hows) in kinds.items():
        for how in hows:
            spec = join_spec()
            spec["operator"] = {
                "type": "join",
                "kind": kind,
                "how": how,
                "left": "orders",
                "right": "payments",
                **fields,
            }
            registry().parse(spec)


def test_lower_above_upper() -> None:
    spec = edited(lambda s: s["operator"].update(between={"lower_ms": 10, "upper_ms": -10}))
    assert problems(spec) == [("operator.between.lower_ms", "lower_above_upper")]


def test_exactly_once_join_is_valid() -> None:
    """Each source partition of either input has a transaction of its own."""
    spec = edited(lambda s: s.update(delivery="exactly_once"))
    parsed, definition = registry().parse(spec)
    assert (parsed.delivery, definition.exactly_once) == ("exactly_once", True)


def test_window_join_rules() -> None:
    def window(s: dict[str, Any]) -> None:
        s["operator"].update(kind="window", allowed_lateness_ms=5)  # how: left
        s["operator"]["assigner"] = {"type": "session", "gap_ms": 5}

    assert problems(edited(window)) == [
        ("operator.assigner", "union_tag_invalid"),
        ("operator.between", "between_unused"),
        ("operator.allowed_lateness_ms", "lateness_needs_inner"),
    ]


def test_stream_settings_belong_to_the_inputs() -> None:
    spec = edited(lambda s: s.update(key={"field": "x"}, timestamp={"field": "ts"}))
    assert problems(spec) == [("key", "not_with_inputs"), ("timestamp", "not_with_inputs")]


def test_each_inputs_settings_are_checked_at_their_path() -> None:
    def change(s: dict[str, Any]) -> None:
        orders, payments = s["inputs"]["orders"], s["inputs"]["payments"]
        orders["timestamp"] = {"source": "kafka", "field": "ts"}
        orders["steps"] = [{"filter": "amount >"}]
        payments["watermark"] = {"strategy": "punctuated", "idle_timeout_ms": 5}
        payments["source"] = {"topics": ["orders", "orders-paid"], "bounded": True}
        payments["key"]["partitioned"] = True

    assert problems(edited(change)) == [
        ("inputs.payments.source.bounded", "inputs_disagree"),
        ("inputs.payments.watermark.idle_timeout_ms", "inputs_disagree"),
        ("inputs.payments.key.partitioned", "join_always_shuffles"),
        ("inputs.orders.steps.0.filter", "invalid_expression"),
        ("inputs.orders.timestamp.field", "timestamp_field_with_kafka"),
        ("inputs.payments.watermark.field", "missing"),
        ("inputs.payments.source.topics.0", "input_topics_overlap"),
        ("sink.topic", "sink_is_source"),
    ]


def test_bad_input_names() -> None:
    spec = edited(lambda s: s["inputs"].update({"Pay-ments": s["inputs"].pop("payments")}))
    found = problems(spec)
    assert found[0][0].startswith("inputs.Pay-ments") and found[0][1] == "string_pattern_mismatch"
    assert ("operator.right", "unknown_input") in found


def test_a_where_naming_an_unknown_input_is_reported_at_the_where() -> None:
    spec = edited(lambda s: s["operator"].update(where="payments.ts <= order.due"))
    assert problems(spec) == [("operator.where", "invalid_where")]
    [message] = [e["msg"] for e in _errors(spec) if e["loc"] == ["operator", "where"]]
    assert "order is not an input of the join" in message


def test_a_where_comparing_the_two_inputs_is_accepted_without_a_select() -> None:
    spec = edited(lambda s: s["operator"].pop("select"))
    spec["operator"]["where"] = "payments.ts <= orders.ts + 5"
    registry().parse(spec)  # accepted, and its operator built


def test_every_problem_of_a_join_spec_in_one_answer() -> None:
    """The issue's "Bad input": an unknown input, a select naming an unknown input, a
    how the kind does not take, lower above upper: one 422, each at its
    path, beside the field errors of the rest."""

    def change(s: dict[str, Any]) -> None:
        s["name"] = "Bad Name"
        s["operator"].update(left="customers", how="semi", between={"lower_ms": 5, "upper_ms": 1})
        s["operator"]["select"]["who"] = "customers.name"

    assert problems(edited(change)) == [
        ("name", "string_pattern_mismatch"),
        ("operator.left", "unknown_input"),
        ("operator.how", "how_not_for_kind"),
        ("operator.between.lower_ms", "lower_above_upper"),
        ("operator.select.who", "invalid_select"),
    ]


def lookup_spec() -> dict[str, Any]:
    """Orders enriched with the customers table (issue 31 point 4): valid."""
    spec = join_spec()
    spec["inputs"]["payments"]["source"] = {"topics": ["customers"]}
    spec["operator"] = {
        "type": "join",
        "kind": "lookup",
        "how": "left",
        "left": "orders",
        "right": "payments",
        "max_rows": 1000,
    }
    return spec


def test_a_lookup_join_reads_the_left_in_one_stage_and_the_table_apart() -> None:
    spec = lookup_spec()
    spec["inputs"]["orders"]["source"]["bounded"] = True  # the table stays unbounded
    parsed, definition = registry().parse(spec)
    assert parsed.stream_topics() == ["orders"]
    assert definition.lookup and definition.shuffle is None
    assert definition.topics == ("orders",) and definition.key_field == "order_id"
    assert definition.bounded
    table = definition.lookup_table
    assert table is not None and table.table and table.topics == ("customers",)


def test_lookup_join_rules() -> None:
    def change(s: dict[str, Any]) -> None:
        s["operator"].pop("max_rows")
        s["operator"].update(how="full", allowed_lateness_ms=5)
        s["inputs"]["payments"]["source"].update(bounded=True, start_from="latest")

    assert problems(edited_lookup(change)) == [
        ("operator.how", "how_not_for_kind"),
        ("operator.max_rows", "missing"),
        ("operator.allowed_lateness_ms", "lateness_not_for_lookup"),
        ("inputs.payments.source.bounded", "lookup_table_bounded"),
        ("inputs.payments.source.start_from", "lookup_table_from_latest"),
    ]
    over = edited_lookup(lambda s: s["operator"].update(max_rows=0))
    assert problems(over) == [("operator.max_rows", "greater_than_equal")]
    interval = edited(lambda s: s["operator"].update(max_rows=5))
    assert problems(interval) == [("operator.max_rows", "max_rows_unused")]


def edited_lookup(change: Any) -> dict[str, Any]:
    spec = lookup_spec()
    change(spec)
    return spec


def regular_spec() -> dict[str, Any]:
    """Orders joined with every payment of their id, kept a day (Nexmark q3's shape): valid."""
    spec = join_spec()
    spec["operator"] = {
        "type": "join",
        "kind": "regular",
        "left": "orders",
        "right": "payments",
        "state_ttl_ms": 86_400_000,
        "select": {"order_id": "orders.order_id", "paid_at": "payments.paid_at"},
    }
    return spec


def edited_regular(change: Any) -> dict[str, Any]:
    spec = regular_spec()
    change(spec)
    return spec


def test_a_regular_join_with_a_state_ttl_is_valid_and_builds() -> None:
    _, definition = registry().parse(regular_spec())
    assert definition.shuffle is not None and not definition.lookup
    assert [i.name for i in definition.inputs or ()] == ["orders", "payments"]


@pytest.mark.parametrize("how", ["left", "right", "full"])
def test_a_regular_join_takes_every_outer_how(how: str) -> None:
    spec = edited_regular(lambda s: s["operator"].update(how=how))
    parsed, _ = registry().parse(spec)
    assert parsed.operator.how == how  # type: ignore[union-attr]


def test_a_regular_join_takes_no_semi_and_says_why() -> None:
    spec = edited_regular(lambda s: s["operator"].update(how="semi"))
    with pytest.raises(SpecInvalid) as info:
        registry().parse(spec)
    (error,) = info.value.errors
    assert (error["loc"], error["type"]) == (["operator", "how"], "how_not_for_kind")
    assert "window join's" in error["msg"]


def test_regular_join_rules() -> None:
    def change(s: dict[str, Any]) -> None:
        s["operator"].update(how="anti", allowed_lateness_ms=5, state_ttl_ms=0)

    assert problems(edited_regular(change)) == [
        ("operator.state_ttl_ms", "greater_than"),
        ("operator.how", "how_not_for_kind"),
        ("operator.allowed_lateness_ms", "lateness_not_for_regular"),
    ]


def test_only_a_regular_join_takes_a_state_ttl() -> None:
    interval = edited(lambda s: s["operator"].update(state_ttl_ms=1000))
    assert problems(interval) == [("operator.state_ttl_ms", "state_ttl_unused")]


def _window_join(how: str, select: dict[str, str]) -> dict[str, Any]:
    def change(spec: dict[str, Any]) -> None:
        spec["operator"].pop("between")
        spec["operator"].update(
            kind="window", how=how, assigner={"type": "tumbling", "size_ms": 60000}, select=select
        )

    return edited(change)


def test_a_window_joins_select_reads_the_window_bounds() -> None:
    spec = _window_join("left", {"id": "orders.order_id", "start": "window.start"})
    assert registry().parse(spec)[0].to_json()["operator"]["select"]["start"] == "window.start"


def test_the_window_bounds_in_another_kinds_select_are_reported_at_the_field() -> None:
    spec = edited(lambda s: s["operator"]["select"].update(start="window.start"))
    assert problems(spec) == [("operator.select.start", "invalid_select")]


def test_a_semi_joins_select_of_the_right_input_is_reported_at_the_field() -> None:
    spec = _window_join("semi", {"id": "orders.order_id", "paid": "payments.paid_at"})
    assert problems(spec) == [("operator.select.paid", "invalid_select")]
