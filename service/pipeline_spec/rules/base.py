"""What a rule is: a check over the raw JSON and its JSON Schema fragment, declared as one.

A rule is a check (a generator of :class:`Problem` over the raw JSON) declared with
:func:`rule`, which also takes the rule's JSON Schema fragment, or says why no JSON
Schema can state it. :mod:`service.pipeline_spec.schema` assembles the served schema
from the models and these fragments, so a rule cannot reach the service and miss the
schema (or the other way round). The fragments' building blocks (:func:`present`,
:func:`equals`, :func:`of_type`) live here too, beside the declaration they serve.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "COMPARES",
    "Check",
    "Fragment",
    "JsonSchema",
    "Loc",
    "Problem",
    "Rule",
    "equals",
    "of_type",
    "present",
    "rule",
]

Loc = tuple[str | int, ...]
JsonSchema = dict[str, Any]


class Problem(NamedTuple):
    """One thing wrong with a spec: where (JSON path), what kind, and what to do."""

    loc: Loc
    type: str
    msg: str
    input: Any = None


Check = Callable[[Mapping[str, Any], Sequence[str]], Iterator[Problem]]
"""A rule's check: the raw spec and the allowed user-function modules -> its problems."""


@dataclass(frozen=True, slots=True)
class Fragment:
    """What JSON Schema can say of a rule, and the model whose definition it joins."""

    model: str
    """The model's name as in the schema's ``$defs`` (``PipelineSpec``: the top level)."""
    schema: JsonSchema | Callable[[Sequence[str]], JsonSchema]
    """The fragment; a callable when it depends on the allowed user-function modules."""

    def resolve(self, allowed_modules: Sequence[str]) -> JsonSchema:
        """The fragment for a service that allows ``allowed_modules``."""
        return self.schema(allowed_modules) if callable(self.schema) else self.schema


@dataclass(frozen=True, slots=True, eq=False)
class Rule:
    """One cross-field rule: its check, the problem types it reports, and its schema."""

    name: str
    check: Check
    reports: frozenset[str]
    """Every problem type the check reports."""
    schema: Fragment | None
    """None: no JSON Schema can state any of it (``beyond_schema`` says why)."""
    beyond_schema: Mapping[str, str] = field(default_factory=dict)
    """Problem types the fragment cannot state, each with the reason."""

    @property
    def stated(self) -> frozenset[str]:
        """The problem types the fragment states: the schema refuses every spec the check
        reports one of these for."""
        return self.reports - self.beyond_schema.keys()


def rule(
    *,
    reports: Iterable[str],
    schema: Fragment | None = None,
    beyond_schema: Mapping[str, str] | None = None,
    name: str | None = None,
) -> Callable[[Check], Rule]:
    """Declare the check below as a rule with its fragment (``name``: the check's own,
    unless a factory makes one rule per kind from one check).

    The declaration registers nothing: :data:`service.pipeline_spec.rules.RULES` names
    every rule, in the order of the 422's problems, and a test holds that list to the
    rules the modules declare."""
    reported = frozenset(reports)
    beyond = dict(beyond_schema or {})
    if not reported or not beyond.keys() <= reported:
        raise ValueError("a rule reports some problem types, beyond_schema names some of them")
    if schema is None and beyond.keys() != reported:
        raise ValueError("a rule without a schema fragment says why for each problem type")
    if schema is not None and beyond.keys() == reported:
        raise ValueError("a fragment that states none of the rule's problems is no fragment")

    def declare(check: Check) -> Rule:
        return Rule(name or check.__name__.lstrip("_"), check, reported, schema, beyond)

    return declare


COMPARES = "compares two values of one document, which no JSON Schema can"
"""Why a rule that compares two values of the spec has no fragment for it."""


# -- schema fragments' building blocks ------------------------------------------------


def present(name: str, kind: str) -> JsonSchema:
    """The property is there and not null (what the checks call given)."""
    return {"required": [name], "properties": {name: {"type": kind}}}


def equals(name: str, value: Any) -> JsonSchema:
    """The property is there and is ``value``."""
    return {"required": [name], "properties": {name: {"const": value}}}


def of_type(kind: str) -> JsonSchema:
    """An object whose ``type`` is ``kind`` (an operator, an assigner, a trigger)."""
    return {"type": "object", **equals("type", kind)}
