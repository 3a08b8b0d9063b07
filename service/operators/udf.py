"""Loading user code by reference, only from modules the operator of the service allowed.

A reference is ``"package.module:Name"`` (``Name`` may be dotted: ``"pkg.mod:Outer.Inner"``).
The allowlist (``SERVICE_UDF_MODULES``, parsed by the runtime with
:func:`parse_allowed_modules`) lists modules and packages: a reference is allowed when
its module *is* a listed entry or a submodule of one (``"examples"`` allows
``"examples.udf.fraud"`` but not ``"examples_evil"``).

Why the order of checks matters: importing a module runs its top-level code, so the
reference is parsed and checked against the allowlist *before* anything is imported;
``"os:system"`` is refused without touching the import system. This module is generic
(no knowledge of process or window functions); callers check what they got.
"""

from __future__ import annotations

import importlib
import keyword
from collections.abc import Sequence

__all__ = [
    "UdfError",
    "UdfLoadError",
    "UdfNotAllowed",
    "UdfRefInvalid",
    "check_allowed",
    "load_user_object",
    "parse_allowed_modules",
    "parse_ref",
]


class UdfError(Exception):
    """Base class of every error about user code references."""


class UdfRefInvalid(UdfError, ValueError):
    """The reference (or an allowlist entry) is not of the form ``package.module:Name``."""


class UdfNotAllowed(UdfError):
    """The reference names a module outside the allowlist; nothing was imported."""


class UdfLoadError(UdfError):
    """An allowed module could not be imported, or it has no such attribute."""


def _is_dotted_name(text: str) -> bool:
    parts = text.split(".")
    return all(part.isidentifier() and not keyword.iskeyword(part) for part in parts)


def parse_ref(ref: str) -> tuple[str, str]:
    """Split ``"package.module:Name"`` into ``(module, attribute path)``; pure, no imports."""
    if not isinstance(ref, str):
        raise UdfRefInvalid(f"a user function reference must be a string, got {type(ref).__name__}")
    module, sep, attr = ref.strip().partition(":")
    if not sep or not module or not attr:
        raise UdfRefInvalid(
            f"invalid user function reference {ref!r}: expected 'package.module:Name'"
        )
    if not _is_dotted_name(module):
        raise UdfRefInvalid(f"invalid module name {module!r} in reference {ref!r}")
    if not _is_dotted_name(attr):
        raise UdfRefInvalid(f"invalid attribute name {attr!r} in reference {ref!r}")
    return module, attr


def parse_allowed_modules(env_value: str | None) -> tuple[str, ...]:
    """Parse ``SERVICE_UDF_MODULES`` (comma-separated module names; unset or empty: none).

    Blank items are ignored; an item that is not a dotted module name raises
    :class:`UdfRefInvalid`, so a typo in the configuration fails at start-up rather than
    silently refusing every function.
    """
    if env_value is None:
        return ()
    allowed: list[str] = []
    for item in env_value.split(","):
        name = item.strip()
        if not name:
            continue
        if not _is_dotted_name(name):
            raise UdfRefInvalid(f"invalid module name {name!r} in SERVICE_UDF_MODULES")
        if name not in allowed:
            allowed.append(name)
    return tuple(allowed)


def check_allowed(module: str, allowed_modules: Sequence[str]) -> None:
    """Raise :class:`UdfNotAllowed` unless ``module`` is listed or inside a listed package."""
    for entry in allowed_modules:
        if module == entry or module.startswith(entry + "."):
            return
    listed = ", ".join(allowed_modules) if allowed_modules else "none"
    raise UdfNotAllowed(
        f"module {module!r} is not allowed for user functions "
        f"(SERVICE_UDF_MODULES allows: {listed})"
    )


def load_user_object(ref: str, allowed_modules: Sequence[str]) -> object:
    """Import ``"package.module:Name"`` and return ``Name``, if the module is allowed.

    Raises :class:`UdfRefInvalid` for a malformed reference and :class:`UdfNotAllowed`
    for a module outside the allowlist, both before any import; :class:`UdfLoadError`
    when the allowed module fails to import or lacks the attribute.
    """
    module_name, attr_path = parse_ref(ref)
    check_allowed(module_name, allowed_modules)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UdfLoadError(f"cannot import module {module_name!r} for {ref!r}: {exc}") from exc
    except Exception as exc:  # user code at import time may raise anything
        raise UdfLoadError(
            f"importing module {module_name!r} for {ref!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    obj: object = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise UdfLoadError(f"{module_name!r} has no attribute {attr_path!r} ({ref!r})") from exc
    return obj
