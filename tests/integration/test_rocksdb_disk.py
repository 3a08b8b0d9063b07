"""The rocksdb state backend's disk (#53): a full disk (a small tmpfs as
``SERVICE_STATE_DIR``) fails the pipeline with the reason, commits nothing of the
checkpoint it was writing, and a resume once the disk has room gives exact results; a
deleted pipeline's stores, or a reset one's old state's, leave every replica's disk."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from service.operators.table.running import TS_SLOT
from service.runtime.consumer_group.changelog import read_changelog
from service.runtime.lifecycle.manager import Runtime
from service.runtime.observability.metrics import build_metrics
from service.runtime.observability.status import PipelineState
from tests.api.server import app_settings, running_app, wait_ready
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
    restored,
)
from tests.integration.test_running_aggregates import folds_to, spec

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


def stores(root: Path, changelog: str) -> list[str]:
    """The store directories under ``root`` of the state of changelog ``changelog``."""
    directory = root / changelog
    return sorted(path.name for path in directory.iterdir()) if directory.exists() else []


def every_store(root: Path) -> list[Path]:
    """Every store directory under ``root``, whatever its changelog."""
    return list(root.glob("*/*"))


async def test_a_deleted_pipeline_s_stores_leave_every_replica_s_disk(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Two replicas, each its own state directory: the first opens both partitions'
    stores, the second's arrival takes one of them (its store stays on the first one's
    disk, for a local restore); the pipeline deleted, neither disk has any of them."""
    name = unique("rocksdel")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    definition = definition_of(name, topic, False, SMALL_CACHE)
    changelog = definition.changelog_topic
    registry = CollectorRegistry()
    a = Runtime(runtime_settings(bootstrap_servers, state_dir=str(tmp_path / "a")))
    b = Runtime(
        runtime_settings(bootstrap_servers, state_dir=str(tmp_path / "b")),
        metrics=build_metrics(registry),
    )
    await a.start()
    await b.start()
    try:
        a.start_pipeline(definition)
        wave = purchases(500, 100, 21)
        await produce(
            bootstrap_servers, topic, [json_record(i % 2, None, e) for i, e in enumerate(wave)]
        )
        want = aggregate(wave)
        await wait_until(
            partial(folds_to, bootstrap_servers, f"{name}.out", "read_uncommitted", want),
            timeout_s=60,
        )
        b.start_pipeline(definition)

        async def moved() -> bool:
            return restored(registry, name, "partitions_restored", "changelog") > 0

        await wait_until(moved, timeout_s=60)
        assert len(stores(tmp_path / "a", changelog)) == 2  # the revoked one's stays
        assert len(stores(tmp_path / "b", changelog)) >= 1
        await a.delete_pipeline(name)
        await b.delete_pipeline(name)
        assert stores(tmp_path / "a", changelog) == stores(tmp_path / "b", changelog) == []
    finally:
        await b.shutdown()
        await a.shutdown()


async def test_a_reset_removes_the_old_state_s_stores(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """A replacement with reset_state (a new state epoch: a changelog of its own): the
    old epoch's stores are removed, the new one's made."""
    name = unique("rocksreset")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    definition = definition_of(name, topic, False, SMALL_CACHE)
    runtime = Runtime(runtime_settings(bootstrap_servers, state_dir=str(tmp_path)))
    await runtime.start()
    try:
        runtime.start_pipeline(definition)
        wave = purchases(300, 50, 22)
        await produce(
            bootstrap_servers, topic, [json_record(i % 2, None, e) for i, e in enumerate(wave)]
        )
        want = aggregate(wave)
        await wait_until(
            partial(folds_to, bootstrap_servers, f"{name}.out", "read_uncommitted", want),
            timeout_s=60,
        )

        async def made() -> bool:  # at the first checkpoint's flush
            return len(stores(tmp_path, definition.changelog_topic)) == 2

        await wait_until(made, timeout_s=60)
        reset = replace(definition, state_epoch=1)
        await runtime.replace_pipeline(reset, reset_state_=True)

        async def reopened() -> bool:
            return len(stores(tmp_path, reset.changelog_topic)) == 2

        await wait_until(reopened, timeout_s=60)
        assert stores(tmp_path, definition.changelog_topic) == []
    finally:
        await runtime.shutdown()


async def test_a_pipeline_deleted_through_the_api_leaves_no_store(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """DELETE /pipelines/{name} on a replica running a rocksdb pipeline: its stores go
    from the replica's state directory."""
    name = unique("rocksapi")
    topic = f"{name}.in"
    await create_topic(bootstrap_servers, topic, 2)
    data_spec = spec(name, topic, "at_least_once")
    data_spec["source"]["bounded"] = False
    data_spec["state"] = {"backend": "rocksdb", "cache_bytes": 1024 * 1024}
    settings = app_settings(bootstrap_servers, state_dir=str(tmp_path))
    async with running_app(settings) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_ready(client)
        created = await client.post("/pipelines", json=data_spec)
        assert created.status_code == 201, created.text
        wave = purchases(200, 40, 23)
        await produce(
            bootstrap_servers, topic, [json_record(i % 2, None, e) for i, e in enumerate(wave)]
        )
        want = aggregate(wave)
        await wait_until(
            partial(folds_to, bootstrap_servers, f"{name}.out", "read_uncommitted", want),
            timeout_s=60,
        )

        async def made() -> bool:  # at the first checkpoint's flush
            return bool(every_store(tmp_path))

        await wait_until(made, timeout_s=60)
        deleted = await client.delete(f"/pipelines/{name}")
        assert deleted.status_code == 204, deleted.text

        async def gone() -> bool:
            return not every_store(tmp_path)

        await wait_until(gone, timeout_s=30)
