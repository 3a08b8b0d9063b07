"""deploy/compose/podman.yml (docker-compose.yml under podman, make compose-test) agrees
with the compose file and with what deploy/compose/ builds; read offline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose"


class _ComposeLoader(yaml.SafeLoader):
    """YAML with Compose's ``!override`` tag (the value replaces, not extends)."""


_ComposeLoader.add_constructor(
    "!override",
    lambda loader, node: (
        loader.construct_sequence(node)
        if isinstance(node, yaml.SequenceNode)
        else loader.construct_object(node)
    ),
)


def _services(path: Path) -> dict[str, Any]:
    # A SafeLoader with one more tag: as safe as yaml.safe_load.
    loaded: dict[str, Any] = yaml.load(path.read_text(), Loader=_ComposeLoader)
    return dict(loaded["services"])


def test_the_override_names_only_services_of_the_compose_file() -> None:
    assert set(_services(COMPOSE / "podman.yml")) <= set(_services(ROOT / "docker-compose.yml"))


def test_the_images_it_names_are_built_by_deploy_compose() -> None:
    for name, service in _services(COMPOSE / "podman.yml").items():
        image = service.get("image")
        if image is None:
            continue
        assert image.startswith("localhost/clockwork-") and image.endswith(":latest"), name
        folder = image.removeprefix("localhost/clockwork-").removesuffix(":latest")
        assert (COMPOSE / folder / "Containerfile").is_file(), f"{name}: no {folder}/Containerfile"
        assert f"build clockwork-{folder} " in (COMPOSE / "build.sh").read_text(), name


def test_only_grafana_is_left_out() -> None:
    override = _services(COMPOSE / "podman.yml")
    started = {
        name
        for name, service in _services(ROOT / "docker-compose.yml").items()
        if not service.get("profiles") and not override.get(name, {}).get("profiles")
    }
    assert started == {"kafka", "clockwork-1", "clockwork-2", "demo-producer", "prometheus"}


def test_the_kafka_health_check_is_replaced_and_its_probe_exists() -> None:
    test = _services(COMPOSE / "podman.yml")["kafka"]["healthcheck"]["test"]
    assert test[0] == "CMD" and test[2] == "/opt/kafka/bin/api-versions-probe.py"
    assert (COMPOSE / "kafka" / "api-versions-probe.py").is_file()
