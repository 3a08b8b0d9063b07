"""The deployment files agree with the code: names, ports, paths and flags really exist.

These checks need no Docker engine; they read the compose file, the Kubernetes
manifests and the Dockerfile, and cross-check every name against what the service
reads or serves.
"""

from __future__ import annotations

import importlib.util
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from service.api.app import create_app
from service.compaction.cli import parser as compaction_parser
from service.demo import parse_args as demo_parse_args
from service.settings import Settings
from tests.kafka.kafka_broker import BROKER_SETTINGS, DEPLOYED_SETTINGS

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"


def _service_env_vars() -> set[str]:
    source = (ROOT / "service" / "settings.py").read_text()
    return set(re.findall(r'read(?:_secret)?\(\s*"([A-Z0-9_]+)"', source))


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def _manifests() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            found[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return found


def _app_paths() -> set[str]:
    app = create_app(Settings.from_env({}))
    return set(app.openapi()["paths"])


def test_settings_read_the_variables_documented_in_configuration_md() -> None:
    documented = (ROOT / "docs" / "configuration.md").read_text()
    for name in _service_env_vars():
        assert name in documented, f"{name} is read but not documented"


def test_compose_sets_only_variables_the_service_reads() -> None:
    known = _service_env_vars()
    services = _compose()["services"]
    for name in ("clockwork-1", "clockwork-2"):
        env = services[name]["environment"]
        unknown = {k for k in env if k.startswith(("SERVICE_", "KAFKA_"))} - known
        assert not unknown, f"{name} sets {unknown}, which the service never reads"


def test_compose_publishes_the_port_the_service_listens_on() -> None:
    services = _compose()["services"]
    port = int(services["clockwork-1"]["environment"]["SERVICE_HTTP_PORT"])
    for name in ("clockwork-1", "clockwork-2"):
        published = services[name]["ports"][0]
        assert published.endswith(f":{port}")


def test_compose_mounts_files_that_exist() -> None:
    for service in _compose()["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{source} is mounted but missing"


def test_compose_demo_producer_flags_are_accepted_by_the_demo() -> None:
    command = _compose()["services"]["demo-producer"]["command"]
    args = demo_parse_args([c.replace("${SERVICE_API_TOKEN:-demo-token}", "t") for c in command])
    assert args.no_service and args.api_url == "http://clockwork-1:8000"


def test_compose_compaction_flags_are_accepted_by_the_compaction_cli() -> None:
    command = _compose()["services"]["compaction"]["command"][0]
    flags = command.split("python -m service.compaction", 1)[1].split(";")[0]
    argv = [part.strip("'") for part in flags.split()]
    args = compaction_parser().parse_args(argv)
    assert args.output == "/data/tables"


def test_prometheus_scrapes_the_compose_replicas() -> None:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = config["scrape_configs"][0]["static_configs"][0]["targets"]
    services = _compose()["services"]
    for target in targets:
        host, port = target.split(":")
        assert host in services
        assert int(port) == int(services[host]["environment"]["SERVICE_HTTP_PORT"])


def test_kustomization_lists_every_manifest_and_only_existing_ones() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_k8s_configmap_sets_only_variables_the_service_reads() -> None:
    data = _manifests()["ConfigMap/clockwork"]["data"]
    assert set(data) <= _service_env_vars()
    secret = _manifests()["Secret/clockwork"]["stringData"]
    assert set(secret) <= _service_env_vars()


def test_k8s_probes_hit_endpoints_the_app_serves() -> None:
    container = _manifests()["Deployment/clockwork"]["spec"]["template"]["spec"]["containers"][0]
    paths = _app_paths()
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["path"] in paths
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_k8s_container_port_matches_the_configured_http_port() -> None:
    manifests = _manifests()
    container = manifests["Deployment/clockwork"]["spec"]["template"]["spec"]["containers"][0]
    port = int(manifests["ConfigMap/clockwork"]["data"]["SERVICE_HTTP_PORT"])
    assert container["ports"][0]["containerPort"] == port


def test_k8s_grace_period_outlasts_the_graceful_shutdown() -> None:
    spec = _manifests()["Deployment/clockwork"]["spec"]["template"]["spec"]
    shutdown_s = Settings.from_env({}).shutdown_timeout_ms / 1000
    assert spec["terminationGracePeriodSeconds"] > shutdown_s


def test_k8s_compaction_cronjob_flags_are_accepted_by_the_compaction_cli() -> None:
    job = _manifests()["CronJob/clockwork-compaction"]
    container = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    args = compaction_parser().parse_args(container["args"])
    assert args.output == "/data/tables"


def test_k8s_service_monitor_scrapes_the_metrics_endpoint() -> None:
    endpoint = _manifests()["ServiceMonitor/clockwork"]["spec"]["endpoints"][0]
    assert endpoint["path"] in _app_paths()


@pytest.mark.parametrize("module", ["service", "service.compaction"])
def test_dockerfile_entrypoint_modules_are_runnable(module: str) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f'"-m", "{module}"]' in dockerfile
    assert importlib.util.find_spec(f"{module}.__main__") is not None


def test_dockerfile_healthcheck_and_port_match_the_service() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "/healthz" in dockerfile and "/healthz" in _app_paths()
    default_port = Settings.from_env({}).http_port
    assert f"EXPOSE {default_port}" in dockerfile
    assert "USER 10001" in dockerfile


def _tested_kafka_version() -> str:
    """``kafka.version`` of tests/kafka/pom.xml: the Apache Kafka the tests run against."""
    root = ET.parse(ROOT / "tests" / "kafka" / "pom.xml").getroot()
    namespace = {"m": "http://maven.apache.org/POM/4.0.0"}
    version = root.findtext("m:properties/m:kafka.version", namespaces=namespace)
    assert version, "tests/kafka/pom.xml names no kafka.version"
    return version


def test_compose_runs_the_apache_kafka_the_tests_run() -> None:
    image = _compose()["services"]["kafka"]["image"]
    assert image == f"apache/kafka:{_tested_kafka_version()}"


def test_compose_kafka_is_one_kraft_node_with_the_tested_settings() -> None:
    env = {k: str(v) for k, v in _compose()["services"]["kafka"]["environment"].items()}
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert not any("ZOOKEEPER" in k for k in env)
    for setting in DEPLOYED_SETTINGS:
        variable = "KAFKA_" + setting.upper().replace(".", "_")
        assert env.get(variable) == BROKER_SETTINGS[setting], f"{variable} is not what tests run"
