"""A module the allowlist tests must never import: importing it records the fact."""

from __future__ import annotations

IMPORTED = True


class Fn:
    pass
