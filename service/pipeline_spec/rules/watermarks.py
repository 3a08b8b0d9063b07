"""The rules of a stream's watermark (at the top level, or in each input of a join)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from service.pipeline_spec.rules.base import Fragment, Loc, Problem, Service, equals, present, rule
from service.pipeline_spec.rules.raw import as_int, watermark_sections

__all__ = ["bound_only_when_out_of_order", "idle_advance_needs_timeout", "punctuated_field"]


def _strategy(wm: Mapping[str, Any]) -> Any:
    return wm.get("strategy", "bounded_out_of_orderness")


@rule(
    reports={"missing", "watermark_field_unused"},
    schema=Fragment(
        "WatermarkSpec",
        {
            "if": equals("strategy", "punctuated"),
            "then": present("field", "string"),
            "else": {"properties": {"field": False}},
        },
    ),
)
def punctuated_field(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """The punctuated strategy needs its field, and only it takes one."""
    for at, wm in watermark_sections(spec):
        yield from _punctuated_problems(at, wm)


def _punctuated_problems(at: Loc, wm: Mapping[str, Any]) -> Iterator[Problem]:
    strategy = _strategy(wm)
    if strategy == "punctuated" and wm.get("field") is None:
        yield Problem(
            (*at, "field"),
            "missing",
            "the punctuated strategy needs the payload field that carries the watermark",
        )
    if strategy != "punctuated" and "field" in wm:
        yield Problem(
            (*at, "field"),
            "watermark_field_unused",
            f"field is only used by the punctuated strategy, not {strategy!r}",
            wm["field"],
        )


@rule(
    reports={"watermark_bound_with_ascending", "watermark_bound_with_punctuated"},
    schema=Fragment(
        "WatermarkSpec",
        {
            "if": {
                "required": ["strategy"],
                "properties": {
                    "strategy": {"enum": ["ascending", "strictly_ascending", "punctuated"]}
                },
            },
            "then": {"properties": {"max_out_of_orderness_ms": {"const": 0}}},
        },
    ),
)
def bound_only_when_out_of_order(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Ascending (strictly or not) and punctuated watermarks have no out-of-orderness
    bound."""
    for at, wm in watermark_sections(spec):
        yield from _bound_problems(at, wm)


def _bound_problems(at: Loc, wm: Mapping[str, Any]) -> Iterator[Problem]:
    strategy = _strategy(wm)
    bound = as_int(wm.get("max_out_of_orderness_ms"))
    if strategy in ("ascending", "strictly_ascending") and bound:
        yield Problem(
            (*at, "max_out_of_orderness_ms"),
            "watermark_bound_with_ascending",
            f"{strategy.replace('_', ' ')} timestamps have no out-of-orderness bound: use "
            "bounded_out_of_orderness or leave it out",
            bound,
        )
    if strategy == "punctuated" and bound:
        yield Problem(
            (*at, "max_out_of_orderness_ms"),
            "watermark_bound_with_punctuated",
            "a punctuated watermark is the field's value, with no out-of-orderness bound: "
            "leave it out",
            bound,
        )


@rule(
    reports={"idle_advance_without_timeout"},
    schema=Fragment(
        "WatermarkSpec",
        {"if": equals("idle_advance", True), "then": present("idle_timeout_ms", "integer")},
    ),
)
def idle_advance_needs_timeout(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    for at, wm in watermark_sections(spec):
        if wm.get("idle_advance") is True and wm.get("idle_timeout_ms") is None:
            yield Problem(
                (*at, "idle_advance"),
                "idle_advance_without_timeout",
                "idle_advance needs idle_timeout_ms: without it no partition is ever idle",
                True,
            )
