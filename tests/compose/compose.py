"""docker-compose.yml run whole with podman-compose, for ``make compose-test``.

On a machine where no registry serves Docker Hub's images, the compose file runs with
``deploy/compose/podman.yml`` over it: Kafka and Prometheus from the images
``deploy/compose/build.sh`` builds, the service from ``deploy/image/build.sh``'s, Grafana
left out (it has no Debian package). :func:`running_stack` brings it all up and takes it
all down again, containers, network and volumes, whatever happened in between.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.container.podman import BUILD_SCRIPT, PodmanError, env, podman

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILES = (ROOT / "docker-compose.yml", ROOT / "deploy" / "compose" / "podman.yml")
COMPOSE_BUILD_SCRIPT = ROOT / "deploy" / "compose" / "build.sh"
READ_TOPIC_SCRIPT = Path(__file__).with_name("read_topic.py")
PROJECT = "clockwork"
"""docker-compose.yml's ``name``: podman-compose labels every container with it."""
PROMETHEUS_URL = "http://127.0.0.1:9090"
"""Where docker-compose.yml publishes Prometheus on the host."""
BUILD_TIMEOUT_S = 1500.0
STOP_GRACE_S = 30
"""docker-compose.yml's ``stop_grace_period`` of the replicas."""


def podman_compose() -> str | None:
    """podman-compose beside this interpreter (``make compose-test`` installs it into
    the venv), else on the PATH; None when there is none."""
    beside = Path(sys.executable).parent / "podman-compose"
    return str(beside) if beside.is_file() else shutil.which("podman-compose")


def compose(*args: str, timeout_s: float = 300.0) -> str:
    """Run ``podman-compose -f docker-compose.yml -f deploy/compose/podman.yml args``
    in the repository; its output. PodmanError when it fails."""
    binary = podman_compose()
    if binary is None:
        raise PodmanError("podman-compose is not installed (make compose-test installs it)")
    files = [arg for path in COMPOSE_FILES for arg in ("-f", str(path))]
    completed = subprocess.run(
        [binary, *files, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env(),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    output = completed.stdout + completed.stderr
    if completed.returncode != 0:
        raise PodmanError(f"podman-compose {' '.join(args)}: {output.strip()[-3000:]}")
    return output


def build_all() -> None:
    """The service image (``deploy/image/build.sh service``: the compaction job is not
    started), then Kafka's and Prometheus's (``deploy/compose/build.sh``); each finds
    what is built already by its hash."""
    for command in ([str(BUILD_SCRIPT), "service"], [str(COMPOSE_BUILD_SCRIPT)]):
        completed = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            env=env(),
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if completed.returncode != 0:
            raise PodmanError(f"{command[0]} failed: {completed.stderr.strip()[-3000:]}")


def container_of(service: str) -> str:
    """The name of the compose service's container ('' when there is none)."""
    names = podman(
        "ps",
        "--all",
        "--filter",
        f"label=io.podman.compose.project={PROJECT}",
        "--filter",
        f"label=com.docker.compose.service={service}",
        "--format",
        "{{.Names}}",
        check=False,
    ).split()
    return names[0] if names else ""


def logs(service: str, tail: int = 40) -> str:
    """The last lines of a service's log, for a failure's message."""
    name = container_of(service)
    if not name:
        return f"--- {service}: no container"
    completed = subprocess.run(
        ["podman", "logs", "--tail", str(tail), name],
        capture_output=True,
        text=True,
        timeout=30,
        env=env(),
        check=False,
    )
    state = podman("inspect", "--format", "{{.State.Status}}", name, check=False).strip()
    return f"--- {service} ({state}):\n{completed.stdout}{completed.stderr}"


def read_topic(topic: str) -> list[str]:
    """The values of ``topic`` from its start to its end as of now, read inside
    clockwork-1's container, where the broker's advertised name (kafka:9092) resolves."""
    completed = subprocess.run(
        ["podman", "exec", "-i", container_of("clockwork-1"), "python", "-", topic],
        input=READ_TOPIC_SCRIPT.read_text(),
        capture_output=True,
        text=True,
        timeout=120,
        env=env(),
        check=False,
    )
    if completed.returncode != 0:
        raise PodmanError(f"reading {topic}: {completed.stderr.strip()[-3000:]}")
    return completed.stdout.splitlines()


def down() -> None:
    """Stop and remove the project's containers, its network and its volumes."""
    compose("--profile", "grafana", "down", "--volumes", "-t", str(STOP_GRACE_S), timeout_s=600)


@contextmanager
def running_stack() -> Iterator[None]:
    """``up -d`` on a clean slate (what an earlier, killed run left is taken down
    first); ``down`` at the end, whatever happened."""
    down()
    try:
        compose("up", "-d", timeout_s=600)
        yield
    finally:
        down()
