"""The rules of a window operator: its assigner, function, trigger, evictor and lateness
(a window join's assigner too). An aggregation's own fields are in :mod:`.aggregates`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from service.pipeline_spec.rules.base import (
    COMPARES,
    Fragment,
    JsonSchema,
    Problem,
    Service,
    equals,
    of_type,
    present,
    rule,
)
from service.pipeline_spec.rules.raw import (
    as_int,
    as_map,
    as_str,
    assigner_of,
    window_of,
    window_time_of,
)
from service.pipeline_spec.rules.user_functions import user_function_pattern, user_ref

__all__ = [
    "aggregations_or_function",
    "evictor_needs_function",
    "global_window_trigger",
    "no_lateness_in_processing_time",
    "offset_within_period",
    "slide_within_size",
    "trigger_fits_time",
    "window_function_allowed",
]

_DEFAULT_TRIGGER = {"event": "event_time", "processing": "processing_time"}
_DOMAIN_TRIGGERS = {"event_time": "event", "processing_time": "processing"}


@rule(reports={"slide_greater_than_size"}, beyond_schema={"slide_greater_than_size": COMPARES})
def slide_within_size(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    assigner = assigner_of(spec)
    if assigner is None or assigner.get("type") != "sliding":
        return
    size = as_int(assigner.get("size_ms"))
    slide = as_int(assigner.get("slide_ms"))
    if size and slide and size > 0 and slide > size:
        yield Problem(
            ("operator", "assigner", "slide_ms"),
            "slide_greater_than_size",
            f"slide_ms ({slide}) must not exceed size_ms ({size}): records between "
            "windows would belong to none",
            slide,
        )


@rule(reports={"offset_out_of_range"}, beyond_schema={"offset_out_of_range": COMPARES})
def offset_within_period(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    assigner = assigner_of(spec)
    if assigner is None:
        return
    kind = assigner.get("type")
    name = "size_ms" if kind == "tumbling" else "slide_ms" if kind == "sliding" else None
    period = as_int(assigner.get(name)) if name is not None else None
    offset = as_int(assigner.get("offset_ms"))
    if period and period > 0 and offset is not None and abs(offset) >= period:
        yield Problem(
            ("operator", "assigner", "offset_ms"),
            "offset_out_of_range",
            f"|offset_ms| must be less than {name} ({period})",
            offset,
        )


_HAS_FUNCTION = present("function", "string")


@rule(
    reports={"window_function_missing", "window_function_ambiguous"},
    schema=Fragment(
        "WindowOperator", {"oneOf": [present("aggregations", "object"), _HAS_FUNCTION]}
    ),
)
def aggregations_or_function(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    op = window_of(spec)
    if op is None:
        return
    has_aggs = op.get("aggregations") is not None
    has_fn = op.get("function") is not None
    if not has_aggs and not has_fn:
        yield Problem(
            ("operator",),
            "window_function_missing",
            "a window needs aggregations or a function",
        )
    if has_aggs and has_fn:
        yield Problem(
            ("operator", "function"),
            "window_function_ambiguous",
            "give either aggregations or a function, not both",
            op.get("function"),
        )


@rule(
    reports={"evictor_needs_elements"},
    schema=Fragment("WindowOperator", {"if": present("evictor", "object"), "then": _HAS_FUNCTION}),
)
def evictor_needs_function(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    op = window_of(spec)
    if op is not None and op.get("evictor") is not None and op.get("function") is None:
        yield Problem(
            ("operator", "evictor"),
            "evictor_needs_elements",
            "an evictor needs the window's elements, but aggregations keep only an "
            "accumulator: use a window function, or drop the evictor",
            op.get("evictor"),
        )


def _window_function_schema(allowed: Sequence[str]) -> JsonSchema:
    pattern = user_function_pattern(allowed)
    if pattern is None:
        return {
            "properties": {
                "function": {"type": "null", "description": "No module is allowed here."}
            }
        }
    return {
        "properties": {
            "function": {"anyOf": [{"type": "string", "pattern": pattern}, {"type": "null"}]}
        }
    }


@rule(
    reports={"function_not_allowed", "function_ref_invalid"},
    schema=Fragment("WindowOperator", _window_function_schema),
)
def window_function_allowed(spec: Mapping[str, Any], service: Service) -> Iterator[Problem]:
    """A window function is ``package.module:Name`` in an allowed module."""
    op = window_of(spec)
    fn = as_str(op.get("function")) if op is not None else None
    if fn is not None:
        yield from user_ref(("operator", "function"), fn, service.allowed_modules)


@rule(
    reports={"trigger_domain_mismatch"},
    schema=Fragment(
        "WindowOperator",
        {
            "if": equals("time", "processing"),
            "then": {"properties": {"trigger": {"not": of_type("event_time")}}},
            "else": {"properties": {"trigger": {"not": of_type("processing_time")}}},
        },
    ),
)
def trigger_fits_time(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    op = window_of(spec)
    time = window_time_of(op) if op is not None else None
    if op is None or time is None:
        return
    trigger = as_map(op.get("trigger"))
    trigger_type = trigger.get("type") if trigger is not None else None
    domain = _DOMAIN_TRIGGERS.get(trigger_type) if isinstance(trigger_type, str) else None
    if domain is not None and domain != time:
        yield Problem(
            ("operator", "trigger", "type"),
            "trigger_domain_mismatch",
            f"a {trigger_type} trigger does not fit {time}-time windows: use "
            f"{_DEFAULT_TRIGGER[time]}, count or continuous",
            trigger_type,
        )


@rule(
    reports={"global_window_never_fires"},
    schema=Fragment(
        "WindowOperator",
        {
            "if": {"required": ["assigner"], "properties": {"assigner": equals("type", "global")}},
            "then": {
                "required": ["trigger"],
                "properties": {
                    "trigger": {
                        "type": "object",
                        "required": ["type"],
                        "properties": {"type": {"enum": ["continuous", "count"]}},
                    }
                },
            },
        },
    ),
)
def global_window_trigger(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """A global window never ends: it needs a trigger that fires without an end."""
    op = window_of(spec)
    if op is None or window_time_of(op) is None:
        return
    trigger = as_map(op.get("trigger"))
    trigger_type = trigger.get("type") if trigger is not None else None
    assigner = as_map(op.get("assigner"))
    global_window = assigner is not None and assigner.get("type") == "global"
    if global_window and trigger_type not in ("count", "continuous"):
        yield Problem(
            ("operator", "trigger"),
            "global_window_never_fires",
            "a global window never ends, so its default trigger never fires: give a "
            "count or continuous trigger",
            trigger,
        )


@rule(
    reports={"lateness_in_processing_time"},
    schema=Fragment(
        "WindowOperator",
        {
            "if": equals("time", "processing"),
            "then": {"properties": {"allowed_lateness_ms": {"const": 0}}},
        },
    ),
)
def no_lateness_in_processing_time(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    op = window_of(spec)
    if op is None or window_time_of(op) != "processing":
        return
    lateness = as_int(op.get("allowed_lateness_ms"))
    if lateness:
        yield Problem(
            ("operator", "allowed_lateness_ms"),
            "lateness_in_processing_time",
            "processing-time windows have no late records: leave allowed_lateness_ms out",
            lateness,
        )
