"""Accumulators that take a row back: a running aggregate over a table source (#50).

A table's row replaced or deleted takes back its old value's contribution before the new
one is added (Flink's retraction, Kafka Streams' adder and subtractor). Which functions
can is the registry's (``aggregate_kinds.py``: ``retracts``); the rules refuse the others
over a table source. Each is exact whatever the sequence of adds and retractions:

- ``count``: the rows; ``sum`` and ``avg``: integers summed as Python ints, floats as an
  exact :class:`~fractions.Fraction` (so taking back ``0.1`` leaves no rounding behind),
  with the count of floats (a sum over integers stays an integer);
- ``min`` and ``max``: the extreme and a value-to-count map (Flink's ``MaxWithRetract``):
  taking back the last copy of the extreme looks for the next in the map;
- ``count_distinct``: a value-to-count map; ``collect``: the list, a value taken back
  removes one occurrence of it (the first).

Values are told apart as ``count_distinct`` tells them, by their canonical JSON text
(:func:`~service.operators.window.aggregations.encode_distinct`). A value a function
cannot take (a string for ``sum``, an object for ``max``) is NULL to it, as with
``on_bad_value: skip``; the operator dead-letters such rows first under ``dead_letter``.

The row's field reads and the update are generated per plan (as the window's
aggregations are), straight-line code for exactly the configured functions. The slots
are plain data but for the Fraction, which :meth:`RetractingPlan.dump` writes
as ``"numerator/denominator"`` and :meth:`RetractingPlan.load` reads back.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import orjson

from service.core.paths import MISSING, compile_path
from service.operators.window.aggregate_kinds import AGGREGATES, AggKind
from service.operators.window.aggregations import AggregationSpec, encode_distinct, order_key
from service.operators.window.errors import WindowConfigError

__all__ = ["RetractingPlan"]

_WIDTH = {AggKind.SUM: 3, AggKind.AVG: 4, AggKind.MIN: 2, AggKind.MAX: 2}
_FRACTION = {AggKind.SUM: 1, AggKind.AVG: 1}
"""The slot (after the function's first) holding an exact Fraction."""


class RetractingPlan:
    """The slots and the add, retract and result of a list of retracting aggregations,
    after ``base`` slots of the operator's own. Plain Python: a table's rows are not the
    window's hot loop, and a retraction is the update run backwards."""

    __slots__ = ("base", "fields", "kinds", "names", "row", "slots", "update", "width")

    def __init__(self, specs: list[AggregationSpec], base: int) -> None:
        for spec in specs:
            if not AGGREGATES[spec.kind].retracts:
                raise WindowConfigError(
                    f"aggregation {spec.name!r}: {spec.kind.value} cannot take a row back, "
                    "so it cannot aggregate a table source"
                )
        self.base = base
        self.kinds = tuple(spec.kind for spec in specs)
        self.names = tuple(spec.name for spec in specs)
        self.fields = tuple(spec.field for spec in specs)
        slots: list[int] = []
        at = base
        for kind in self.kinds:
            slots.append(at)
            at += _WIDTH.get(kind, 1)
        self.slots = tuple(slots)
        self.width = at
        self.row = self._compile_row()
        """``row(value, group)``: the row a table aggregate keeps of ``value``:
        ``[group, *the values the aggregations read]`` (NULL: None)."""
        self.update = self._compile_update()
        """``update(acc, row, sign)``: add ``row`` (``sign`` 1) or take it back (-1)."""

    def _compile_row(self) -> Callable[[Any, str], list[Any]]:
        """``row(value, group)``: ``[group, *the values the aggregations read]`` (NULL:
        None), the fields read by compiled getters."""
        namespace: dict[str, Any] = {"_MISSING": MISSING}
        items = ["group"]
        lines = ["def row(value, group):"]
        for j, name in enumerate(self.fields):
            if name is None:
                items.append("None")
                continue
            namespace[f"_g{j}"] = compile_path(name)
            lines.append(f"    v{j} = _g{j}(value)")
            items.append(f"(None if v{j} is _MISSING else v{j})")
        lines.append(f"    return [{', '.join(items)}]")
        exec(compile("\n".join(lines), "<retracting-row>", "exec"), namespace)
        function: Callable[[Any, str], list[Any]] = namespace["row"]
        return function

    def _compile_update(self) -> Callable[[list[Any], list[Any], int], None]:
        """``update(acc, row, sign)``: the row's values (after its group) added (``sign``
        1) or taken back (-1), straight-line code for these aggregations."""
        namespace: dict[str, Any] = {
            "_int": int,
            "_float": float,
            "_str": str,
            "_Fraction": Fraction,
            "_enc": encode_distinct,
            "_count": _count,
            "_remove_one": _remove_one,
            "_extreme": self._extreme,
            "_MIN": AggKind.MIN,
            "_MAX": AggKind.MAX,
        }
        lines = ["def update(acc, row, sign):", "    pass"]
        for j, (kind, i) in enumerate(zip(self.kinds, self.slots, strict=True)):
            v = f"row[{j + 1}]"
            if kind is AggKind.COUNT:
                lines.append(f"    acc[{i}] += sign")
                continue
            lines += [f"    v = {v}", "    t = v.__class__"]
            if kind is AggKind.SUM or kind is AggKind.AVG:
                count = [f"        acc[{i + 3}] += sign"] if kind is AggKind.AVG else []
                lines += [
                    "    if t is _int:",
                    f"        acc[{i}] += sign * v",
                    *count,
                    "    elif t is _float:",
                    f"        acc[{i + 1}] += sign * _Fraction(v)",
                    f"        acc[{i + 2}] += sign",
                    *count,
                ]
            elif kind is AggKind.MIN or kind is AggKind.MAX:
                which = "_MIN" if kind is AggKind.MIN else "_MAX"
                lines += [
                    "    if t is _int or t is _float or t is _str:",
                    f"        _extreme({which}, acc, {i}, v, sign)",
                ]
            elif kind is AggKind.COUNT_DISTINCT:
                lines += ["    if v is not None:", f"        _count(acc[{i}], _enc(v), sign)"]
            else:  # COLLECT
                lines += [
                    "    if v is not None:",
                    "        if sign > 0:",
                    f"            acc[{i}].append(v)",
                    "        else:",
                    f"            _remove_one(acc[{i}], v)",
                ]
        exec(compile("\n".join(lines), "<retracting-update>", "exec"), namespace)
        function: Callable[[list[Any], list[Any], int], None] = namespace["update"]
        return function

    def initial(self) -> list[Any]:
        """The aggregations' slots of an empty group."""
        out: list[Any] = []
        for kind in self.kinds:
            if kind is AggKind.SUM:
                out += [0, Fraction(0), 0]
            elif kind is AggKind.AVG:
                out += [0, Fraction(0), 0, 0]
            elif kind in (AggKind.MIN, AggKind.MAX):
                out += [None, {}]
            elif kind is AggKind.COUNT_DISTINCT:
                out.append({})
            elif kind is AggKind.COLLECT:
                out.append([])
            else:  # COUNT
                out.append(0)
        return out

    @staticmethod
    def _extreme(kind: AggKind, acc: list[Any], i: int, v: Any, sign: int) -> None:
        counts: dict[str, int] = acc[i + 1]
        left = _count(counts, encode_distinct(v), sign)
        held = acc[i]
        if sign > 0:
            if held is None or (
                order_key(v) < order_key(held)
                if kind is AggKind.MIN
                else order_key(v) > order_key(held)
            ):
                acc[i] = v
        elif left == 0 and held is not None and order_key(v) == order_key(held):
            # the held extreme's last copy (under this text) went: the next from the map
            candidates = [orjson.loads(text) for text in counts]
            pick = min if kind is AggKind.MIN else max
            acc[i] = pick(candidates, key=order_key) if candidates else None

    def result(self, acc: list[Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, kind, i in zip(self.names, self.kinds, self.slots, strict=True):
            if kind is AggKind.SUM:
                out[name] = float(acc[i] + acc[i + 1]) if acc[i + 2] else acc[i]
            elif kind is AggKind.AVG:
                n = acc[i + 3]
                out[name] = float((acc[i] + acc[i + 1]) / n) if n else None
            elif kind is AggKind.COUNT_DISTINCT:
                out[name] = len(acc[i])
            elif kind is AggKind.COLLECT:
                out[name] = list(acc[i])
            else:
                out[name] = acc[i]
        return out

    def dump(self, acc: list[Any]) -> list[Any]:
        """A checkpoint's copy of ``acc``: containers copied, Fractions as text."""
        out = [v.copy() if isinstance(v, list | dict) else v for v in acc]
        for kind, i in zip(self.kinds, self.slots, strict=True):
            if kind in _FRACTION:
                f = acc[i + 1]
                out[i + 1] = f"{f.numerator}/{f.denominator}"
        return out

    def load(self, acc: list[Any]) -> list[Any]:
        """The accumulator :meth:`dump` wrote, in memory again."""
        out = [v.copy() if isinstance(v, list | dict) else v for v in acc]
        for kind, i in zip(self.kinds, self.slots, strict=True):
            if kind in _FRACTION:
                out[i + 1] = Fraction(str(acc[i + 1]))
        return out


def _count(counts: dict[str, int], text: str, sign: int) -> int:
    """Add ``sign`` to ``text``'s count (gone at 0); the count left."""
    left = counts.get(text, 0) + sign
    if left > 0:
        counts[text] = left
    else:
        counts.pop(text, None)
    return left


def _remove_one(values: list[Any], value: Any) -> None:
    """Remove the first of ``values`` equal to ``value`` as JSON (1 is not 1.0, nor True)."""
    text = encode_distinct(value)
    for index, held in enumerate(values):
        if type(held) is type(value) and encode_distinct(held) == text:
            del values[index]
            return
