"""Dotted field paths (used by timestamp, key and punctuated-watermark extraction)."""

from __future__ import annotations

import pytest

from service.core.errors import ConfigError
from service.core.paths import MISSING, compile_path, get_path, split_path


def test_single_part_path_reads_top_level_field() -> None:
    assert get_path({"ts": 5}, "ts") == 5


def test_dotted_path_reads_nested_field() -> None:
    assert get_path({"a": {"b": {"c": 7}}}, "a.b.c") == 7
    assert get_path({"a": {"b": 3}}, "a.b") == 3


def test_absent_field_is_missing_not_none() -> None:
    assert get_path({"a": 1}, "b") is MISSING
    assert get_path({"a": {"x": 1}}, "a.b") is MISSING
    assert get_path({"a": {"b": {}}}, "a.b.c") is MISSING


def test_present_null_field_is_none() -> None:
    assert get_path({"a": None}, "a") is None
    assert get_path({"a": {"b": None}}, "a.b") is None


@pytest.mark.parametrize("value", [[1, 2], "ab", 3, None, {"a": [{"b": 1}]}, {"a": "bx"}])
@pytest.mark.parametrize("dotted", ["a.b", "a.b.c", "a.0"])
def test_non_dict_on_the_way_means_missing(value: object, dotted: str) -> None:
    assert get_path(value, dotted) is MISSING


@pytest.mark.parametrize("value", [[1, 2], "ab", 3, None])
def test_non_dict_payload_has_no_fields(value: object) -> None:
    assert get_path(value, "a") is MISSING


def test_list_is_not_indexed_by_a_numeric_part() -> None:
    assert get_path({"a": [10, 20]}, "a.0") is MISSING


@pytest.mark.parametrize("dotted", ["", ".", "a.", ".a", "a..b"])
def test_empty_part_is_a_config_error(dotted: str) -> None:
    with pytest.raises(ConfigError, match="empty part"):
        compile_path(dotted)


def test_non_string_path_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="must be a string"):
        split_path(3)  # type: ignore[arg-type]


def test_compiled_getter_equals_get_path() -> None:
    value = {"a": {"b": {"c": 1}, "d": 2}, "e": 3}
    for dotted in ["a", "e", "a.d", "a.b.c", "a.b.x", "z.y"]:
        assert compile_path(dotted)(value) == get_path(value, dotted)


def test_missing_is_falsy_and_named() -> None:
    assert not MISSING
    assert repr(MISSING) == "MISSING"


def test_dict_subclass_is_traversed() -> None:
    class Payload(dict[str, object]):
        pass

    assert get_path(Payload(a=Payload(b=4)), "a.b") == 4
    assert get_path(Payload(a=1), "a") == 1
