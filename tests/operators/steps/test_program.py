"""Steps in order: filter, set, select, drop, unnest; failures name the step."""

from __future__ import annotations

import pytest

from service.operators.steps import StepFailed, StepProgram, StepsConfigError


def test_a_filter_keeps_a_record_only_when_true() -> None:
    run = StepProgram([{"filter": "amount > 10"}]).run_one
    assert run is not None
    assert run({"amount": 11}) == {"amount": 11}
    assert run({"amount": 10}) is None
    assert run({"amount": None}) is None  # NULL counts as false
    assert run({}) is None


def test_set_expressions_read_the_record_before_the_step() -> None:
    run = StepProgram([{"set": {"a": "a + 1", "b": "a * 10"}}]).run_one
    assert run is not None
    assert run({"a": 1}) == {"a": 2, "b": 10}


def test_set_writes_dotted_paths_without_touching_shared_dicts() -> None:
    program = StepProgram([{"unnest": "xs", "as": "x"}, {"set": {"meta.x": "x"}}])
    shared = {"keep": 1}
    out = program.run_many({"xs": [1, 2], "meta": shared})
    assert [r["meta"] for r in out] == [{"keep": 1, "x": 1}, {"keep": 1, "x": 2}]
    assert shared == {"keep": 1}


def test_select_keeps_only_the_named_fields() -> None:
    run = StepProgram([{"select": ["a", "b.c"]}]).run_one
    assert run is not None
    assert run({"a": 1, "b": {"c": 2, "d": 3}, "e": 4}) == {"a": 1, "b": {"c": 2}}
    run = StepProgram([{"select": ["a", "z"]}]).run_one
    assert run is not None
    assert run({"a": 1, "e": 4}) == {"a": 1}


def test_drop_removes_the_named_fields() -> None:
    run = StepProgram([{"drop": ["a", "b.c"]}]).run_one
    assert run is not None
    assert run({"a": 1, "b": {"c": 2, "d": 3}}) == {"b": {"d": 3}}


def test_unnest_makes_one_record_per_element_in_order() -> None:
    program = StepProgram([{"unnest": "items", "as": "item"}, {"filter": "item.qty > 0"}])
    out = program.run_many({"order": "o1", "items": [{"qty": 1}, {"qty": 0}, {"qty": 2}]})
    assert [r["item"] for r in out] == [{"qty": 1}, {"qty": 2}]
    assert program.run_many({"order": "o1"}) == []  # no array: no records
    assert program.run_many({"items": None}) == []


def test_a_failing_expression_names_its_step() -> None:
    run = StepProgram([{"filter": "TRUE"}, {"set": {"x": "s * 2"}}]).run_one
    assert run is not None
    with pytest.raises(StepFailed) as failure:
        run({"s": "abc"})
    assert failure.value.index == 1
    assert "STRING" in failure.value.message


def test_unnest_of_a_non_array_fails_its_step() -> None:
    with pytest.raises(StepFailed) as failure:
        StepProgram([{"filter": "TRUE"}, {"unnest": "x", "as": "y"}]).run_many({"x": 5})
    assert failure.value.index == 1


def test_a_filter_that_gives_a_non_boolean_fails() -> None:
    run = StepProgram([{"filter": "amount"}]).run_one
    assert run is not None
    with pytest.raises(StepFailed):
        run({"amount": 5})


def test_every_problem_of_every_step_is_reported() -> None:
    with pytest.raises(StepsConfigError) as error:
        StepProgram([{"filter": "nope(a)"}, {"set": {"x": "a +", "y": "UPPER(a, b)"}}])
    assert [loc for loc, _ in error.value.problems] == [
        ("steps", 0, "filter"),
        ("steps", 1, "set", "x"),
        ("steps", 1, "set", "y"),
    ]
