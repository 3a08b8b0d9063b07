"""Fixtures of the container tests: the images, built once per content hash.

Every test here is marked ``container`` (its module's ``pytestmark``). They build the
service and compaction images with podman as ``make image`` does
(``deploy/image/build.sh``: a cold build takes minutes, a second run with nothing
changed finds both tags and builds nothing), run them on the host's network against
the suite's Apache Kafka, and remove every container they started. They are skipped,
with the reason, only where podman cannot run at all.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import selected_brokers
from tests.container import podman


@pytest.fixture(scope="session")
def images() -> Iterator[dict[str, str]]:
    """``{"service": ref, "compaction": ref}``; the session's containers are all removed
    at its end, even those a killed test left."""
    reason = podman.unusable_reason()
    if reason is not None:
        pytest.skip(reason)
    try:
        yield podman.build_images()
    finally:
        podman.remove_all()


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest) -> str:
    """The suite's Apache Kafka (started once per session, on loopback: the containers
    reach it over the host's network)."""
    if "kafka" not in selected_brokers(request.config):
        pytest.skip("the container tests run against Apache Kafka, which --brokers leaves out")
    bootstrap: str = request.getfixturevalue("apache_kafka_broker").bootstrap_servers
    return bootstrap
