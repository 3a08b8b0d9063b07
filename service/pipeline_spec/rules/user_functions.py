"""User-function references (``package.module:Name``), as a window's and a keyed process's
rules check them and as their fragments state them."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from service.operators.udf import UdfError, check_allowed, parse_ref
from service.pipeline_spec.rules.base import Loc, Problem

__all__ = ["user_function_pattern", "user_ref"]

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def user_function_pattern(allowed_modules: Sequence[str]) -> str | None:
    """``package.module:Name`` inside an allowed module (None: no module is allowed).

    Identifiers are ASCII here; Python also takes other letters, which no module under an
    allowed package is likely to use.
    """
    if not allowed_modules:
        return None
    modules = "|".join(re.escape(m) for m in allowed_modules)
    return rf"^(?:{modules})(?:\.{_IDENT})*:{_IDENT}(?:\.{_IDENT})*$"


def user_ref(loc: Loc, ref: str, allowed: Sequence[str]) -> Iterator[Problem]:
    """The problem of ``ref`` at ``loc``, if any: not a reference, or not allowed."""
    try:
        module, _ = parse_ref(ref)
        check_allowed(module, allowed)
    except UdfError as exc:
        kind = "function_not_allowed" if "not allowed" in str(exc) else "function_ref_invalid"
        yield Problem(loc, kind, str(exc), ref)
