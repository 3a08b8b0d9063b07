"""The arrows of docs/architecture.md, checked over every import in ``service/``.

Imports are read with ``ast`` (those under ``TYPE_CHECKING`` and inside functions
included: an arrow is an arrow wherever it is written), so a new module that imports
against the layering fails here, not in a review.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[1] / "service"

# service/runtime's sub-packages, lowest first: a package imports only those below it
# (and observability, and the root modules every layer reads).
RUNTIME_ORDER = (
    "formats",
    "schema_registry",
    "kafka",
    "partition",
    "shuffle",
    "pipeline_topics",
    "consumer_group",
    "lifecycle",
)
RUNTIME_ROOT = (
    "definition",
    "factories",
    "security",
    "settings",
    "pipeline_topics.names",
    "formats.registry",
)
"""Read by every sub-package. ``pipeline_topics.names`` is the pipeline topics' room's
pure half (what every topic and group is called), which the definition names them with;
``formats.registry`` the formats room's (what each payload format is called), which the
definition types its formats with."""


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(SERVICE.rglob("*.py")):
        parts = path.relative_to(SERVICE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(parts), path


def imports(module: str, path: Path) -> set[str]:
    """The absolute names of everything ``path`` imports."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def service_imports(module: str, path: Path) -> set[str]:
    return {name for name in imports(module, path) if name.startswith("service.")}


ALL = list(modules())


def in_layer(layer: str) -> list[tuple[str, Path]]:
    return [(m, p) for m, p in ALL if m == f"service.{layer}" or m.startswith(f"service.{layer}.")]


def test_every_layer_has_modules() -> None:  # a moved folder must not empty a rule below
    layers = ("core", "operators", "runtime", "pipeline_spec", "api", "compaction", "workers")
    for layer in (*layers, "contract"):
        assert in_layer(layer), layer


@pytest.mark.parametrize(("module", "path"), in_layer("core"))
def test_core_imports_nothing_else_of_the_service(module: str, path: Path) -> None:
    assert {n for n in service_imports(module, path) if not n.startswith("service.core")} == set()


@pytest.mark.parametrize(("module", "path"), in_layer("core"))
def test_core_does_no_io(module: str, path: Path) -> None:
    io = {"asyncio", "aiokafka", "fastapi", "pydantic", "socket", "pyspark"}
    assert {n.split(".")[0] for n in imports(module, path)} & io == set()


@pytest.mark.parametrize(("module", "path"), in_layer("operators"))
def test_operators_import_only_core(module: str, path: Path) -> None:
    allowed = ("service.core", "service.operators")
    assert {n for n in service_imports(module, path) if not n.startswith(allowed)} == set()


@pytest.mark.parametrize(("module", "path"), in_layer("operators"))
def test_operators_do_no_io(module: str, path: Path) -> None:
    io = {"asyncio", "aiokafka", "fastapi", "pydantic", "socket", "pyspark"}
    assert {n.split(".")[0] for n in imports(module, path)} & io == set()


@pytest.mark.parametrize(("module", "path"), in_layer("runtime"))
def test_the_runtime_never_imports_the_pipeline_spec_the_api_or_pydantic(
    module: str, path: Path
) -> None:
    names = imports(module, path)
    above = ("service.pipeline_spec", "service.api", "service.compaction", "service.workers")
    # service.contract it may read: it imports nothing (see the contract's test below)
    assert {n for n in names if n.startswith(above)} == set()
    assert {n for n in names if n.split(".")[0] == "pydantic"} == set()


SPEC_READS_OF_THE_RUNTIME = (
    "service.runtime.definition",
    "service.runtime.factories",
    "service.runtime.formats.registry",
)
"""The spec builds the runtime's definition and its operator factories, and names the
payload formats as the runtime's one list of them does (its model, JSON Schema, SQL and
result schemas read that list); nothing else of the runtime (no I/O, no readers, no
sessions) is the spec's business."""


@pytest.mark.parametrize(("module", "path"), in_layer("pipeline_spec"))
def test_the_pipeline_spec_imports_below_it_and_no_web(module: str, path: Path) -> None:
    names = imports(module, path)
    allowed = (
        "service.core",
        "service.operators",
        "service.pipeline_spec",
        *SPEC_READS_OF_THE_RUNTIME,
    )
    assert {n for n in service_imports(module, path) if not n.startswith(allowed)} == set()
    web = {"fastapi", "starlette", "asyncio", "aiokafka"}
    assert {n.split(".")[0] for n in names} & web == set()


COMPACTION_READS_OF_THE_SERVICE = {
    "service.contract.kafka_security": "the KAFKA_* security variables, as the service reads them",
    "service.contract.result_record": "the window result record's fields, as the sink writes them",
}
"""The only modules of the service the compaction job may import: what it must agree on
with the service (the variables it is configured by, the records it reads), written once
in ``service/contract``, which imports nothing else. The job runs in its own image and
under ``spark-submit``: no runtime, API, aiokafka or pydantic."""


@pytest.mark.parametrize(("module", "path"), in_layer("compaction"))
def test_compaction_stands_alone(module: str, path: Path) -> None:
    own = "service.compaction"
    reached = {runtime_module(n) for n in service_imports(module, path) if not n.startswith(own)}
    assert reached - set(COMPACTION_READS_OF_THE_SERVICE) == set()


@pytest.mark.parametrize(("module", "path"), in_layer("contract"))
def test_the_contract_imports_only_the_standard_library(module: str, path: Path) -> None:
    """Both the service and the compaction job import it: it must pull in neither's
    dependencies (no Spark, no aiokafka) and nothing else of the service."""
    own = "service.contract"
    assert {n for n in service_imports(module, path) if not n.startswith(own)} == set()
    outside = {n.split(".")[0] for n in imports(module, path)} - {"service", "__future__"}
    assert outside - set(sys.stdlib_module_names) == set()


@pytest.mark.parametrize(("module", "path"), in_layer("workers"))
def test_the_workers_import_nothing_else_of_the_service(module: str, path: Path) -> None:
    """The worker processes are supervised beside the API, not inside the runtime: the
    pool starts ``python -m service.worker`` by name and reads the workers' ``/metrics``
    over HTTP, so it needs no pipeline, session or Kafka client; only the API (the pool,
    the merged ``/metrics``) and the settings (the default count) import it."""
    own = "service.workers"
    assert {n for n in service_imports(module, path) if not n.startswith(own)} == set()


def test_only_the_api_and_the_settings_import_the_workers() -> None:
    importers = {
        module.split(".")[1] if module.count(".") else module
        for module, path in ALL
        if not module.startswith("service.workers")
        and any(n.startswith("service.workers") for n in service_imports(module, path))
    }
    assert importers <= {"api", "settings"}


API_READS_OF_THE_RUNTIME = {
    "service.runtime.lifecycle.manager": "the Runtime: starting, replacing, stopping pipelines",
    "service.runtime.lifecycle.queries": "what a pull query answers, or why not (state_queries)",
    "service.runtime.pipeline_topics.admin": "a pipeline's topics and state epochs",
    "service.runtime.definition": "what the spec builds",
    "service.runtime.settings": "the runtime's settings, from the service's",
    "service.runtime.observability.status": "what the status shows",
    "service.runtime.observability.history": "the status history",
    "service.runtime.observability.metrics": "the registry /metrics serves",
    "service.runtime.kafka.clients": "KafkaCluster: the store's and the console's clients",
    "service.runtime.kafka.access": "why the store cannot use the cluster",
    "service.runtime.kafka.topics": "creating the store's and the members' compacted topics",
    "service.runtime.kafka.transactions": "whether the broker runs transactions",
    "service.runtime.kafka.tail": "the console's tail of the output topics",
    "service.runtime.kafka.embedded_broker": "make run's embedded broker",
    "service.runtime.schema_registry.client": "whether the registry takes a result schema",
}
"""The only runtime modules the API may import: no session, stage, partition or
operator wiring, and no topic naming (the pipeline's topics are the runtime's room)."""


def runtime_module(name: str) -> str:
    """The module an imported name lives in (``a.b.c.Name`` -> ``a.b.c``)."""
    while name.rsplit(".", 1)[-1][:1].isupper() or not _is_module(name):
        name = name.rsplit(".", 1)[0]
    return name


def _is_module(name: str) -> bool:
    relative = Path(*name.split(".")[1:])
    return (SERVICE / relative).with_suffix(".py").is_file() or (SERVICE / relative).is_dir()


@pytest.mark.parametrize(("module", "path"), in_layer("api"))
def test_the_api_reaches_the_runtime_only_through_its_entries(module: str, path: Path) -> None:
    reached = {
        runtime_module(n) for n in service_imports(module, path) if n.startswith("service.runtime")
    }
    assert reached - set(API_READS_OF_THE_RUNTIME) == set()


def test_the_function_api_imports_only_the_core_and_the_operators() -> None:
    names = service_imports("service.functions", SERVICE / "functions.py")
    assert {n for n in names if not n.startswith(("service.core", "service.operators"))} == set()


def test_the_settings_import_no_api_spec_or_session() -> None:
    names = service_imports("service.settings", SERVICE / "settings.py")
    # runtime.settings: plain frozen data (the schema registry's settings), like security
    allowed = (
        "service.core",
        "service.operators",
        "service.contract.kafka_security",  # the security variables' values, and booleans
        "service.runtime.security",
        "service.runtime.settings",
        "service.workers.cpus",  # SERVICE_WORKERS' default: the CPUs we may use
    )
    assert {n for n in names if not n.startswith(allowed)} == set()


def test_nothing_in_the_service_imports_the_demo() -> None:
    importers = {m for m, p in ALL if "service.demo" in service_imports(m, p)}
    assert importers <= {"service.demo"}


def runtime_package(name: str) -> str | None:
    parts = name.split(".")
    if parts[1:4] == ["runtime", "pipeline_topics", "names"]:
        return "pipeline_topics.names"
    if parts[1:4] == ["runtime", "formats", "registry"]:
        return "formats.registry"
    return parts[2] if len(parts) > 2 and parts[1] == "runtime" else None


def test_the_topic_names_import_nothing_of_the_service() -> None:
    path = SERVICE / "runtime" / "pipeline_topics" / "names.py"
    assert service_imports("service.runtime.pipeline_topics.names", path) == set()


def test_the_format_registry_imports_nothing_of_the_service() -> None:
    """The spec and the definition read it: it must pull no reader, no I/O, no runtime."""
    path = SERVICE / "runtime" / "formats" / "registry.py"
    assert service_imports("service.runtime.formats.registry", path) == set()


@pytest.mark.parametrize(("module", "path"), in_layer("runtime"))
def test_runtime_packages_import_downward(module: str, path: Path) -> None:
    own = runtime_package(module)
    targets = {runtime_package(n) for n in service_imports(module, path)} - {None, own}
    if own is None:  # the package's __init__ installs the aiokafka fix, nothing else
        allowed: set[str | None] = {"kafka"}
    elif own in RUNTIME_ROOT or own == "observability":  # below every sub-package
        allowed = set(RUNTIME_ROOT)
    else:
        below = RUNTIME_ORDER[: RUNTIME_ORDER.index(own)]
        allowed = {*below, "observability", *RUNTIME_ROOT}
    assert targets - allowed == set()


def test_only_the_stage_runner_imports_the_session() -> None:
    importers = {
        module
        for module, path in in_layer("runtime")
        if any(
            n.startswith("service.runtime.consumer_group.session") for n in imports(module, path)
        )
        and module != "service.runtime.consumer_group.session"
    }
    assert importers == {"service.runtime.lifecycle.stage_runner"}


def test_every_module_the_architecture_page_names_exists() -> None:
    page = (SERVICE.parent / "docs" / "architecture.md").read_text()
    named = set(
        re.findall(
            r"`((?:core|operators|runtime|pipeline_spec|api|workers|contract)/[\w/]+\.py)", page
        )
    )
    assert named  # the page names modules this way
    assert sorted(p for p in named if not (SERVICE / p).is_file()) == []


KAFKA_CLIENTS = {"AIOKafkaConsumer", "AIOKafkaProducer", "AIOKafkaAdminClient", "AIOKafkaClient"}


def constructed_clients(path: Path) -> set[str]:
    """The aiokafka client classes ``path`` calls (constructs), by name or attribute."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in KAFKA_CLIENTS:
                found.add(name)
    return found


def test_only_the_cluster_makes_kafka_clients() -> None:
    """Every Kafka client gets the security settings: only ``KafkaCluster`` constructs one."""
    makers = {module for module, path in ALL if constructed_clients(path)}
    assert makers == {"service.runtime.kafka.clients"}
    assert constructed_clients(SERVICE / "runtime" / "kafka" / "clients.py") == KAFKA_CLIENTS


def attributes_read(path: Path) -> set[str]:
    """Every attribute name ``path`` reads or writes (``x.name``)."""
    return {
        node.attr
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute)
    }


def test_only_the_watermark_emitter_holds_a_sessions_combiner() -> None:
    """The parts of a session tell the emitter what happened to a partition and ask it
    what they need (``partition_active``, ``finish``, ``minimum_excluding``,
    ``snapshot``...); none reaches through it to the combiner."""
    emitter = "service.runtime.consumer_group.watermark_emitter"
    importers = {
        module
        for module, path in in_layer("runtime")
        if any(n.startswith("service.core.combiner") for n in imports(module, path))
    }
    assert importers <= {emitter}
    reaching = {
        module
        for module, path in in_layer("runtime")
        if {"combiner", "_combiner"} & attributes_read(path)
    }
    assert reaching <= {emitter}
