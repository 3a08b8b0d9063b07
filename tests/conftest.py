"""Fixtures shared by the whole suite: the brokers every integration test runs against.

A test that takes ``bootstrap_servers`` (or ``kafka_broker``) runs once per broker:
``test_x[tansu]`` on the embedded broker and ``test_x[kafka]`` on Apache Kafka 4 (one
KRaft node from its Maven Central jars, ``tests/kafka/kafka_broker.py``). Each
broker is started once per session, when the first test needs it, and stopped at the
end; tests use their own topic names.

A test that needs what one broker lacks says so with
``@pytest.mark.requires_broker("feature", ...)``: it is skipped on the brokers that lack
a feature, with the reason from :data:`MISSING_FEATURES` (a feature that is not in the
table is an error, so a typo cannot skip silently). ``--brokers tansu`` (or
``CLOCKWORK_TEST_BROKERS=tansu``) runs one broker only, e.g. where Java is missing.

Hypothesis runs under :data:`DERANDOMIZED` unless pytest is given another profile
(``make fuzz`` gives ``--hypothesis-profile=fuzz --hypothesis-seed=N``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, Protocol

import pytest
from hypothesis import HealthCheck, settings

from service.runtime.kafka.embedded_broker import EmbeddedBroker
from tests.integration.secure_kafka import Pki, make_pki, mtls_broker, sasl_ssl_broker
from tests.kafka.kafka_broker import KafkaBroker
from tests.registry.apicurio_registry import ApicurioRegistry

# The same code gets the same verdict: `make test` runs every property on the examples a
# fixed seed per test derives (Hypothesis's own "ci" profile, here without needing CI
# set), with no example database (a local .hypothesis/ would replay what an earlier run
# found) and nothing timed (a deadline or the too-slow health check fails on a loaded
# machine, not on a wrong answer). The random search is `make fuzz`'s, with a seed it
# prints; a failure it finds is reproduced with that seed. A test's own @settings
# (max_examples) applies over either profile.
DERANDOMIZED = "derandomized"
FUZZ = "fuzz"
_UNTIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile(
    DERANDOMIZED, derandomize=True, database=None, print_blob=True, **_UNTIMED
)
settings.register_profile(FUZZ, derandomize=False, database=None, print_blob=True, **_UNTIMED)
settings.load_profile(DERANDOMIZED)

BROKERS = ("tansu", "kafka")

MISSING_FEATURES: dict[str, dict[str, str]] = {
    "tansu": {
        "compaction": "Tansu never compacts a compacted topic (it keeps every record)",
        "transactions": (
            "Tansu has no working transactions (aiokafka's transactional producer fails at "
            "InitProducerId; aborted records stay visible to read_committed readers)"
        ),
        "delete_records": "Tansu drops the connection on DeleteRecords",
        "list_offsets": (
            "Tansu's ListOffsets answers the last batch's base offset + 1 and uses the "
            "broker's receive time for offsets_for_times"
        ),
        "idempotent_producer": "Tansu fails aiokafka's idempotent producer at InitProducerId",
        "create_partitions": (
            "Tansu does not list CreatePartitions in ApiVersions (aiokafka refuses to send it)"
        ),
        "flink_kafka_source": (
            "Flink's Kafka source does not run against Tansu (it read 4 of 20,000 records "
            "and finished)"
        ),
    },
    "kafka": {
        "stores_corrupt_batches": (
            "Apache Kafka checks every batch's CRC on produce and refuses a corrupt one "
            "(CORRUPT_MESSAGE), so no corrupt batch can be fetched from it"
        ),
    },
}
"""Per broker, the features it lacks, each with the reason a test needing it is skipped.
See ``shared/design/embedded-broker.md`` for Tansu's gaps."""

FEATURES = frozenset(f for missing in MISSING_FEATURES.values() for f in missing)


class Broker(Protocol):
    """What the tests use of a broker: where it listens."""

    @property
    def bootstrap_servers(self) -> str: ...


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--brokers",
        default=os.environ.get("CLOCKWORK_TEST_BROKERS", ",".join(BROKERS)),
        help="comma-separated brokers the integration tests run against "
        f"(default: {','.join(BROKERS)}; env CLOCKWORK_TEST_BROKERS)",
    )
    parser.addoption(
        "--compose",
        action="store_true",
        help="run the tests marked compose (docker-compose.yml whole under podman, "
        "make compose-test); without it they are deselected",
    )
    parser.addoption(
        "--soak",
        action="store_true",
        help="run the tests marked soak (long sweeps and soaks, make soak); without it "
        "they are deselected",
    )


def selected_brokers(config: pytest.Config) -> list[str]:
    names = [n.strip() for n in str(config.getoption("--brokers")).split(",") if n.strip()]
    unknown = sorted(set(names) - set(BROKERS))
    if unknown or not names:
        raise pytest.UsageError(f"--brokers: choose from {', '.join(BROKERS)}, not {unknown}")
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that (directly or through a fixture) uses ``broker_name`` runs once per
    selected broker; session scope, so each broker serves all its tests in one go."""
    if "broker_name" in metafunc.fixturenames:
        metafunc.parametrize(
            "broker_name", selected_brokers(metafunc.config), indirect=True, scope="session"
        )


ONE_WORKER_GROUPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "spark": ("spark", ("tests/compaction/",)),
    "container": ("images", ("tests/container/",)),
    "flink": (
        "flink",
        tuple(
            f"tests/integration/test_{name}.py"
            for name in ("nexmark_flink", "sql_flink", "top_n_flink", "updating_flink")
        ),
    ),
}
"""Groups of tests that run in one pytest-xdist worker (``make test`` runs two): one
image build, one Spark and one Flink JVM per run, not one per worker. Each group: the
session fixture that starts the server, and the paths of its tests (the controller
schedules by node id, before any fixture is known; a test elsewhere that uses the
fixture is refused at collection). Every other test is scheduled alone; each worker
starts the brokers its tests use."""


def one_worker_group(nodeid: str) -> str | None:
    """The :data:`ONE_WORKER_GROUPS` group of the test ``nodeid``, if any."""
    for group, (_, paths) in ONE_WORKER_GROUPS.items():
        if nodeid.startswith(paths):
            return group
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: :data:`ONE_WORKER_GROUPS` (xdist's own ``xdist_group``
    marks do not group on pytest 9: xdist 3.8 renames ``item._nodeid``, which pytest 9
    no longer reads)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerGroups(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return one_worker_group(nodeid) or nodeid

    return OneWorkerGroups(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # docker-compose.yml under podman is make compose-test's, long sweeps and soaks make
    # soak's, not make test's.
    for marker in ("compose", "soak"):
        if config.getoption(f"--{marker}"):
            continue
        deselected = [item for item in items if item.get_closest_marker(marker)]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = [item for item in items if not item.get_closest_marker(marker)]
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        fixtures = [f for f in getattr(item, "fixturenames", ()) if f not in params]
        for group, (fixture, paths) in ONE_WORKER_GROUPS.items():
            if fixture in fixtures and not item.nodeid.startswith(paths):
                raise pytest.UsageError(
                    f"{item.nodeid} uses the {fixture} fixture: list its file in "
                    f"ONE_WORKER_GROUPS[{group!r}] (tests/conftest.py)"
                )
        broker = params.get("broker_name")
        for marker in item.iter_markers("requires_broker"):
            unknown = sorted(set(marker.args) - FEATURES)
            if unknown or not marker.args:
                raise pytest.UsageError(
                    f"{item.nodeid}: requires_broker({unknown or ''}): "
                    f"name features from {sorted(FEATURES)}"
                )
            if broker is None:
                continue
            missing = [f for f in marker.args if f in MISSING_FEATURES[broker]]
            if missing:
                reasons = "; ".join(MISSING_FEATURES[broker][f] for f in missing)
                item.add_marker(pytest.mark.skip(reason=f"{broker} lacks {missing}: {reasons}"))


@pytest.fixture(scope="session")
def broker_name(request: pytest.FixtureRequest) -> str:
    """``tansu`` or ``kafka``: the broker this test instance runs against."""
    name: str = request.param
    return name


@pytest.fixture(scope="session")
def tansu_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def apache_kafka_broker() -> Iterator[KafkaBroker]:
    yield from discarded_at_the_end(KafkaBroker())


def discarded_at_the_end(broker: KafkaBroker) -> Iterator[KafkaBroker]:
    """``broker`` started, then discarded (killed, its directory removed) at the fixture's
    end: no clean shutdown to wait for, nothing reads its logs again."""
    broker.start()
    try:
        yield broker
    finally:
        broker.discard()


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[ApicurioRegistry]:
    """Apicurio Registry (tests/registry/), shared by every test that uses it: each
    registers its own subjects, so they do not meet."""
    with ApicurioRegistry() as registry:
        yield registry


@pytest.fixture(scope="session")
def kafka_broker(broker_name: str, request: pytest.FixtureRequest) -> Broker:
    """The broker of this test instance; started by the first test that needs it."""
    fixture = {"tansu": "tansu_broker", "kafka": "apache_kafka_broker"}[broker_name]
    broker: Broker = request.getfixturevalue(fixture)
    return broker


@pytest.fixture
def bootstrap_servers(kafka_broker: Broker) -> str:
    return kafka_broker.bootstrap_servers


@pytest.fixture(scope="session")
def kafka_pki(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Pki:
    """A CA and certificates for the secure brokers (``tests/integration/secure_kafka.py``);
    the tests that use them are skipped when ``--brokers`` leaves Apache Kafka out."""
    if "kafka" not in selected_brokers(request.config):
        pytest.skip("the secure brokers are Apache Kafka, which --brokers leaves out")
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def sasl_ssl_kafka(kafka_pki: Pki) -> Iterator[KafkaBroker]:
    """Apache Kafka with one SASL_SSL listener (SCRAM) and the StandardAuthorizer; one per
    session, started by the first test that needs it."""
    yield from discarded_at_the_end(sasl_ssl_broker(kafka_pki))


@pytest.fixture(scope="session")
def mtls_kafka(kafka_pki: Pki) -> Iterator[KafkaBroker]:
    """Apache Kafka with one SSL listener that requires client certificates."""
    yield from discarded_at_the_end(mtls_broker(kafka_pki))
