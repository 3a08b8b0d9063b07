"""The user-code loader: allowlist first, import second."""

from __future__ import annotations

import sys

import pytest

from service.operators.udf import (
    UdfLoadError,
    UdfNotAllowed,
    UdfRefInvalid,
    load_user_object,
    parse_allowed_modules,
)

CANARY = "tests.operators.process.udf_canary"


@pytest.fixture(autouse=True)
def _canary_not_imported() -> None:
    sys.modules.pop(CANARY, None)


def test_os_system_is_refused_when_nothing_is_allowed() -> None:
    with pytest.raises(UdfNotAllowed, match="'os' is not allowed"):
        load_user_object("os:system", [])


def test_os_system_is_refused_when_other_modules_are_allowed() -> None:
    with pytest.raises(UdfNotAllowed, match="allows: examples"):
        load_user_object("os:system", ["examples"])


def test_refused_module_is_never_imported() -> None:
    with pytest.raises(UdfNotAllowed):
        load_user_object(f"{CANARY}:Fn", ["examples"])
    assert CANARY not in sys.modules


def test_listed_prefix_that_is_not_a_parent_package_is_refused() -> None:
    # "tests.operators.process.udf_can" is a string prefix of the canary, not its package.
    with pytest.raises(UdfNotAllowed):
        load_user_object(f"{CANARY}:Fn", ["tests.operators.process.udf_can"])
    assert CANARY not in sys.modules


def test_examples_does_not_allow_examples_evil() -> None:
    with pytest.raises(UdfNotAllowed):
        load_user_object("examples_evil.udf:Fn", ["examples"])
    assert "examples_evil" not in sys.modules


def test_submodule_of_listed_package_loads() -> None:
    obj = load_user_object("examples.udf.fraud:FraudDetector", ["examples"])
    from examples.udf.fraud import FraudDetector

    assert obj is FraudDetector


def test_exactly_listed_module_loads() -> None:
    obj = load_user_object(f"{CANARY}:Fn", [CANARY])
    assert CANARY in sys.modules
    assert obj is sys.modules[CANARY].Fn


@pytest.mark.parametrize(
    "ref",
    ["os.system", "os:", ":system", "os:sys tem", "1os:x", "os..path:x", "class.x:Y", ""],
)
def test_malformed_reference_is_a_typed_error(ref: str) -> None:
    with pytest.raises(UdfRefInvalid):
        load_user_object(ref, ["os"])


def test_missing_attribute_is_a_load_error() -> None:
    with pytest.raises(UdfLoadError, match="no attribute"):
        load_user_object("examples.udf.fraud:Nope", ["examples"])


def test_missing_allowed_module_is_a_load_error() -> None:
    with pytest.raises(UdfLoadError, match="cannot import"):
        load_user_object("examples.udf.does_not_exist:X", ["examples"])


def test_parse_allowed_modules_splits_strips_and_drops_blanks() -> None:
    assert parse_allowed_modules(" examples , acme.fns,,examples ") == ("examples", "acme.fns")


def test_parse_allowed_modules_unset_or_empty_allows_nothing() -> None:
    assert parse_allowed_modules(None) == ()
    assert parse_allowed_modules("  ") == ()


def test_parse_allowed_modules_rejects_a_bad_name() -> None:
    with pytest.raises(UdfRefInvalid, match="acme-fns"):
        parse_allowed_modules("examples,acme-fns")
