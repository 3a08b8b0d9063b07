"""Most scenarios run on both the fast path and the general operator: same semantics."""

from __future__ import annotations

import pytest


@pytest.fixture(params=[False, True], ids=["factory", "general"])
def general(request: pytest.FixtureRequest) -> bool:
    value: bool = request.param
    return value
