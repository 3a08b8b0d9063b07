"""The pipeline spec's JSON Schema: the models' field checks plus every cross-field rule
that JSON Schema can state.

Why more than ``PipelineSpec.model_json_schema()``: the models check one field at a time,
and :mod:`service.pipeline_spec.rules` checks how fields fit together. A schema with only
the first half calls specs valid that the service refuses (a window with neither
aggregations nor a function), so an editor that checks against it says nothing until
the 422, and a fuzzer reading the OpenAPI document sends "valid" specs that are not.
So each rule of the ``rules`` package carries its fragment (``if``/``then``/``else``,
``oneOf``, ``not``, ``const``, ``uniqueItems``), and :func:`pipeline_schema` adds every
fragment to the definition of the model it is about, as one more ``allOf`` entry; the
allowed user-function modules (configuration) narrow the function references. This module adds
no rule of its own: only the models' schema, said where pydantic says it loosely
(field names as ``propertyNames``).

What stays outside, because no JSON Schema can compare two values of one document or
know what a module contains (each rule's ``beyond_schema`` says which; and
docs/pipeline-spec.md, "What the schema says, and what it cannot"):
``slide_ms <= size_ms``; ``|offset_ms|`` below the size or slide; sink topics distinct from
the source topics and from each other, and the default ``<topic>.dlq`` not taken; a
step's expression; a join's inputs named by ``left`` and ``right``, ``lower_ms <=
upper_ms``, its ``select``, inputs that share their topics or disagree on what they
share; a user function that imports and is of the right kind, with the params
it accepts; for ``PUT``, the body's name equal to the path's; and what the broker can do
(exactly-once needs transactions: the service asks the broker).

The models stay the truth: ``tests/pipeline_spec/test_spec_schema.py`` checks that the schema and
the service agree on generated specs, ``tests/pipeline_spec/test_rules.py`` that each
rule's check and fragment agree, and schemathesis checks it against the running service.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

from service.pipeline_spec.models import PIPELINE_NAME_PATTERN, PipelineSpec
from service.pipeline_spec.rules import RULES, Rule
from service.pipeline_spec.sql.parsing import MAX_SCRIPT

__all__ = ["DRAFT", "assemble", "pipeline_schema", "replacement_schema", "sql_schemas"]

DRAFT = "https://json-schema.org/draft/2020-12/schema"

JsonSchema = dict[str, Any]


@cache
def _pipeline_schema(allowed: tuple[str, ...], ref_template: str) -> JsonSchema:
    return assemble(allowed, RULES, ref_template)


def assemble(
    allowed_modules: Sequence[str],
    rules: Iterable[Rule],
    ref_template: str = "#/$defs/{model}",
) -> JsonSchema:
    """The models' schema with the fragments of ``rules``, each joined to the ``allOf`` of
    the model it names (served: :func:`pipeline_schema`, with every rule; tests take one
    rule at a time, to hold its fragment against its check)."""
    schema = PipelineSpec.model_json_schema(ref_template=ref_template)
    defs: dict[str, JsonSchema] = schema["$defs"]
    _field_names(schema, defs)
    for rule in rules:
        if rule.schema is not None:
            model = rule.schema.model
            target = schema if model == PipelineSpec.__name__ else defs[model]
            fragment = copy.deepcopy(rule.schema.resolve(allowed_modules))
            target.setdefault("allOf", []).append(fragment)
    schema["$schema"] = DRAFT
    return schema


def pipeline_schema(
    allowed_modules: Sequence[str], ref_template: str = "#/$defs/{model}"
) -> JsonSchema:
    """The spec's schema for a service that allows ``allowed_modules`` (a fresh copy:
    callers may move its ``$defs``)."""
    return copy.deepcopy(_pipeline_schema(tuple(allowed_modules), ref_template))


def replacement_schema(spec: JsonSchema) -> JsonSchema:
    """The body of ``PUT /pipelines/{name}``: ``spec`` (the top level of
    :func:`pipeline_schema`, sharing its definitions) with ``name`` optional, since the
    path names the pipeline (given, it must be the same: the service checks that)."""
    body = {k: copy.deepcopy(v) for k, v in spec.items() if k not in ("$defs", "$schema")}
    body["title"] = "PipelineReplacement"
    body["description"] = "A pipeline spec; `name` may be left out (the path gives it)."
    body["required"] = [name for name in spec["required"] if name != "name"]
    return body


def sql_schemas() -> dict[str, JsonSchema]:
    """The SQL forms of a body (docs/sql.md): ``SqlPipeline`` (``POST /pipelines``),
    ``SqlReplacement`` (``PUT``: the path names it) and ``SqlCompile`` (``POST
    /sql/compile``). The script is a string here; what it must say, no JSON Schema can
    state (the compiler answers 422 with each problem's statement, line and column)."""
    name = {"type": "string", "pattern": PIPELINE_NAME_PATTERN}
    sql = {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_SCRIPT,
        "description": "The pipeline as SQL: CREATE SOURCE ...; INSERT INTO ... SELECT ...",
    }

    def body(title: str, required: list[str], description: str) -> JsonSchema:
        return {
            "title": title,
            "description": description,
            "type": "object",
            "properties": {"name": name, "sql": sql},
            "required": required,
            "additionalProperties": False,
        }

    return {
        "SqlPipeline": body("SqlPipeline", ["name", "sql"], "A pipeline written in SQL."),
        "SqlReplacement": body(
            "SqlReplacement", ["sql"], "A pipeline written in SQL; `name` may be left out."
        ),
        "SqlCompile": body(
            "SqlCompile", ["sql"], "A script to compile; `name` names the spec (default: compiled)."
        ),
    }


# -- the models' own checks, said where pydantic says them loosely --------------------


def _field_names(schema: JsonSchema, defs: dict[str, JsonSchema]) -> None:
    """Field paths as ``set`` keys, aggregations' and a join's ``select`` output names,
    and input names: pydantic states their pattern as ``patternProperties``, which lets
    any other key through with any value; ``propertyNames`` refuses them as the service
    does."""
    for names in (
        defs["SetStep"]["properties"]["set"],
        _non_null(defs["WindowOperator"], "aggregations"),
        defs["AggregateOperator"]["properties"]["aggregations"],
        _non_null(defs["JoinOperator"], "select"),
        _non_null(schema, "inputs"),
    ):
        ((pattern, value),) = names.pop("patternProperties").items()
        names["propertyNames"] = {**names.get("propertyNames", {}), "pattern": pattern}
        names["additionalProperties"] = value


def _non_null(model: JsonSchema, name: str) -> JsonSchema:
    """The schema of an optional property's value (pydantic: ``anyOf: [it, null]``)."""
    (value,) = (s for s in model["properties"][name]["anyOf"] if s.get("type") != "null")
    schema: JsonSchema = value
    return schema
