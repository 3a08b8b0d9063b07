"""Steps and on_bad_value in the spec: every expression problem in the one 422 with its
JSON path and column; the JSON Schema describes steps; the state fingerprint counts the
steps that change what the state holds."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from service.pipeline_spec.build import build_definition, state_fingerprint
from service.pipeline_spec.models import validate_spec
from service.pipeline_spec.schema import pipeline_schema
from tests.pipeline_spec.test_spec import ALLOWED, base


def with_steps(steps: list[Any], **operator: Any) -> dict[str, Any]:
    spec = base()
    spec["steps"] = steps
    spec["operator"].update(operator)
    return spec


def problems(spec: dict[str, Any]) -> list[tuple[tuple[Any, ...], str, str]]:
    with pytest.raises(ValidationError) as error:
        validate_spec(spec, ALLOWED)
    return [(e["loc"], e["type"], e["msg"]) for e in error.value.errors()]


def fingerprint(spec: dict[str, Any]) -> str:
    return state_fingerprint(validate_spec(spec, ALLOWED))


def test_a_spec_with_every_kind_of_step_builds() -> None:
    spec = with_steps(
        [
            {"filter": "amount > 0"},
            {"set": {"user": "LOWER(user)"}},
            {"unnest": "items", "as": "item"},
            {"select": ["user", "ts", "amount", "item"]},
            {"drop": ["item"]},
        ]
    )
    definition = build_definition(validate_spec(spec, ALLOWED), ALLOWED)
    assert definition.steps is not None and len(definition.steps) == 5
    assert definition.spec["steps"][2] == {"unnest": "items", "as": "item"}


def test_every_expression_problem_is_reported_with_its_path_and_column() -> None:
    found = problems(
        with_steps(
            [
                {"filter": "nope(amount) > 1 AND amount >"},
                {"set": {"a": "UPPER(x, y)", "b": "__import__('os')"}},
                {"filter": "a.__class__ IS NULL"},
            ]
        )
    )
    assert [(loc, kind) for loc, kind, _ in found] == [
        (("steps", 0, "filter"), "invalid_expression"),
        (("steps", 1, "set", "a"), "invalid_expression"),
        (("steps", 1, "set", "b"), "invalid_expression"),
        (("steps", 2, "filter"), "invalid_expression"),
    ]
    assert "column" in found[0][2]
    assert "UPPER takes 1 argument, not 2" in found[1][2]
    assert "unknown function '__import__'" in found[2][2]


def test_unknown_functions_are_each_reported() -> None:
    found = problems(with_steps([{"filter": "foo(a) AND bar(b)"}]))
    assert [msg for _, _, msg in found] == [
        "unknown function 'foo' (at column 1)",
        "unknown function 'bar' (at column 12)",
    ]


def test_a_step_of_no_known_kind_is_reported_at_its_index() -> None:
    found = problems(with_steps([{"filter": "TRUE"}, {"where": "x"}, {"unnest": "a"}]))
    assert [(loc, kind) for loc, kind, _ in found] == [
        (("steps", 1), "step_kind"),
        (("steps", 2, "as"), "missing"),
    ]


def test_expression_problems_come_with_the_other_problems_of_the_spec() -> None:
    spec = with_steps([{"filter": "a +"}])
    spec["name"] = "Bad Name"
    assert {loc for loc, _, _ in problems(spec)} == {("name",), ("steps", 0, "filter")}


def test_the_json_schema_describes_steps() -> None:
    schema = pipeline_schema([])
    assert "steps" in schema["properties"]
    names = set(schema["$defs"])
    assert {"FilterStep", "SetStep", "SelectStep", "DropStep", "UnnestStep"} <= names
    assert "as" in schema["$defs"]["UnnestStep"]["properties"]


def test_on_bad_value_is_dead_letter_or_skip() -> None:
    spec = base()
    spec["operator"]["on_bad_value"] = "ignore"
    assert [loc for loc, _, _ in problems(spec)] == [("operator", "on_bad_value")]


def test_without_steps_the_fingerprint_is_as_it_was() -> None:
    assert fingerprint(base()) == fingerprint(with_steps([]))


def test_on_bad_value_keeps_the_state() -> None:
    spec = base()
    spec["operator"]["on_bad_value"] = "skip"
    assert fingerprint(spec) == fingerprint(base())


def test_a_filter_changes_the_state() -> None:
    assert fingerprint(with_steps([{"filter": "amount > 1"}])) != fingerprint(
        with_steps([{"filter": "amount > 2"}])
    )


def test_a_computed_field_nothing_reads_keeps_the_state() -> None:
    assert fingerprint(with_steps([{"set": {"note": "'a'"}}])) == fingerprint(base())


def test_a_computed_field_an_aggregation_reads_changes_the_state() -> None:
    assert fingerprint(with_steps([{"set": {"amount": "amount * 2"}}])) != fingerprint(base())


def test_a_computed_key_changes_the_state() -> None:
    assert fingerprint(with_steps([{"set": {"user": "LOWER(user)"}}])) != fingerprint(base())


def test_a_field_a_later_filter_reads_changes_the_state() -> None:
    one = with_steps([{"set": {"flag": "amount > 1"}}, {"filter": "flag"}])
    two = with_steps([{"set": {"flag": "amount > 2"}}, {"filter": "flag"}])
    assert fingerprint(one) != fingerprint(two)


def test_a_select_that_keeps_every_field_read_keeps_the_state() -> None:
    assert fingerprint(with_steps([{"select": ["user", "ts", "amount"]}])) == fingerprint(base())
    assert fingerprint(with_steps([{"select": ["user", "ts"]}])) != fingerprint(base())
