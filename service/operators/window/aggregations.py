"""Built-in incremental aggregations, compiled once per operator into tight code.

Several named outputs share ONE accumulator per window: a flat list with a few slots
per aggregation (after ``base`` leading slots the operator keeps for itself, such as
the firing sequence number). Every slot is plain data, so a snapshot is a list copy:
count/sum one number, min/max a number or None, avg ``sum, count``, first/last
``timestamp, value``, max_by/min_by ``by value, timestamp, value``, count_distinct a
dict of JSON-encoded values (never a set), collect a list.

Why code generation: the per-record update is the hot path. Dispatching through a
loop of ``(kind, path)`` pairs costs a call and several branches per aggregation per
record; instead :meth:`AggregationPlan.fetch_lines` and :meth:`update_lines` emit
straight-line Python for exactly the configured aggregations, which the operators
compile into their batch loops. Only the aggregation kinds (a closed enum) shape the
source; field names and the other constants enter through the namespace, never as text.

What each function takes (docs/semantics.md, "Bad values"): sum and avg take numbers
(``int`` or ``float``; ``true``/``false`` are not numbers, nor is a numeric string);
min and max take numbers and strings, ordered by one rule whatever the arrival order:
numbers by value, strings by code point, every number before every string. first,
last, collect and count_distinct take any JSON value. A missing field or JSON null is
SQL NULL (count counts the row, the others leave it out). Any other value is a *bad
value*: the operator checks each record once, before it enters any window
(:meth:`AggregationPlan.reject_lines` inline in the fast path's loop, :attr:`has_bad` on
the general path), and either dead-letters it or aggregates it with the field as NULL
(``on_bad_value``); :meth:`AggregationPlan.bad_values` says which and why. first/last
pick the value with the smallest/largest event timestamp (ties: first/last to arrive),
so the result does not depend on arrival order.

max_by/min_by (Spark's and Flink's ``MAX_BY``/``MIN_BY``, ``ARG_MAX``) return ``field``
of the row with the largest/smallest ``by``: ``by`` is read as max reads its field
(numbers and strings in one order; anything else is a bad value; NULL: the row is left
out), ``field`` as first reads it (any value; missing: NULL). Ties on ``by`` go to the
row with the smallest event timestamp, then to the first to arrive; so several max_by
over one ``by`` in one window return fields of the same row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from service.core.errors import ConfigError
from service.core.paths import MISSING, get_path, split_path

from .aggregate_kinds import AGGREGATES, AggKind
from .errors import WindowConfigError

_WIDTH = {AggKind.AVG: 2, AggKind.FIRST: 2, AggKind.LAST: 2, AggKind.MAX_BY: 3, AggKind.MIN_BY: 3}
_BY = frozenset(kind for kind, entry in AGGREGATES.items() if entry.takes_by)
"""Functions that return one field of the row with the extreme ``by``."""
_NUMERIC = frozenset({AggKind.SUM, AggKind.MIN, AggKind.MAX, AggKind.AVG})
"""Functions that read numbers (min and max also strings)."""
_ORDERED = frozenset({AggKind.MIN, AggKind.MAX})
_NUMBERS_ONLY = _NUMERIC - _ORDERED

REASON_NOT_A_NUMBER = "not_a_number"
REASON_NOT_COMPARABLE = "not_comparable"


def order_key(value: int | float | str) -> tuple[int, int | float | str]:
    """min/max's one order over numbers and strings: every number before every string."""
    return (1, value) if type(value) is str else (0, value)


def _beats(kind: AggKind, source: list[Any], target: list[Any], i: int) -> bool:
    """Whether ``source``'s max_by/min_by row at slot ``i`` wins over ``target``'s (both
    held): a larger (smaller) ``by``, or the same at an earlier timestamp."""
    a, b = order_key(target[i]), order_key(source[i])
    if a == b:
        return bool(source[i + 1] < target[i + 1])
    return b > a if kind is AggKind.MAX_BY else b < a


_INITIAL = {
    AggKind.COUNT: "0",
    AggKind.SUM: "0",
    AggKind.MIN: "None",
    AggKind.MAX: "None",
    AggKind.AVG: "0, 0",
    AggKind.FIRST: "None, None",
    AggKind.LAST: "None, None",
    AggKind.COUNT_DISTINCT: "{}",
    AggKind.COLLECT: "[]",
    AggKind.MAX_BY: "None, None, None",
    AggKind.MIN_BY: "None, None, None",
}


@dataclass(frozen=True, slots=True)
class AggregationSpec:
    """One named output: ``name`` is ``kind`` of the dotted ``field`` (None for count);
    ``by`` is the field max_by/min_by order the rows by (None for the others)."""

    name: str
    kind: AggKind
    field: str | None = None
    by: str | None = None

    @property
    def checked_field(self) -> str | None:
        """The field whose values this function may refuse (bad values): ``by`` for
        max_by and min_by, else ``field``."""
        return self.by if self.kind in _BY else self.field


def encode_distinct(value: Any) -> str:
    """The canonical JSON text of ``value``: distinct values are distinct texts."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def parse_aggregations(spec: Mapping[str, Any]) -> list[AggregationSpec]:
    """``{name: (fn, field)}`` or ``{name: {"fn": ..., "field": ..., "by": ...}}`` to
    specs (``by``: max_by and min_by only, and required there)."""
    if not spec:
        raise WindowConfigError("aggregations must name at least one output")
    out: list[AggregationSpec] = []
    for name, item in spec.items():
        by = None
        if isinstance(item, Mapping):
            fn, field, by = item.get("fn"), item.get("field"), item.get("by")
        elif isinstance(item, tuple | list) and len(item) == 2:
            fn, field = item
        else:
            raise WindowConfigError(f"aggregation {name!r}: expected (fn, field) or {{fn, field}}")
        try:
            kind = AggKind(str(fn))
        except ValueError:
            raise WindowConfigError(f"aggregation {name!r}: unknown fn {fn!r}") from None
        if kind is AggKind.COUNT:
            if field is not None:
                raise WindowConfigError(f"aggregation {name!r}: count takes no field")
        else:
            if field is None:
                raise WindowConfigError(f"aggregation {name!r}: {kind} needs a field")
            try:
                split_path(field)
            except ConfigError as exc:
                raise WindowConfigError(f"aggregation {name!r}: {exc}") from None
        if kind in _BY:
            if by is None:
                raise WindowConfigError(f"aggregation {name!r}: {kind} needs by")
            try:
                split_path(by)
            except ConfigError as exc:
                raise WindowConfigError(f"aggregation {name!r}: by: {exc}") from None
        elif by is not None:
            raise WindowConfigError(f"aggregation {name!r}: only max_by and min_by take by")
        out.append(AggregationSpec(str(name), kind, field, by))
    return out


class AggregationPlan:
    """The slot layout and compiled code of a list of aggregations."""

    __slots__ = (
        "_paths",
        "add",
        "base",
        "check",
        "fold",
        "has_bad",
        "invalid",
        "namespace",
        "result",
        "slots",
        "specs",
        "width",
    )

    def __init__(self, specs: list[AggregationSpec], base: int = 0) -> None:
        self.specs = tuple(specs)
        self.base = base
        self.invalid = [0] * len(specs)
        """Per aggregation: bad values seen (dead-lettered or taken as NULL)."""
        slots: list[int] = []
        position = base
        for spec in self.specs:
            slots.append(position)
            position += _WIDTH.get(spec.kind, 1)
        self.slots = tuple(slots)
        self.width = position
        self._paths: list[tuple[str, ...]] = []
        for spec in self.specs:
            for path in (spec.field, spec.by):
                if path is not None and split_path(path) not in self._paths:
                    self._paths.append(split_path(path))
        self.namespace: dict[str, Any] = {
            "_MISSING": MISSING,
            "_LOOKUP": (KeyError, TypeError, IndexError),
            "_type": type,
            "_int": int,
            "_float": float,
            "_str": str,
            "_enc": encode_distinct,
            "_bad": self.invalid,
        }
        for p, parts in enumerate(self._paths):
            for i, part in enumerate(parts):
                self.namespace[f"_P{p}_{i}"] = part
        self.add: Callable[[list[Any], int, Any], None] = self._compile("add")
        """``add(acc, timestamp, value)``: fold one record in (a bad value as NULL)."""
        self.fold = self.add
        self.has_bad: Callable[[Any], bool] | None = self._compile_has_bad()
        """``has_bad(value)``: whether a field holds a value its aggregation cannot take
        (None: no aggregation reads a field that can)."""
        self.result: Callable[[list[Any]], dict[str, Any]] = self._compile_result()
        """``result(acc)``: the named outputs (fresh containers: the result may be kept)."""

    # -- code generation ----------------------------------------------------------------
    def initial_source(self, prefix: str = "") -> str:
        """A list display of a fresh accumulator, after ``prefix`` (the base slots' text)."""
        parts = [prefix] if prefix else []
        parts.extend(_INITIAL[spec.kind] for spec in self.specs)
        return "[" + ", ".join(parts) + "]"

    def _kinds(self, parts: tuple[str, ...]) -> set[AggKind]:
        """How the field at ``parts`` is read: the functions reading it, and max for a
        ``by`` (max_by and min_by order by it as max orders its field)."""
        kinds = {s.kind for s in self.specs if s.field and split_path(s.field) == parts}
        if any(s.by is not None and split_path(s.by) == parts for s in self.specs):
            kinds.add(AggKind.MAX)
        return kinds

    def fetch_lines(self, value: str, indent: str) -> list[str]:
        """Read each field once into ``_v<p>`` and classify it (``_n<p>``: a number,
        ``_s<p>``: a string, where min or max read it)."""
        lines: list[str] = []
        for p, parts in enumerate(self._paths):
            access = value + "".join(f"[_P{p}_{i}]" for i in range(len(parts)))
            lines += [
                f"{indent}try:",
                f"{indent}    _v{p} = {access}",
                f"{indent}except _LOOKUP:",
                f"{indent}    _v{p} = _MISSING",
            ]
            kinds = self._kinds(parts)
            if kinds & _NUMERIC:
                lines += [
                    f"{indent}_t{p} = _type(_v{p})",
                    f"{indent}_n{p} = _t{p} is _int or _t{p} is _float",
                ]
            if kinds & _ORDERED:
                lines.append(f"{indent}_s{p} = _t{p} is _str")
            if AggKind.COUNT_DISTINCT in kinds:
                lines.append(f"{indent}_e{p} = _enc(_v{p}) if _v{p} is not _MISSING else None")
        return lines

    def _bad_tests(self) -> list[str]:
        """Per field some function cannot take every value of: the test of a bad value."""
        tests: list[str] = []
        for p, parts in enumerate(self._paths):
            kinds = self._kinds(parts)
            if not kinds & _NUMERIC:
                continue
            test = f"not _n{p} and _v{p} is not _MISSING and _v{p} is not None"
            if not kinds & _NUMBERS_ONLY:  # min/max only: strings are fine
                test += f" and not _s{p}"
            tests.append(f"({test})")
        return tests

    def reject_lines(self, indent: str, action: list[str]) -> list[str]:
        """After :meth:`fetch_lines`: run ``action`` (lines) when a field holds a bad value.

        For a valid number this is one ``not`` per numeric field: the check costs the hot
        path almost nothing."""
        tests = self._bad_tests()
        if not tests:
            return []
        return [f"{indent}if {' or '.join(tests)}:", *(indent + "    " + a for a in action)]

    def bad_values(self, value: Any) -> list[tuple[int, AggregationSpec, str]]:
        """Which aggregations cannot take ``value``'s fields, and why (the slow path)."""
        out: list[tuple[int, AggregationSpec, str]] = []
        for j, spec in enumerate(self.specs):
            read = spec.checked_field
            if (spec.kind not in _NUMERIC and spec.kind not in _BY) or read is None:
                continue
            v = get_path(value, read)
            t = type(v)
            if v is MISSING or v is None or t is int or t is float:
                continue
            if spec.kind in _ORDERED or spec.kind in _BY:
                if t is not str:
                    out.append((j, spec, REASON_NOT_COMPARABLE))
            else:
                out.append((j, spec, REASON_NOT_A_NUMBER))
        return out

    def _compile_has_bad(self) -> Callable[[Any], bool] | None:
        tests = self._bad_tests()
        if not tests:
            return None
        lines = ["def has_bad(value):", *self.fetch_lines("value", "    ")]
        lines.append(f"    return bool({' or '.join(tests)})")
        namespace = dict(self.namespace)
        exec(compile("\n".join(lines), "<window-aggregations-has-bad>", "exec"), namespace)
        function: Callable[[Any], bool] = namespace["has_bad"]
        return function

    def update_lines(self, acc: str, ts: str, indent: str) -> list[str]:
        """Fold the fetched values into accumulator ``acc`` (after :meth:`fetch_lines`)."""
        lines: list[str] = []
        for spec, i in zip(self.specs, self.slots, strict=True):
            k = spec.kind
            if k is AggKind.COUNT:
                lines.append(f"{indent}{acc}[{i}] += 1")
                continue
            p = self._paths.index(split_path(str(spec.field)))
            v = f"_v{p}"
            if k in _BY:
                lines += self._by_lines(k, acc, ts, i, p, indent)
                continue
            if k in _ORDERED:
                # one order for numbers and strings: every number before every string
                lesser = k is AggKind.MIN
                body = indent + "    "
                lines += [
                    f"{indent}if _n{p}:",
                    f"{body}_x = {acc}[{i}]",
                    (
                        f"{body}if _x is None or _x.__class__ is _str or {v} < _x:"
                        if lesser
                        else f"{body}if _x is None or (_x.__class__ is not _str and {v} > _x):"
                    ),
                    f"{body}    {acc}[{i}] = {v}",
                    f"{indent}elif _s{p}:",
                    f"{body}_x = {acc}[{i}]",
                    (
                        f"{body}if _x is None or (_x.__class__ is _str and {v} < _x):"
                        if lesser
                        else f"{body}if _x is None or _x.__class__ is not _str or {v} > _x:"
                    ),
                    f"{body}    {acc}[{i}] = {v}",
                ]
                continue
            if k in _NUMERIC:
                lines.append(f"{indent}if _n{p}:")
            else:
                lines.append(f"{indent}if {v} is not _MISSING:")
            body = indent + "    "
            if k is AggKind.SUM:
                lines.append(f"{body}{acc}[{i}] += {v}")
            elif k is AggKind.AVG:
                lines += [f"{body}{acc}[{i}] += {v}", f"{body}{acc}[{i + 1}] += 1"]
            elif k in (AggKind.FIRST, AggKind.LAST):
                op = "<" if k is AggKind.FIRST else ">="
                lines += [
                    f"{body}_x = {acc}[{i}]",
                    f"{body}if _x is None or {ts} {op} _x:",
                    f"{body}    {acc}[{i}] = {ts}",
                    f"{body}    {acc}[{i + 1}] = {v}",
                ]
            elif k is AggKind.COUNT_DISTINCT:
                lines.append(f"{body}{acc}[{i}][_e{p}] = None")
            else:  # COLLECT
                lines.append(f"{body}{acc}[{i}].append({v})")
        return lines

    def _by_lines(self, k: AggKind, acc: str, ts: str, i: int, p: int, indent: str) -> list[str]:
        """max_by/min_by: take row ``_v<p>`` when its ``by`` (``_v<q>``) beats the held
        one in min/max's order, or ties with it at an earlier timestamp."""
        spec = next(s for s, at in zip(self.specs, self.slots, strict=True) if at == i)
        q = self._paths.index(split_path(str(spec.by)))
        b = f"_v{q}"
        earlier = f"({b} == _x and {ts} < {acc}[{i + 1}])"
        if k is AggKind.MAX_BY:
            number = f"_x is None or (_x.__class__ is not _str and ({b} > _x or {earlier}))"
            string = f"_x is None or _x.__class__ is not _str or {b} > _x or {earlier}"
        else:
            number = f"_x is None or _x.__class__ is _str or {b} < _x or {earlier}"
            string = f"_x is None or (_x.__class__ is _str and ({b} < _x or {earlier}))"
        body = indent + "    "
        take = [
            f"{body}    {acc}[{i}] = {b}",
            f"{body}    {acc}[{i + 1}] = {ts}",
            f"{body}    {acc}[{i + 2}] = None if _v{p} is _MISSING else _v{p}",
        ]
        return [
            f"{indent}if _n{q}:",
            f"{body}_x = {acc}[{i}]",
            f"{body}if {number}:",
            *take,
            f"{indent}elif _s{q}:",
            f"{body}_x = {acc}[{i}]",
            f"{body}if {string}:",
            *take,
        ]

    def _compile(self, name: str) -> Callable[[Any, int, Any], None]:
        lines = [f"def {name}(acc, ts, value):", "    pass"]
        lines += self.fetch_lines("value", "    ")
        lines += self.update_lines("acc", "ts", "    ")
        namespace = dict(self.namespace)
        exec(compile("\n".join(lines), f"<window-aggregations-{name}>", "exec"), namespace)
        function: Callable[[Any, int, Any], None] = namespace[name]
        return function

    # -- accumulators -------------------------------------------------------------------
    def new(self) -> list[Any]:
        """A fresh accumulator (with ``base`` leading zeros)."""
        acc: list[Any] = [0] * self.base
        for spec in self.specs:
            k = spec.kind
            if k is AggKind.COUNT or k is AggKind.SUM:
                acc.append(0)
            elif k is AggKind.AVG:
                acc += [0, 0]
            elif k is AggKind.FIRST or k is AggKind.LAST:
                acc += [None, None]
            elif k in _BY:
                acc += [None, None, None]
            elif k is AggKind.COUNT_DISTINCT:
                acc.append({})
            elif k is AggKind.COLLECT:
                acc.append([])
            else:
                acc.append(None)
        return acc

    def merge(self, target: list[Any], source: list[Any]) -> None:
        """Fold ``source`` into ``target`` (session windows merging)."""
        for spec, i in zip(self.specs, self.slots, strict=True):
            k = spec.kind
            if k in (AggKind.COUNT, AggKind.SUM):
                target[i] += source[i]
            elif k is AggKind.AVG:
                target[i] += source[i]
                target[i + 1] += source[i + 1]
            elif k in (AggKind.MIN, AggKind.MAX):
                a, b = target[i], source[i]
                if b is not None and (
                    a is None
                    or (
                        order_key(b) < order_key(a)
                        if k is AggKind.MIN
                        else order_key(b) > order_key(a)
                    )
                ):
                    target[i] = b
            elif k in (AggKind.FIRST, AggKind.LAST):
                a, b = target[i], source[i]
                if b is not None and (a is None or (b < a if k is AggKind.FIRST else b >= a)):
                    target[i], target[i + 1] = b, source[i + 1]
            elif k in _BY:
                if source[i] is not None and (target[i] is None or _beats(k, source, target, i)):
                    target[i : i + 3] = source[i : i + 3]
            elif k is AggKind.COUNT_DISTINCT:
                target[i].update(source[i])
            else:
                target[i].extend(source[i])

    def result_source(self, acc: str) -> tuple[str, dict[str, Any]]:
        """A dict display of the named outputs of accumulator ``acc``, and its namespace.

        For operators that build results inside their own generated loops (fast.py's
        firing); :attr:`result` is compiled from it. As everywhere here, only the
        aggregation kinds shape the text: the output names enter through the namespace
        (``_N<j>``), so any name is safe.
        """
        items: list[str] = []
        namespace: dict[str, Any] = {"_len": len, "_list": list}
        for j, (spec, i) in enumerate(zip(self.specs, self.slots, strict=True)):
            namespace[f"_N{j}"] = spec.name
            k = spec.kind
            if k is AggKind.AVG:
                expr = f"{acc}[{i}] / {acc}[{i + 1}] if {acc}[{i + 1}] else None"
            elif k in (AggKind.FIRST, AggKind.LAST):
                expr = f"{acc}[{i + 1}]"
            elif k in _BY:
                expr = f"{acc}[{i + 2}]"
            elif k is AggKind.COUNT_DISTINCT:
                expr = f"_len({acc}[{i}])"
            elif k is AggKind.COLLECT:
                expr = f"_list({acc}[{i}])"
            else:
                expr = f"{acc}[{i}]"
            items.append(f"_N{j}: ({expr})")
        return "{" + ", ".join(items) + "}", namespace

    def _compile_result(self) -> Callable[[list[Any]], dict[str, Any]]:
        display, namespace = self.result_source("acc")
        source = "def result(acc):\n    return " + display
        exec(compile(source, "<window-aggregations-result>", "exec"), namespace)
        function: Callable[[list[Any]], dict[str, Any]] = namespace["result"]
        return function

    def of_elements(self, elements: list[list[Any]]) -> dict[str, Any]:
        """The outputs over a window's element list (evictors).

        Bad values were counted (and their records dead-lettered) on arrival.
        """
        acc = self.new()
        fold = self.fold
        for ts, value in elements:
            fold(acc, ts, value)
        return self.result(acc)

    def invalid_counts(self) -> dict[str, int]:
        return {spec.name: n for spec, n in zip(self.specs, self.invalid, strict=True)}
