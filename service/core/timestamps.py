"""Timestamp extraction: one event time per record, assigned at the source.

semantics.md section 2. A record's timestamp comes from the Kafka record timestamp or
from a payload field (a dotted path) in one of three formats. Everything is decided
when the pipeline is built; :meth:`TimestampExtractor.extract` is then one getter and
one conversion per record. A record whose timestamp is missing or unparsable raises
:class:`TimestampError` with a short reason; the runtime dead-letters it (never drops it
silently).

Conversion rules (every result is an int of epoch milliseconds in [MIN, MAX]):

- ``epoch_millis``: an int is taken as is. A float is floored to the millisecond. A
  string of decimal digits (how protobuf's JSON mapping writes int64) is accepted as an
  int. ``bool`` is not a number.
- ``epoch_seconds``: int or float seconds times 1000, **floored** (as Java's
  ``Instant.toEpochMilli``): ``1.9999`` is ``1999``, ``-0.0015`` is ``-2``. Because
  ``1700000000.123 * 1000`` is ``1700000000122.9998`` in binary floating point, a
  product within float resolution (relative ``2**-51``) below an integer is snapped up
  to it first; a float cannot carry sub-microsecond precision at today's epoch anyway.
  Decimal-digit strings are accepted as int seconds.
- ``iso8601``: a string ``datetime.fromisoformat`` accepts (Python 3.11: ``Z``,
  offsets, basic and extended forms, a date alone is its midnight). With an offset it is
  converted to UTC; without one (naive) it **is** UTC. Sub-millisecond digits are
  floored.
- ``kafka``: the record timestamp as given; ``None`` or ``-1`` (Kafka's "no
  timestamp") is missing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from service.core.errors import ConfigError, TimestampError
from service.core.paths import MISSING, PathGetter, compile_path
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP

__all__ = ["KAFKA_SOURCE", "TimestampError", "TimestampExtractor", "TimestampFormat", "to_millis"]


class TimestampFormat(StrEnum):
    """How a payload field encodes its timestamp."""

    EPOCH_MILLIS = "epoch_millis"
    EPOCH_SECONDS = "epoch_seconds"
    ISO8601 = "iso8601"


KAFKA_SOURCE = "kafka"
"""``source`` value that takes the Kafka record timestamp instead of a payload field."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
_DIGITS = re.compile(r"[+-]?[0-9]{1,20}")
_SNAP = 2.0**-51
_REPR_LIMIT = 40


Extract = Callable[[Any, "int | None"], int]


def _show(raw: Any) -> str:
    text = repr(raw)
    if len(text) > _REPR_LIMIT:
        text = text[: _REPR_LIMIT - 3] + "..."
    return text


def _floor_float(product: float) -> int:
    """Floor ``product``, snapping float noise just below an integer up to it."""
    floor = math.floor(product)
    if product - floor > 1.0 - abs(product) * _SNAP:
        floor += 1
    return floor


def to_millis(raw: Any, fmt: TimestampFormat, name: str = "value") -> int:
    """Convert one raw field value to epoch milliseconds; TimestampError if it cannot."""
    kind = type(raw)
    if fmt is TimestampFormat.ISO8601:
        if kind is not str:
            raise TimestampError(f"field {name!r} is not an ISO-8601 string: {_show(raw)}")
        try:
            parsed = datetime.fromisoformat(raw)
        except ValueError:
            raise TimestampError(
                f"field {name!r} is not an ISO-8601 timestamp: {_show(raw)}"
            ) from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return (parsed - _EPOCH) // _ONE_MS
    scale = 1000 if fmt is TimestampFormat.EPOCH_SECONDS else 1
    if kind is int:
        millis: int = raw * scale
    elif kind is float:
        if not math.isfinite(raw):
            raise TimestampError(f"field {name!r} is not a finite number: {_show(raw)}")
        if abs(raw) * scale >= 2.0**63:
            raise TimestampError(f"field {name!r} is out of range: {_show(raw)}")
        millis = _floor_float(raw * scale)
    elif (kind is str and _DIGITS.fullmatch(raw)) or (
        isinstance(raw, int) and not isinstance(raw, bool)  # int subclasses (IntEnum...)
    ):
        millis = int(raw) * scale
    else:
        raise TimestampError(f"field {name!r} is not a number: {_show(raw)}")
    if millis > MAX_TIMESTAMP or millis < MIN_TIMESTAMP:
        raise TimestampError(f"field {name!r} is out of range: {_show(raw)}")
    return millis


class TimestampExtractor:
    """Assigns a record its event time: ``extract(value, kafka_timestamp) -> int``.

    Build it from ``field`` and ``format`` (a payload field), or with
    ``source="kafka"`` (the Kafka record timestamp). ``value`` is the decoded payload;
    ``kafka_timestamp`` is the record's timestamp or None. Raises TimestampError with a
    short reason when the timestamp is missing or unparsable.

    ``extract`` is an instance attribute chosen at construction (one closure per
    source/format), so the per-record call has no dispatch on the configuration.
    """

    __slots__ = ("extract", "field", "format", "source")

    extract: Extract
    field: str | None
    format: TimestampFormat | None
    source: str

    def __init__(
        self,
        field: str | None = None,
        format: TimestampFormat | str = TimestampFormat.EPOCH_MILLIS,
        *,
        source: str = "field",
    ) -> None:
        if source == KAFKA_SOURCE:
            if field is not None:
                raise ConfigError("timestamp source 'kafka' takes no field")
            self.field = None
            self.format = None
            self.source = KAFKA_SOURCE
            self.extract = _extract_kafka
            return
        if source != "field":
            raise ConfigError(f"unknown timestamp source {source!r} (expected 'field' or 'kafka')")
        if field is None:
            raise ConfigError("a timestamp field is required unless the source is 'kafka'")
        try:
            fmt = TimestampFormat(format)
        except ValueError:
            choices = ", ".join(f.value for f in TimestampFormat)
            raise ConfigError(f"unknown timestamp format {format!r} (expected {choices})") from None
        self.field = field
        self.format = fmt
        self.source = "field"
        self.extract = _field_extractor(compile_path(field), field, fmt)

    @classmethod
    def from_kafka(cls) -> TimestampExtractor:
        """An extractor that takes the Kafka record timestamp."""
        return cls(source=KAFKA_SOURCE)

    def __repr__(self) -> str:
        if self.source == KAFKA_SOURCE:
            return "TimestampExtractor(source='kafka')"
        return f"TimestampExtractor(field={self.field!r}, format={str(self.format)!r})"


def _extract_kafka(value: Any, kafka_timestamp: int | None) -> int:
    if kafka_timestamp is None or kafka_timestamp == -1:
        raise TimestampError("record has no Kafka timestamp")
    return kafka_timestamp


def _field_extractor(get: PathGetter, name: str, fmt: TimestampFormat) -> Extract:
    def missing(value: Any) -> TimestampError:
        if not isinstance(value, dict):
            return TimestampError(f"payload is not a JSON object: {type(value).__name__}")
        return TimestampError(f"missing field {name!r}")

    if fmt is TimestampFormat.EPOCH_MILLIS:
        # The common case: an int field taken as is, with no call beyond the getter.
        def extract_millis(value: Any, kafka_timestamp: int | None) -> int:
            raw = get(value)
            if type(raw) is int and MIN_TIMESTAMP <= raw <= MAX_TIMESTAMP:
                return raw
            if raw is MISSING:
                raise missing(value)
            return to_millis(raw, fmt, name)

        return extract_millis

    def extract_other(value: Any, kafka_timestamp: int | None) -> int:
        raw = get(value)
        if raw is MISSING:
            raise missing(value)
        return to_millis(raw, fmt, name)

    return extract_other
