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

from service.runtime.formats.registry import FORMATS

__all__ = [
    "COMPARES",
    "NO_SCHEMA_REGISTRY",
    "OF_THE_SERVICE",
    "Check",
    "Fragment",
    "JsonSchema",
    "Loc",
    "Problem",
    "Rule",
    "Service",
    "equals",
    "of_type",
    "present",
    "rule",
    "uses_registry",
]

Loc = tuple[str | int, ...]
JsonSchema = dict[str, Any]


class Problem(NamedTuple):
    """One thing wrong with a spec: where (JSON path), what kind, and what to do."""

    loc: Loc
    type: str
    msg: str
    input: Any = None


@dataclass(frozen=True, slots=True)
class Service:
    """What a rule may know of the service that validates the spec: plain facts of its
    settings, read by the caller, so that every rule stays a pure function."""

    allowed_modules: tuple[str, ...] = ()
    """The modules user functions may come from (``SERVICE_UDF_MODULES``)."""
    schema_registry: bool | None = None
    """Whether the service has a schema registry (``SERVICE_SCHEMA_REGISTRY_URL``); None:
    not asked. A spec a user sends is asked (the API's create, replace and compile); a
    stored spec built again by a replica is not: it was held to it when it was written,
    and the replica's own lack of a registry is its start's problem, not the spec's."""


Check = Callable[[Mapping[str, Any], Service], Iterator[Problem]]
"""A rule's check: the raw spec and what it may know of the service -> its problems."""


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

OF_THE_SERVICE = (
    "depends on the service's settings, not on the document (the served schema is one for "
    "every deployment of the service)"
)
"""Why a rule that reads a fact of the :class:`Service` beside the spec has no fragment."""

NO_SCHEMA_REGISTRY = (
    "this format needs a schema registry, and the service has none (SERVICE_SCHEMA_REGISTRY_URL)"
)
"""The problem ``schema_registry_unconfigured``: a source's or a sink's format."""


def uses_registry(fmt: str | None) -> bool:
    """Whether format ``fmt`` is in Confluent's wire format (its schemas in the
    registry): every format with a schema type (runtime/formats/registry.py)."""
    return any(f.name == fmt and f.schema_type is not None for f in FORMATS)


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
