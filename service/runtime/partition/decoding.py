"""Turning fetched Kafka records into the operator's input records.

Per record: decode the payload (JSON with orjson, inline; Avro and the other formats of
:mod:`service.runtime.formats` a batch at a time, before the loop), take the key (a
payload field or the Kafka key), assign the event time (semantics.md section 2). A
record that fails any step is returned as a :class:`DeadLetter` with a short reason and
the error, never dropped.

This is the per-record path, so :meth:`RecordDecoder.decode` is one loop with the
configuration decided beforehand: no logging, no per-record dispatch on settings, one
tuple per record. The Kafka record itself travels as the input record's ``source``, so
late and failed outputs can forward the original key and value unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import orjson

from service.core.errors import TimestampError
from service.core.paths import MISSING, compile_path, key_text
from service.core.shuffle import position
from service.core.time import MAX_TIMESTAMP, MIN_TIMESTAMP
from service.core.timestamps import TimestampExtractor
from service.operators.base import InputRecord
from service.operators.steps import StepFailed
from service.runtime.definition import PipelineDefinition
from service.runtime.formats.base import FAILED, Failure
from service.runtime.formats.payloads import payload_reader, registry_schemas

_loads = orjson.loads
_MIN = MIN_TIMESTAMP
_MAX = MAX_TIMESTAMP
_JSONDecodeError = orjson.JSONDecodeError


class DeadLetter(NamedTuple):
    """A record that cannot be processed, and why."""

    source: Any
    """The Kafka record (key, value, headers untouched)."""
    key: str | None
    reason: str
    """Short machine-readable reason: ``decode_error``, ``missing_key``, ``bad_timestamp``..."""
    error: str
    """Human-readable detail."""
    headers: tuple[tuple[str, bytes], ...] = ()
    """Extra ``clockwork.*`` headers (a failed step's index)."""


class Decoder(Protocol):
    """Turns fetched records into input records (or dead letters), in order."""

    def decode(
        self, records: Sequence[Any], inputs: list[InputRecord], failed: list[DeadLetter]
    ) -> None: ...


REASON_DECODE = "decode_error"
REASON_MISSING_KEY = "missing_key"
REASON_INVALID_KEY = "invalid_key"
REASON_BAD_TIMESTAMP = "bad_timestamp"
REASON_STEP_FAILED = "step_failed"
HEADER_STEP = "clockwork.step"


_key_text = key_text
"""A payload key as text: strings as they are, numbers as JSON writes them (the one
text a table aggregate's groups are too)."""


def kafka_key(record: Any, missing: str = "record has no Kafka key") -> str | DeadLetter:
    """A record's Kafka key as text, or the dead letter that says why it has none
    (``missing``: the detail for a record without a key)."""
    raw_key = record.key
    if raw_key is None:
        return DeadLetter(record, None, REASON_MISSING_KEY, missing)
    try:
        text: str = raw_key.decode()
    except UnicodeDecodeError:
        return DeadLetter(record, None, REASON_INVALID_KEY, "Kafka key is not UTF-8")
    return text


def build_extractor(definition: PipelineDefinition) -> TimestampExtractor:
    settings = definition.timestamp
    if settings.source == "kafka":
        return TimestampExtractor.from_kafka()
    return TimestampExtractor(settings.field, settings.format)


class RecordDecoder:
    """Decodes one pipeline's records; built once per pipeline, used per batch."""

    __slots__ = (
        "_extract",
        "_fast",
        "_key_getter",
        "_key_name",
        "_payloads",
        "_steps",
        "_table",
        "schemas",
    )

    def __init__(self, definition: PipelineDefinition) -> None:
        self._extract: Callable[[Any, int | None], int] = build_extractor(definition).extract
        self._key_name = definition.key_field
        self._key_getter = compile_path(definition.key_field) if definition.key_field else None
        ts = definition.timestamp
        key = definition.key_field
        # The common shape (top-level key field, top-level epoch-millis timestamp) is
        # decoded inline, two dict lookups per record; anything unusual in a record
        # falls back to the general path for that record, so results are the same.
        self._steps = definition.steps
        self._table = definition.table
        """A table source's rows: a version its filter drops is its primary key's delete."""
        self._payloads = payload_reader(definition.format)
        self.schemas = registry_schemas(self._payloads)
        """The writer schemas by registry id that the source's format reads (None: it
        reads none): whoever decodes a batch first resolves every id it names
        (:meth:`WriterSchemas.missing`) through the registry client."""
        self._fast: tuple[str, str] | None = None
        if (
            key is not None
            and "." not in key
            and ts.source == "field"
            and ts.field is not None
            and "." not in ts.field
            and ts.format == "epoch_millis"
        ):
            self._fast = (key, ts.field)

    def decode(
        self, records: Sequence[Any], inputs: list[InputRecord], failed: list[DeadLetter]
    ) -> None:
        """Append each record of ``records`` to ``inputs`` or, failing, to ``failed``."""
        values: list[Any] | None = None
        if self._payloads is not None:  # not JSON: the format decodes the whole batch
            values = []
            failures: list[Failure] = []
            self._payloads.read(records, values, failures)
            for record, reason, detail in failures:
                failed.append(DeadLetter(record, None, reason, detail))
        if self._steps is not None:
            self._decode_steps(records, values, inputs, failed)
            return
        if self._fast is None:
            self._decode(records, values, inputs, failed)
            return
        key_field, ts_field = self._fast
        append = inputs.append
        if values is not None:
            for record, value in zip(records, values, strict=True):
                if value is FAILED:
                    continue
                try:
                    key = value[key_field]
                    timestamp = value[ts_field]
                except Exception:  # not a record, a field missing: the slow path
                    self._finish(record, value, record.offset, inputs, failed)
                    continue
                if type(key) is str and type(timestamp) is int and _MIN <= timestamp <= _MAX:
                    append((key, timestamp, value, record.offset, record))
                else:
                    self._finish(record, value, record.offset, inputs, failed)
            return
        loads = _loads
        for record in records:
            try:
                value = loads(record.value)
                key = value[key_field]
                timestamp = value[ts_field]
            except Exception:  # not JSON, not an object, a field missing: the slow path
                self._decode((record,), None, inputs, failed)
                continue
            if type(key) is str and type(timestamp) is int and _MIN <= timestamp <= _MAX:
                append((key, timestamp, value, record.offset, record))
            else:
                self._decode((record,), None, inputs, failed)

    def _decode(
        self,
        records: Sequence[Any],
        values: list[Any] | None,
        inputs: list[InputRecord],
        failed: list[DeadLetter],
    ) -> None:
        """``values``: the records' values decoded by their format; None: JSON."""
        finish = self._finish
        if values is not None:
            for record, value in zip(records, values, strict=True):
                if value is not FAILED:
                    finish(record, value, record.offset, inputs, failed)
            return
        loads = _loads
        for record in records:
            try:
                value = loads(record.value)
            except _JSONDecodeError as exc:
                failed.append(DeadLetter(record, None, REASON_DECODE, str(exc)))
                continue
            except TypeError:  # a null value (tombstone)
                failed.append(DeadLetter(record, None, REASON_DECODE, "record has no value"))
                continue
            finish(record, value, record.offset, inputs, failed)

    def _decode_steps(
        self,
        records: Sequence[Any],
        values: list[Any] | None,
        inputs: list[InputRecord],
        failed: list[DeadLetter],
    ) -> None:
        """With steps: decode, run the steps, then key and timestamp each record they give.

        Without an unnest, an input record's position is its offset, as without steps;
        with one, every record a source record becomes has ``position(offset, index)``
        (its index among them), so ids made from positions stay distinct and the same on
        every replay. ``values``: as in :meth:`_decode`.
        """
        steps = self._steps
        assert steps is not None
        run_one = steps.run_one
        run_many = steps.run_many
        finish = self._finish
        loads = _loads
        append = inputs.append
        key_field, ts_field = self._fast if self._fast is not None else ("", "")
        fast = self._fast is not None
        for index, record in enumerate(records):
            if values is not None:
                value = values[index]
                if value is FAILED:
                    continue
            else:
                try:
                    value = loads(record.value)
                except _JSONDecodeError as exc:
                    failed.append(DeadLetter(record, None, REASON_DECODE, str(exc)))
                    continue
                except TypeError:  # a null value (tombstone)
                    failed.append(DeadLetter(record, None, REASON_DECODE, "record has no value"))
                    continue
            if type(value) is not dict:
                detail = f"payload is not a JSON object: {type(value).__name__}"
                failed.append(DeadLetter(record, None, REASON_DECODE, detail))
                continue
            try:
                if run_one is not None:
                    out = run_one(value)
                    if out is None:
                        if self._table:
                            self._dropped(record, value, inputs, failed)
                        continue
                    if fast:  # the common shape, inline as in decode()
                        key = out.get(key_field)
                        timestamp = out.get(ts_field)
                        if (
                            type(key) is str
                            and type(timestamp) is int
                            and _MIN <= timestamp <= _MAX
                        ):
                            append((key, timestamp, out, record.offset, record))
                            continue
                    finish(record, out, record.offset, inputs, failed)
                    continue
                outputs = run_many(value)
            except StepFailed as exc:
                failed.append(
                    DeadLetter(
                        record,
                        None,
                        REASON_STEP_FAILED,
                        exc.message,
                        ((HEADER_STEP, str(exc.index).encode()),),
                    )
                )
                continue
            offset = record.offset
            for at, out in enumerate(outputs):
                finish(record, out, position(offset, at), inputs, failed)

    def _dropped(
        self, record: Any, value: Any, inputs: list[InputRecord], failed: list[DeadLetter]
    ) -> None:
        """A table's version its filter dropped: the row is not in the filtered table, so
        the version is its primary key's delete (a tombstone: the value None), at the
        version's event time (the Kafka timestamp if it has none). Whoever reads the
        table takes the previous version back if it passed, and ignores the delete of a
        row it does not hold."""
        key = kafka_key(record, "a table's row without a Kafka key")
        if isinstance(key, DeadLetter):
            failed.append(key)
            return
        try:
            timestamp = self._extract(value, record.timestamp)
        except TimestampError:
            timestamp = record.timestamp
        inputs.append((key, timestamp, None, record.offset, record))

    def _finish(
        self,
        record: Any,
        value: Any,
        at: int,
        inputs: list[InputRecord],
        failed: list[DeadLetter],
    ) -> None:
        """Key and timestamp one decoded (and stepped) value, at position ``at``."""
        get_key = self._key_getter
        key: str | None
        if get_key is None:
            found = kafka_key(record)
            if isinstance(found, DeadLetter):
                failed.append(found)
                return
            key = found
        else:
            raw = get_key(value)
            key = raw if type(raw) is str else self._other_key(raw)
            if key is None:
                reason, detail = self._key_problem(value, raw)
                failed.append(DeadLetter(record, None, reason, detail))
                return
        try:
            timestamp = self._extract(value, record.timestamp)
        except TimestampError as exc:
            failed.append(DeadLetter(record, key, REASON_BAD_TIMESTAMP, exc.reason))
            return
        inputs.append((key, timestamp, value, at, record))

    @staticmethod
    def _other_key(raw: Any) -> str | None:
        if raw is MISSING or raw is None:
            return None
        return _key_text(raw)

    def _key_problem(self, value: Any, raw: Any) -> tuple[str, str]:
        if not isinstance(value, dict):
            return REASON_DECODE, f"payload is not a JSON object: {type(value).__name__}"
        if raw is MISSING or raw is None:
            return REASON_MISSING_KEY, f"missing key field {self._key_name!r}"
        return REASON_INVALID_KEY, f"key field {self._key_name!r} is a {type(raw).__name__}"


class TableDecoder:
    """A versioned table's records (a temporal or lookup join's right input, a table
    source's rows, ``source.changelog: "upsert"``): a record with a null
    value is a tombstone, its Kafka key deleted from its Kafka timestamp on, and decodes
    to the value None; every other record as the input's own decoder says (a table
    source's version its filter drops decodes to None too: :meth:`RecordDecoder._dropped`)."""

    __slots__ = ("_inner", "_positioned")

    def __init__(self, inner: RecordDecoder, positioned: bool) -> None:
        self._inner = inner
        self._positioned = positioned
        """Positions are ``position(offset, index)`` (steps with an unnest)."""

    def decode(
        self, records: Sequence[Any], inputs: list[InputRecord], failed: list[DeadLetter]
    ) -> None:
        start = 0
        for index, record in enumerate(records):
            if record.value is not None:
                continue
            if index > start:
                self._inner.decode(records[start:index], inputs, failed)
            start = index + 1
            key = kafka_key(record, "tombstone without key")
            if isinstance(key, DeadLetter):
                failed.append(key)
                continue
            at = position(record.offset) if self._positioned else record.offset
            inputs.append((key, record.timestamp, None, at, record))
        if start == 0:
            self._inner.decode(records, inputs, failed)
        elif start < len(records):
            self._inner.decode(records[start:], inputs, failed)
