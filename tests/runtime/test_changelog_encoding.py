"""A checkpoint's changelog records as encoded (runtime/consumer_group/changelog.py);
no broker."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Iterator
from typing import Any, cast

import orjson
from aiokafka import TopicPartition

from service.runtime.consumer_group.changelog import (
    append_entries_in_slices,
    encode_checkpoint,
    encode_checkpoint_in_slices,
)
from service.runtime.kafka.batch_producer import BatchProducer

ROW = [1699999999410, 12345, {"order": "o1", "user": "u1", "ts": 1699999999410}, False]


def test_entries_decode_to_what_was_snapshotted_with_the_metadata_last() -> None:
    records = encode_checkpoint(
        TopicPartition("orders", 3), {"l:o1": [ROW], "r:o2": None}.items(), {"offset": 7}
    )
    assert [orjson.loads(value) if value else value for _, value in records] == [
        [ROW],
        None,
        {"offset": 7},
    ]
    assert records[-1][0].endswith(b"|m")


def test_held_entries_take_their_own_size_not_an_encoders_buffer() -> None:
    changes = {f"l:o{i}": [ROW] for i in range(2_000)}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        records = encode_checkpoint(TopicPartition("orders", 0), changes.items(), {"offset": 1})
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    payload = sum(len(key) + len(value or b"") for key, value in records)
    # keys, values and the list: a few times the payload, not 4 KiB an entry
    assert held < 4 * payload < 2_000 * 1_024


async def test_entries_encoded_in_slices_are_the_same_records_with_the_loop_run_between() -> None:
    """A checkpoint's entries are encoded a slice at a time (encode_checkpoint_in_slices):
    the records are encode_checkpoint's, and the event loop turns after each full slice,
    never inside one."""
    changes = {f"k{i}": {"n": i} for i in range(25)}
    turns = 0
    seen: list[int] = []

    async def turn() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    def watched() -> Iterator[tuple[str, Any]]:
        for item in changes.items():
            seen.append(turns)
            yield item

    ticker = asyncio.get_running_loop().create_task(turn())
    await asyncio.sleep(0)  # the ticker is running
    try:
        tp = TopicPartition("orders", 2)
        records = await encode_checkpoint_in_slices(tp, watched(), {"offset": 9}, 10)
    finally:
        ticker.cancel()
    assert records == encode_checkpoint(tp, changes.items(), {"offset": 9})
    slices = [seen[i : i + 10] for i in range(0, 25, 10)]
    assert all(len(set(s)) == 1 for s in slices)  # no turn inside a slice
    assert slices[0][0] < slices[1][0] < slices[2][0]  # a turn after each full one


class Batches:
    """What append_entries_in_slices uses of a BatchProducer: appends, recorded, and
    the capacity awaited, with how many records were in when it was."""

    def __init__(self) -> None:
        self.records: list[tuple[str, int, bytes | None, bytes | None]] = []
        self.awaited_at: list[int] = []

    def append(
        self, topic: str, partition: int, key: bytes | None, value: bytes | None, ts: None
    ) -> None:
        self.records.append((topic, partition, key, value))

    async def wait_capacity(self) -> None:
        self.awaited_at.append(len(self.records))
        await asyncio.sleep(0)


async def test_appended_entries_are_the_encoded_ones_without_the_metadata_record() -> None:
    """At-least-once, a checkpoint's entries go into the changelog's batches as they
    are encoded; the metadata record that commits them is left to the caller."""
    changes = {f"k{i}": ({"n": i} if i % 3 else None) for i in range(25)}
    tp = TopicPartition("orders", 2)
    batches = Batches()
    appended = await append_entries_in_slices(
        cast(BatchProducer, batches), "cl", tp, changes.items(), 10
    )
    entries = encode_checkpoint(tp, changes.items(), {"offset": 9})[:-1]
    assert batches.records == [("cl", 2, key, value) for key, value in entries]
    assert appended.entries == 25
    assert appended.bytes == sum(len(key) + len(value or b"") for key, value in entries)


async def test_appending_entries_awaits_the_batches_capacity_after_each_full_slice() -> None:
    """The records are never all held: after each full slice the appends wait for the
    batches' room (the broker's acknowledgements), never inside one."""
    batches = Batches()
    changes = ((f"k{i}", {"n": i}) for i in range(25))
    await append_entries_in_slices(
        cast(BatchProducer, batches), "cl", TopicPartition("orders", 0), changes, 10
    )
    assert batches.awaited_at == [10, 20]
