"""A restore's store that another opening still holds (consumer_group/local_state.py):
:meth:`LocalStates.open_when_free` waits for it to be closed, the loop running, and
opens it as it was (never wiped); past its bound it fails saying what holds it. The
other opening is one of this process, opened outside :class:`LocalStates` (RocksDB's
lock refuses it as it refuses another process's)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from service.runtime.consumer_group.local_state import LocalStates, process_memory
from service.runtime.partition.rocksdb_store import RocksStore, StoreLockedError, open_store

TP = TopicPartition("in", 0)
CHANGELOG = "clockwork.p.changelog"


def held_store(root: Path) -> tuple[LocalStates, RocksStore]:
    """The stores of ``root`` and another opening of TP's, with a checkpointed key."""
    states = LocalStates(root, CHANGELOG, 1024 * 1024)
    store, _ = open_store(states.directory / f"{TP.topic}-{TP.partition}", process_memory())
    store.write({"k": [1]}, True)
    assert store.commit(7, {"": 1})
    return states, store


async def test_a_held_store_is_opened_once_its_other_opening_closes_it(tmp_path: Path) -> None:
    states, holder = held_store(tmp_path)
    opening = asyncio.create_task(states.open_when_free(TP, wait_s=30.0))
    await asyncio.sleep(0)  # its first try met the lock: it waits, the loop running
    assert not opening.done()
    holder.close()
    local = await opening
    assert local.checkpoint is not None and local.checkpoint.position == 7
    assert local.store.load("k") == ([1], 3)
    states.close_all()


async def test_a_store_held_past_the_bound_fails_naming_it_and_keeps_it(tmp_path: Path) -> None:
    states, holder = held_store(tmp_path)
    with pytest.raises(StoreLockedError, match=r"still open elsewhere after waiting") as failed:
        await states.open_when_free(TP, wait_s=0.0)
    assert failed.value.directory == states.directory / f"{TP.topic}-{TP.partition}"
    assert holder.load("k") == ([1], 3)
    holder.close()
    states.close_all()
