"""Fixtures of the compose test (marker ``compose``, run by ``make compose-test`` and
left out of everything else: ``--compose`` selects it, tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.compose import compose
from tests.container import podman


@pytest.fixture(scope="session")
def stack() -> Iterator[None]:
    """docker-compose.yml up under podman for the session, torn down at its end."""
    reason = podman.unusable_reason()
    if reason is not None:
        pytest.skip(reason)
    if compose.podman_compose() is None:
        pytest.skip("podman-compose is not installed (make compose-test installs it)")
    compose.build_all()
    with compose.running_stack():
        yield
