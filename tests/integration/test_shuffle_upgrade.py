"""A shuffled pipeline moves from the previous version (rows routed one per record) to
frames while its shuffle topic still holds the old layout.

The previous version is the commit of the last release before frames, run from its own
source tree (``git archive``) as a worker process of this suite's kind. It routes half
of a bounded input through the shuffle and dies (SIGKILL) at the start of a stage-2
checkpoint, so its shuffle topic holds routed records that stage 2 read but never
committed, and stage 1 has source records it routed but never committed. The current
version then takes the pipeline over (same name, group, changelog and shuffle topic),
reads the old records that are left, routes the rest as frames -- overlapping the old
records where stage 1 is replayed -- and finishes. Every window is exact after
de-duplication by id, with no late record and no dead letter: each row applied once,
whichever layout carried it.
"""

from __future__ import annotations

import io
import signal
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kafka_utils import create_topic, unique, wait_until
from tests.integration.replicas import ROOT, Replica
from tests.integration.test_exactly_once_shuffle import held, records, windows
from tests.integration.test_replica_loss import PARTITIONS, send, settle_and_check

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

PREVIOUS = "77ff5864e496ac89574f29c1eaec1e8827028aca"
"""The last commit before frames: its shuffle writes one Kafka record per row."""
PER_PARTITION = 4_000
FIRST = 1_600


@pytest.fixture(scope="module")
def previous_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous version's source tree, from this clone's history."""
    found = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"],
        capture_output=True,
    )
    if found.returncode != 0:
        pytest.skip(f"the clone has no commit {PREVIOUS[:7]} (a shallow clone)")
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PREVIOUS, "service", "tests"],
        capture_output=True,
        check=True,
    ).stdout
    root = tmp_path_factory.mktemp("previous")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root


async def test_a_pipeline_killed_on_the_previous_version_finishes_exactly_on_frames(
    bootstrap_servers: str, tmp_path: Path, previous_tree: Path
) -> None:
    name = unique("upgrade")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, PARTITIONS)
    first, second = records(0, FIRST), records(FIRST, PER_PARTITION)
    ends = [[topic, p, PER_PARTITION] for p in range(PARTITIONS)]
    options: dict[str, Any] = {"bounded": ends, "shuffle": True}
    armed = tmp_path / "armed"
    crash = {"stage": "shuffled", "point": "before_flush", "at": 1, "armed_by": str(armed)}
    old = Replica(
        bootstrap_servers,
        name,
        topic,
        tmp_path / "old.json",
        root=previous_tree,
        **options,
        crash=crash,
    )
    new: Replica | None = None
    try:

        async def old_processed() -> bool:
            return sum(p["records_in"] for p in held(old, "shuffled")) > 0

        await send(bootstrap_servers, topic, first)
        await wait_until(old_processed, timeout_s=90)
        assert "legacy_rows" not in held(old, "shuffled")[0]["shuffle"]  # the old code ran
        armed.touch()  # it dies at its next stage-2 checkpoint, before writing any of it

        async def old_is_dead() -> bool:
            return old.exited

        await wait_until(old_is_dead, timeout_s=60)
        assert old.process.returncode == -signal.SIGKILL

        new = Replica(bootstrap_servers, name, topic, tmp_path / "new.json", **options)
        await send(bootstrap_servers, topic, second)

        async def new_finished() -> bool:
            assert new is not None
            return new.exited

        await wait_until(new_finished, timeout_s=150)
        status = new.status()
    finally:
        for replica in (old, new):
            if replica is not None:
                replica.stop(signal.SIGTERM)
    assert status["state"] == "finished", status
    shuffled = [p for p in status["partitions"] if p["stage"] == "shuffled"]
    # the old layout was read after the upgrade, and frames after it
    assert sum(p["shuffle"]["legacy_rows"] for p in shuffled) > 0
    assert sum(p["shuffle"]["frames"] for p in shuffled) > 0
    await settle_and_check(bootstrap_servers, name, windows(first + second))
