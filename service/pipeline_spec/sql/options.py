"""``WITH (name = value, ...)`` and ``SET name = value``: option values as Python values,
and durations in milliseconds.

A duration is written as SQL writes one, ``INTERVAL '30' SECOND`` (sqlglot turns it into
``INTERVAL '30 SECOND'``), or as a string (``'30 seconds'``, ``'500 ms'``), or as a
number of milliseconds. Only the fixed units: a month is not a fixed number of ms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp

from service.runtime.formats.registry import FORMAT_NAMES

__all__ = ["Option", "OptionError", "duration_ms", "format_of", "options_of", "scalar"]

_FORMAT_ALIASES = {
    "avro-confluent": "avro",
    "protobuf-confluent": "protobuf",
    "json-schema": "json_schema",
}
"""Flink's and Confluent's names of the registry formats."""

_UNIT_MS = {
    "MILLISECOND": 1,
    "MS": 1,
    "SECOND": 1000,
    "S": 1000,
    "SEC": 1000,
    "MINUTE": 60_000,
    "MIN": 60_000,
    "M": 60_000,
    "HOUR": 3_600_000,
    "H": 3_600_000,
    "DAY": 86_400_000,
    "D": 86_400_000,
}
_DURATION = re.compile(r"^\s*(-?\d+)\s*([A-Za-z]+)?\s*$")


class OptionError(ValueError):
    """A value that is not what its option takes (the message says what it takes)."""


@dataclass(frozen=True, slots=True)
class Option:
    """One ``name = value`` of a ``WITH`` list, with its value's node (for positions)."""

    name: str
    node: exp.Expression


def options_of(properties: exp.Expression | None) -> list[Option]:
    """The ``name = value`` pairs of a ``WITH (...)`` list, in the order written.

    sqlglot reads a few names as properties of their own (``partitioned_by`` is a
    ``PartitionedByProperty``, ``format`` a ``FileFormatProperty``); they are named back
    here."""
    found: list[Option] = []
    if properties is None:
        return found
    for prop in properties.expressions:
        if isinstance(prop, exp.PartitionedByProperty):  # a Property subclass: first
            if isinstance(prop.this, exp.Expression):
                found.append(Option("partitioned_by", prop.this))
        elif isinstance(prop, exp.FileFormatProperty):  # ``format = ...``: also one
            if isinstance(prop.this, exp.Expression):
                found.append(Option("format", prop.this))
        elif isinstance(prop, exp.Property):
            name = prop.name if isinstance(prop.this, exp.Expression) else str(prop.this)
            value = prop.args.get("value")
            if isinstance(value, exp.Expression):
                found.append(Option(name.lower(), value))
        elif isinstance(prop, exp.Expression):
            found.append(Option(type(prop).__name__, prop))
    return found


def scalar(node: exp.Expression) -> str | int | float | bool:
    """A literal option value: a string, a number or a boolean (an identifier counts as
    its name, so ``start_from = earliest`` reads like ``'earliest'``)."""
    if isinstance(node, exp.Literal):
        if node.is_string:
            return str(node.this)
        number = float(node.this)
        return int(number) if number.is_integer() and abs(number) < 2**53 else number
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        value = scalar(node.this)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Column | exp.Identifier | exp.Var):
        return node.name
    raise OptionError("a literal: a string, a number or TRUE/FALSE")


def duration_ms(node: exp.Expression) -> int:
    """A duration in milliseconds: ``INTERVAL '2' SECOND``, ``'2 seconds'`` or ``2000``."""
    if isinstance(node, exp.Interval):
        amount = node.this
        unit = node.args.get("unit")
        text = amount.name if isinstance(amount, exp.Expression) else ""
        if isinstance(unit, exp.Expression):
            text = f"{text} {unit.name}"
        return _parse_duration(text)
    value = scalar(node)
    if isinstance(value, bool | float):
        raise OptionError("a duration: INTERVAL '30' SECOND, '30 seconds' or milliseconds")
    if isinstance(value, int):
        return value
    return _parse_duration(value)


def _parse_duration(text: str) -> int:
    match = _DURATION.match(text)
    if match is None:
        raise OptionError(
            f"a duration such as INTERVAL '30' SECOND or '500 ms', not {text.strip()!r}"
        )
    amount, unit = int(match.group(1)), (match.group(2) or "MS").upper()
    if unit.endswith("S") and unit not in _UNIT_MS:
        unit = unit[:-1]
    if unit.endswith("SECONDS"):
        unit = unit[:-1]
    if unit not in _UNIT_MS:
        raise OptionError(
            f"unit {match.group(2)!r}: a duration is in MILLISECOND, SECOND, MINUTE, HOUR or "
            "DAY (a month or year has no fixed length)"
        )
    return amount * _UNIT_MS[unit]


def format_of(node: exp.Expression) -> str:
    """A ``format`` option's value: a format's name (:data:`FORMAT_NAMES`) or Flink's name
    of one."""
    value = scalar(node)
    text = value.lower() if isinstance(value, str) else ""
    text = _FORMAT_ALIASES.get(text, text)
    if text not in FORMAT_NAMES:
        raise OptionError(" or ".join(repr(f) for f in FORMAT_NAMES) + " (docs/formats.md)")
    return text
