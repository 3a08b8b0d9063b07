"""Running the project's images with podman for the container tests.

Every podman call uses ``deploy/image/containers.conf`` (runc, limits within the
machine's), as ``make image`` does. :func:`running` starts a container and removes it
when the block ends, whatever happened in it; every container carries the label
:data:`LABEL` with this test session's id, so :func:`remove_all` can clean up after a
session that was killed between a start and its removal.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "deploy" / "image" / "build.sh"
CONTAINERS_CONF = ROOT / "deploy" / "image" / "containers.conf"
LABEL = "clockwork.test.session"
SESSION = uuid.uuid4().hex[:12]
BUILD_TIMEOUT_S = 1500.0
"""A cold build (base, wheels, both images) takes about 5 minutes on 2 idle cores."""


class PodmanError(RuntimeError):
    """A podman command failed; its output is in the message."""


def env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(*args: str, timeout_s: float = 60.0, check: bool = True) -> str:
    """Run ``podman args``; its standard output. PodmanError when it fails and ``check``."""
    completed = subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env(),
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if check and completed.returncode != 0:
        raise PodmanError(f"podman {' '.join(args)}: {completed.stderr.strip()[-2000:]}")
    return completed.stdout


def unusable_reason() -> str | None:
    """Why podman cannot run containers here, or None when it can."""
    if shutil.which("podman") is None:
        return "podman is not installed (make test installs it with Debian's packages)"
    try:
        podman("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout_s=60)
    except (PodmanError, subprocess.TimeoutExpired) as exc:
        return f"podman cannot run here: {exc}"
    return None


def build_images() -> dict[str, str]:
    """Build (or find, by content hash) the images; ``{"service": ref, "compaction": ref}``."""
    completed = subprocess.run(
        [str(BUILD_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        env=env(),
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if completed.returncode != 0:
        raise PodmanError(f"{BUILD_SCRIPT.name} failed: {completed.stderr.strip()[-3000:]}")
    refs = dict(line.split(" ", 1) for line in completed.stdout.splitlines() if " " in line)
    return {target: refs[target] for target in ("service", "compaction")}


@dataclass(frozen=True, slots=True)
class Container:
    name: str

    def logs(self) -> str:
        completed = subprocess.run(
            ["podman", "logs", self.name],
            capture_output=True,
            text=True,
            timeout=30,
            env=env(),
            check=False,
        )
        return completed.stdout + completed.stderr

    def state(self) -> str:
        return podman("inspect", "--format", "{{.State.Status}}", self.name).strip()

    def exit_code(self) -> int:
        return int(podman("inspect", "--format", "{{.State.ExitCode}}", self.name))

    def kill(self) -> None:
        """SIGKILL: no shutdown at all."""
        podman("kill", "--signal", "KILL", self.name)

    def stop(self, grace_s: int) -> None:
        """SIGTERM (the image's STOPSIGNAL), SIGKILL after ``grace_s``."""
        podman("stop", "--time", str(grace_s), self.name, timeout_s=grace_s + 30)

    def wait(self, timeout_s: float) -> int:
        """Wait until it exits; its exit code."""
        return int(podman("wait", self.name, timeout_s=timeout_s).strip())


@contextmanager
def running(
    image: str,
    *,
    env_vars: Mapping[str, str] | None = None,
    options: Sequence[str] = (),
    command: Sequence[str] = (),
    writable_tmp: bool = False,
) -> Iterator[Container]:
    """``podman run -d`` on the host's network with a read-only root filesystem; removed
    at the end, running or not. Nothing is writable, as under Kubernetes'
    ``readOnlyRootFilesystem``, unless ``writable_tmp`` (tmpfs on /tmp, /var/tmp, /run)."""
    container = Container(f"clockwork-test-{uuid.uuid4().hex[:10]}")
    args = ["run", "--detach", "--name", container.name, "--label", f"{LABEL}={SESSION}"]
    args += ["--network", "host", "--read-only", f"--read-only-tmpfs={str(writable_tmp).lower()}"]
    for key, value in (env_vars or {}).items():
        args += ["--env", f"{key}={value}"]
    try:
        podman(*args, *options, image, *command, timeout_s=120)
        yield container
    finally:
        podman("rm", "--force", "--time", "0", container.name, check=False, timeout_s=60)


def remove_all() -> None:
    """Remove every container this session started that is still there."""
    names = podman(
        "ps",
        "--all",
        "--filter",
        f"label={LABEL}={SESSION}",
        "--format",
        "{{.Names}}",
        check=False,
    ).split()
    if names:
        podman("rm", "--force", "--time", "0", *names, check=False, timeout_s=120)
