"""The rocksdb state backend's disk (#53): a full disk (a small tmpfs as
``SERVICE_STATE_DIR``) fails the pipeline with the reason, commits nothing of the
checkpoint it was writing, and a resume once the disk has room gives exact results."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from aiokafka import TopicPartition

from service.operators.table.running import TS_SLOT
from service.runtime.consumer_group.changelog import read_changelog
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.status import PipelineState
from tests.integration.kafka_utils import (
    cluster_of,
    create_topic,
    json_record,
    produce,
    runtime_settings,
    unique,
    wait_until,
)
from tests.integration.test_rocksdb_state import (
    SMALL_CACHE,
    aggregate,
    changelog_ends,
    checkpointed_past,
    definition_of,
    purchases,
)
from tests.integration.test_running_aggregates import folds_to

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

DISK_BYTES = 32 * 1024 * 1024
"""The small disk: room for the stores (RocksDB preallocates ~4.6 MB of write-ahead log
each), not for the filler."""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of :data:`DISK_BYTES` mounted for the test (skipped where mounting is not
    permitted), unmounted after it."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"a tmpfs cannot be mounted here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(disk: Path) -> Path:
    """Write a file on ``disk`` until it has no room left, to the last byte."""
    path = disk / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 1 << 12, 1):
            chunk = b"\0" * size
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return path


async def test_a_full_disk_fails_the_pipeline_with_the_reason_and_loses_nothing(
    bootstrap_servers: str, small_disk: Path
) -> None:
    """A wave of input, the disk filled, a second wave (later timestamps, new keys too):
    the pipeline fails with a reason naming the full disk and the store's directory;
    the changelog's committed state has nothing of the second wave (the checkpoint that
    met the full disk did not commit); with the filler gone, the pipeline started
    again folds to the aggregate of both waves."""
    name = unique("rocksfull")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    definition = definition_of(name, topic, False, SMALL_CACHE)
    first = purchases(2000, 400, 11)
    second = [dict(e, ts=e["ts"] + 10**7) for e in purchases(2000, 600, 12)]
    out = f"{name}.out"

    async def send(wave: list[dict[str, Any]]) -> None:
        records = [json_record(i % 2, None, e) for i, e in enumerate(wave)]
        await produce(bootstrap_servers, topic, records)

    # No restart while the disk is full: the test stops the pipeline, looks, and starts it.
    stays_failed = {"restart_backoff_initial_s": 600.0, "restart_backoff_max_s": 600.0}
    settings = runtime_settings(bootstrap_servers, state_dir=str(small_disk), **stays_failed)
    runtime = Runtime(settings)
    await runtime.start()
    try:
        runtime.start_pipeline(definition)
        ends = await changelog_ends(bootstrap_servers, definition.changelog_topic)
        await send(first)
        want = aggregate(first)
        await wait_until(
            partial(folds_to, bootstrap_servers, out, "read_uncommitted", want), timeout_s=60
        )
        await checkpointed_past(ends, small_disk)  # the first wave is committed
        filler = fill(small_disk)
        await send(second)
        runner = runtime.runner(name)

        async def failed() -> bool:
            return runner.state is PipelineState.FAILED

        await wait_until(failed, timeout_s=60)
        reason = runner.reason or ""
        assert "the state disk is full" in reason, reason
        assert f"mounted at {small_disk}," in reason, reason
        assert f"the RocksDB store {small_disk / definition.changelog_topic}/" in reason, reason
        await runtime.stop_pipeline(name)
    finally:
        await runtime.shutdown()

    shuffled = [TopicPartition(definition.shuffle_topic, p) for p in (0, 1)]
    committed = await read_changelog(
        cluster_of(bootstrap_servers), definition.changelog_topic, shuffled
    )
    accs = {
        key: entry["acc"]
        for state in committed.values()
        for key, entry in state.entries.items()
        if isinstance(entry, dict) and "acc" in entry
    }
    assert {key[1:] for key in accs} == set(want)  # the first wave's keys, "k" + key
    assert max(acc[TS_SLOT] for acc in accs.values()) < min(e["ts"] for e in second)

    filler.unlink()
    again = Runtime(runtime_settings(bootstrap_servers, state_dir=str(small_disk)))
    await again.start()
    try:
        again.start_pipeline(definition)
        want = aggregate(first + second)
        await wait_until(
            partial(folds_to, bootstrap_servers, out, "read_uncommitted", want), timeout_s=60
        )
    finally:
        await again.shutdown()
