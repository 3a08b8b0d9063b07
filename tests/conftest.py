"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from service.runtime.embedded_broker import EmbeddedBroker


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[EmbeddedBroker]:
    """One embedded broker for the test session; tests use their own topic names."""
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture
def bootstrap_servers(kafka_broker: EmbeddedBroker) -> str:
    return kafka_broker.bootstrap_servers
