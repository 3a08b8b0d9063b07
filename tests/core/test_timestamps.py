"""Timestamp extraction (semantics.md section 2)."""

from __future__ import annotations

from typing import Any

import pytest

from service.core.errors import ConfigError, TimestampError
from service.core.time import MAX_TIMESTAMP
from service.core.timestamps import TimestampExtractor, TimestampFormat, to_millis


def millis(field: str = "ts") -> TimestampExtractor:
    return TimestampExtractor(field, "epoch_millis")


def seconds(field: str = "ts") -> TimestampExtractor:
    return TimestampExtractor(field, "epoch_seconds")


def iso(field: str = "ts") -> TimestampExtractor:
    return TimestampExtractor(field, "iso8601")


def reason(extractor: TimestampExtractor, value: Any, kafka_ts: int | None = None) -> str:
    with pytest.raises(TimestampError) as info:
        extractor.extract(value, kafka_ts)
    assert str(info.value) == info.value.reason
    return info.value.reason


# -- epoch_millis -------------------------------------------------------------------------
def test_epoch_millis_int_is_taken_as_is() -> None:
    assert millis().extract({"ts": 1_700_000_000_123}, None) == 1_700_000_000_123


def test_epoch_millis_negative_int_is_valid() -> None:
    assert millis().extract({"ts": -5}, None) == -5


def test_epoch_millis_float_is_floored() -> None:
    assert millis().extract({"ts": 1.9}, None) == 1
    assert millis().extract({"ts": -1.5}, None) == -2


def test_epoch_millis_digit_string_is_an_int() -> None:
    assert millis().extract({"ts": "1700000000123"}, None) == 1_700_000_000_123


def test_epoch_millis_ignores_the_kafka_timestamp() -> None:
    assert millis().extract({"ts": 10}, 99) == 10


def test_dotted_field_is_read() -> None:
    assert millis("meta.time").extract({"meta": {"time": 42}}, None) == 42


def test_missing_field_is_an_error_naming_it() -> None:
    assert reason(millis(), {"other": 1}) == "missing field 'ts'"
    assert reason(millis("a.b"), {"a": {}}) == "missing field 'a.b'"


def test_payload_that_is_not_an_object_is_an_error() -> None:
    assert reason(millis(), [1, 2]) == "payload is not a JSON object: list"


def test_non_numeric_string_is_not_a_number() -> None:
    assert reason(millis(), {"ts": "abc"}) == "field 'ts' is not a number: 'abc'"


def test_float_string_is_not_a_number() -> None:
    assert reason(millis(), {"ts": "1.5"}) == "field 'ts' is not a number: '1.5'"


def test_bool_is_not_a_number() -> None:
    assert reason(millis(), {"ts": True}) == "field 'ts' is not a number: True"
    assert reason(seconds(), {"ts": False}) == "field 'ts' is not a number: False"


def test_null_is_not_a_number() -> None:
    assert reason(millis(), {"ts": None}) == "field 'ts' is not a number: None"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_float_is_an_error(bad: float) -> None:
    assert "is not a finite number" in reason(millis(), {"ts": bad})


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, 1e30, "99999999999999999999"])
def test_out_of_range_is_an_error(bad: Any) -> None:
    assert "is out of range" in reason(millis(), {"ts": bad})


def test_long_bad_value_is_truncated_in_the_reason() -> None:
    text = reason(millis(), {"ts": "x" * 500})
    assert len(text) < 80
    assert text.endswith("...")


def test_int_subclass_counts_as_an_int() -> None:
    from enum import IntEnum

    class At(IntEnum):
        T = 7

    assert millis().extract({"ts": At.T}, None) == 7


def test_max_timestamp_is_accepted() -> None:
    assert millis().extract({"ts": MAX_TIMESTAMP}, None) == MAX_TIMESTAMP


# -- epoch_seconds ------------------------------------------------------------------------
def test_epoch_seconds_int_is_multiplied() -> None:
    assert seconds().extract({"ts": 1_700_000_000}, None) == 1_700_000_000_000


def test_epoch_seconds_float_keeps_milliseconds_exactly() -> None:
    # 1700000000.123 * 1000 == 1700000000122.9998 in binary floating point
    assert seconds().extract({"ts": 1_700_000_000.123}, None) == 1_700_000_000_123
    assert seconds().extract({"ts": 1.001}, None) == 1001
    assert seconds().extract({"ts": 0.3}, None) == 300


def test_epoch_seconds_float_is_floored() -> None:
    assert seconds().extract({"ts": 1.9999}, None) == 1999
    assert seconds().extract({"ts": 1_700_000_000.1239}, None) == 1_700_000_000_123


def test_epoch_seconds_negative_float_floors_towards_the_past() -> None:
    assert seconds().extract({"ts": -0.0015}, None) == -2
    assert seconds().extract({"ts": -1.5}, None) == -1500


def test_epoch_seconds_microsecond_precision_is_not_snapped() -> None:
    assert seconds().extract({"ts": 1_700_000_000.122999}, None) == 1_700_000_000_122


def test_epoch_seconds_digit_string_is_int_seconds() -> None:
    assert seconds().extract({"ts": "1700000000"}, None) == 1_700_000_000_000


def test_epoch_seconds_out_of_range_is_an_error() -> None:
    assert "is out of range" in reason(seconds(), {"ts": 2**62})
    assert "is out of range" in reason(seconds(), {"ts": 1e17})


# -- iso8601 ------------------------------------------------------------------------------
def test_iso8601_with_z_is_utc() -> None:
    assert iso().extract({"ts": "2023-11-14T22:13:20Z"}, None) == 1_700_000_000_000


def test_iso8601_with_offset_is_converted_to_utc() -> None:
    assert iso().extract({"ts": "2023-11-15T00:13:20.5+02:00"}, None) == 1_700_000_000_500


def test_iso8601_naive_is_utc() -> None:
    assert iso().extract({"ts": "2023-11-14T22:13:20.123"}, None) == 1_700_000_000_123


def test_iso8601_sub_millisecond_digits_are_floored() -> None:
    assert iso().extract({"ts": "1970-01-01T00:00:00.0019999Z"}, None) == 1
    assert iso().extract({"ts": "1969-12-31T23:59:59.9995Z"}, None) == -1


def test_iso8601_date_alone_is_its_midnight() -> None:
    assert iso().extract({"ts": "1970-01-02"}, None) == 86_400_000


def test_iso8601_garbage_is_an_error() -> None:
    expected = "field 'ts' is not an ISO-8601 timestamp: 'yesterday'"
    assert reason(iso(), {"ts": "yesterday"}) == expected


def test_iso8601_number_is_an_error() -> None:
    assert reason(iso(), {"ts": 17}) == "field 'ts' is not an ISO-8601 string: 17"


def test_iso8601_missing_field_is_an_error() -> None:
    assert reason(iso(), {}) == "missing field 'ts'"


# -- kafka --------------------------------------------------------------------------------
def test_kafka_source_uses_the_record_timestamp() -> None:
    extractor = TimestampExtractor(source="kafka")
    assert extractor.extract({"ts": 1}, 1_700_000_000_000) == 1_700_000_000_000
    assert extractor.extract(b"not even json", 5) == 5


def test_kafka_source_without_timestamp_is_an_error() -> None:
    extractor = TimestampExtractor.from_kafka()
    assert reason(extractor, {}, None) == "record has no Kafka timestamp"
    assert reason(extractor, {}, -1) == "record has no Kafka timestamp"


# -- configuration ------------------------------------------------------------------------
def test_unknown_format_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown timestamp format 'nanos'"):
        TimestampExtractor("ts", "nanos")


def test_field_is_required_for_field_source() -> None:
    with pytest.raises(ConfigError, match="field is required"):
        TimestampExtractor()


def test_kafka_source_takes_no_field() -> None:
    with pytest.raises(ConfigError, match="takes no field"):
        TimestampExtractor("ts", source="kafka")


def test_unknown_source_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown timestamp source"):
        TimestampExtractor("ts", source="header")


def test_bad_field_path_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        TimestampExtractor("a..b")


def test_config_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        TimestampExtractor("ts", "nanos")


def test_format_enum_and_string_are_equivalent() -> None:
    a = TimestampExtractor("ts", TimestampFormat.EPOCH_SECONDS)
    b = TimestampExtractor("ts", "epoch_seconds")
    assert a.format is b.format is TimestampFormat.EPOCH_SECONDS
    assert a.extract({"ts": 2}, None) == b.extract({"ts": 2}, None) == 2000
    assert repr(a) == "TimestampExtractor(field='ts', format='epoch_seconds')"


def test_to_millis_converts_one_value() -> None:
    assert to_millis(3, TimestampFormat.EPOCH_SECONDS) == 3000
    with pytest.raises(TimestampError, match="field 'value' is not a number"):
        to_millis([], TimestampFormat.EPOCH_MILLIS)
