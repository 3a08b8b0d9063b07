"""The rules of a join operator (semantics.md section 10): its inputs named, the ``how``
and the fields each kind takes, its bounds, lateness and state, its ``select``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from service.operators.join.kinds import JOIN_KINDS
from service.operators.join.projection import SelectError, compile_projection
from service.pipeline_spec.rules.base import (
    COMPARES,
    Fragment,
    JsonSchema,
    Problem,
    Rule,
    Service,
    equals,
    present,
    rule,
)
from service.pipeline_spec.rules.raw import as_int, as_map, as_str, input_sections, join_of

__all__ = [
    "JOIN_HOWS",
    "between_in_order",
    "interval_between",
    "join_how_fits_kind",
    "join_inputs_named",
    "join_select",
    "lookup_max_rows",
    "lookup_no_lateness",
    "regular_no_lateness",
    "state_ttl_for_regular",
    "window_join_assigner",
    "window_join_lateness",
]


JOIN_HOWS: Mapping[str, tuple[str, ...]] = {name: k.how_names for name, k in JOIN_KINDS.items()}
"""The ``how`` each join kind takes, as the operators' list of kinds says
(:mod:`service.operators.join.kinds`)."""
_LEFT_ONLY_WHY = (
    ": semi and anti are a window join's (join two windows): only a window bounds 'never matched'"
)
"""Why a kind without semi and anti refuses them (whatever else it refuses)."""


@rule(
    reports={"unknown_input", "same_input"},
    beyond_schema={
        "unknown_input": "compares a value with the keys of inputs, which no JSON Schema can",
        "same_input": COMPARES,
    },
)
def join_inputs_named(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """``left`` and ``right`` name two different inputs."""
    op = join_of(spec)
    inputs = as_map(spec.get("inputs"))
    if op is None or inputs is None:
        return
    names = [name for name in inputs if isinstance(name, str)]
    for side in ("left", "right"):
        name = as_str(op.get(side))
        if name is not None and name not in inputs:
            yield Problem(
                ("operator", side),
                "unknown_input",
                f"{name!r} is not an input (the inputs are {', '.join(map(repr, names))})",
                name,
            )
    left, right = as_str(op.get("left")), as_str(op.get("right"))
    if left is not None and left == right:
        yield Problem(
            ("operator", "right"),
            "same_input",
            "a join's left and right are two different inputs",
            right,
        )


@rule(
    reports={"how_not_for_kind"},
    schema=Fragment(
        "JoinOperator",
        {
            "allOf": [
                {"if": equals("kind", kind), "then": {"properties": {"how": {"enum": list(hows)}}}}
                for kind, hows in JOIN_HOWS.items()
            ]
        },
    ),
)
def join_how_fits_kind(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    op = join_of(spec)
    kind = as_str(op.get("kind")) if op is not None else None
    if op is None or kind is None or kind not in JOIN_HOWS:
        return
    how = op.get("how", "inner")
    if isinstance(how, str) and how not in JOIN_HOWS[kind]:
        yield Problem(
            ("operator", "how"),
            "how_not_for_kind",
            f"{kind} joins take how {' | '.join(JOIN_HOWS[kind])}, not {how!r}"
            + (_LEFT_ONLY_WHY if how in ("semi", "anti") else ""),
            how,
        )


def _field_of_kind(name: str, kind: str, field: str, field_type: str, needs: str) -> Rule:
    """The rule that ``field`` (of JSON type ``field_type``) is given for ``kind`` joins
    (else ``missing``, saying what it ``needs``) and left out of the others (else
    ``<field>_unused``): one rule per field that only one kind takes."""
    unused = f"{field}_unused"

    def check(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
        op = join_of(spec)
        if op is None or not isinstance(op.get("kind"), str):
            return
        if op["kind"] == kind and op.get(field) is None:
            yield Problem(("operator", field), "missing", needs)
        elif op["kind"] != kind and field in op:
            yield Problem(
                ("operator", field),
                unused,
                f"only {kind} joins take {field}, not {op['kind']} joins",
                op[field],
            )

    fragment: JsonSchema = {
        "if": equals("kind", kind),
        "then": present(field, field_type),
        "else": {"properties": {field: False}},
    }
    return rule(reports={"missing", unused}, schema=Fragment("JoinOperator", fragment), name=name)(
        check
    )


def _nothing_late(kind: str, why: str) -> Rule:
    """The rule that a ``kind`` join, which has no late rows (``why``), takes no
    ``allowed_lateness_ms`` (``lateness_not_for_<kind>``)."""
    problem = f"lateness_not_for_{kind}"

    def check(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
        op = join_of(spec)
        if op is None or op.get("kind") != kind:
            return
        lateness = as_int(op.get("allowed_lateness_ms"))
        if lateness:
            yield Problem(("operator", "allowed_lateness_ms"), problem, why, lateness)

    fragment: JsonSchema = {
        "if": equals("kind", kind),
        "then": {"properties": {"allowed_lateness_ms": {"const": 0}}},
    }
    return rule(
        reports={problem}, schema=Fragment("JoinOperator", fragment), name=f"{kind}_no_lateness"
    )(check)


interval_between = _field_of_kind(
    "interval_between",
    "interval",
    "between",
    "object",
    'an interval join needs between: {"lower_ms": ..., "upper_ms": ...}',
)
"""An interval join needs its bounds; no other kind takes them."""


@rule(reports={"lower_above_upper"}, beyond_schema={"lower_above_upper": COMPARES})
def between_in_order(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    op = join_of(spec)
    between = as_map(op.get("between")) if op is not None else None
    if between is None:
        return
    lower, upper = as_int(between.get("lower_ms")), as_int(between.get("upper_ms"))
    if lower is not None and upper is not None and lower > upper:
        yield Problem(
            ("operator", "between", "lower_ms"),
            "lower_above_upper",
            f"lower_ms ({lower}) is above upper_ms ({upper}): no right row could match",
            lower,
        )


window_join_assigner = _field_of_kind(
    "window_join_assigner",
    "window",
    "assigner",
    "object",
    "a window join needs its assigner (tumbling or sliding)",
)
"""A window join needs its (tumbling or sliding) assigner; no other kind takes one."""


@rule(
    reports={"lateness_needs_inner"},
    schema=Fragment(
        "JoinOperator",
        {
            "if": {
                "required": ["kind", "how"],
                "properties": {"kind": {"const": "window"}, "how": {"not": {"const": "inner"}}},
            },
            "then": {"properties": {"allowed_lateness_ms": {"const": 0}}},
        },
    ),
)
def window_join_lateness(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Allowed lateness in a window join only with ``how: inner``: a padded, semi or
    anti row emitted when the window fires could be contradicted by a late partner."""
    op = join_of(spec)
    if op is None or op.get("kind") != "window":
        return
    how = op.get("how", "inner")
    lateness = as_int(op.get("allowed_lateness_ms"))
    if isinstance(how, str) and how != "inner" and lateness:
        yield Problem(
            ("operator", "allowed_lateness_ms"),
            "lateness_needs_inner",
            f"a window join with how {how!r} emits rows that a late partner could "
            "contradict: allowed_lateness_ms only with how 'inner'",
            lateness,
        )


lookup_max_rows = _field_of_kind(
    "lookup_max_rows",
    "lookup",
    "max_rows",
    "integer",
    "a lookup join needs max_rows: the most keys its table may hold in memory on "
    "every replica (one more fails the pipeline)",
)
"""A lookup join says how many rows its table may hold; no other kind takes it."""

lookup_no_lateness = _nothing_late(
    "lookup",
    "a lookup join joins each left row when it arrives (processing time): "
    "nothing is late, leave allowed_lateness_ms out",
)
"""A lookup join joins each left row at once: nothing is late."""

regular_no_lateness = _nothing_late(
    "regular",
    "a regular join joins every row with every row of the other side: nothing "
    "is late, leave allowed_lateness_ms out (state_ttl_ms bounds its state)",
)
"""A regular join has no time condition: nothing is late."""


@rule(
    reports={"state_ttl_unused"},
    schema=Fragment(
        "JoinOperator",
        {"if": equals("kind", "regular"), "else": {"properties": {"state_ttl_ms": False}}},
    ),
)
def state_ttl_for_regular(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Only a regular join keeps rows the watermark does not expire: the other kinds'
    state is bounded by their time condition, so a TTL there says nothing."""
    op = join_of(spec)
    kind = as_str(op.get("kind")) if op is not None else None
    if op is None or kind is None or kind == "regular" or op.get("state_ttl_ms") is None:
        return
    yield Problem(
        ("operator", "state_ttl_ms"),
        "state_ttl_unused",
        f"only regular joins take state_ttl_ms, not {kind} joins (their time condition "
        "bounds their state)",
        op["state_ttl_ms"],
    )


@rule(
    reports={"invalid_select", "invalid_where"},
    beyond_schema={
        "invalid_select": "an expression's syntax and the inputs its paths name need its "
        "parser and the document's input names",
        "invalid_where": "an expression's syntax and the inputs its paths name need its "
        "parser and the document's input names",
    },
)
def join_select(spec: Mapping[str, Any], _: Service) -> Iterator[Problem]:
    """Each output field of ``select``, and the ``where``, compiles over
    ``<input>.<path>`` of the join's two inputs (every problem at its field, or at
    ``where``); a window join's also reads ``window.start`` and ``window.end``, a semi or
    anti join's not its right input. The inputs are the names under ``inputs`` (an
    unknown ``left`` or ``right`` is reported once, at itself, not again per field)."""
    op = join_of(spec)
    select = as_map(op.get("select")) if op is not None else None
    where = as_str(op.get("where")) if op is not None else None
    names = [name for name, _ in input_sections(spec)]
    if op is None or (select is None and where is None) or len(names) != 2:
        return
    expressions = (
        {k: v for k, v in select.items() if isinstance(k, str) and isinstance(v, str)}
        if select is not None
        else None
    )
    if expressions is not None and not expressions:
        if where is None:
            return
        expressions = None  # the select's own rule (its schema) says what is wrong
    left, right = as_str(op.get("left")), as_str(op.get("right"))
    if left in names and right in names and left != right:
        names = [left, right]  # so the right input is known (a semi join reads none of it)
    kind, how = op.get("kind"), op.get("how", "inner")
    left_only = how in ("semi", "anti") and how in JOIN_HOWS.get(str(kind), ())
    try:  # (a how the kind does not take is reported once, at operator.how)
        compile_projection(
            expressions,
            (names[0], names[1]),
            window=kind == "window",
            right_row=not left_only,
            where=where,
        )
    except SelectError as exc:
        for field_name, message in exc.problems:
            if field_name is None:
                yield Problem(("operator", "where"), "invalid_where", message, where)
            else:
                yield Problem(
                    ("operator", "select", field_name),
                    "invalid_select",
                    message,
                    (select or {}).get(field_name),
                )
