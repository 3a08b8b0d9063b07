"""A checkpoint's changelog records as encoded (runtime/consumer_group/changelog.py);
no broker."""

from __future__ import annotations

import tracemalloc

import orjson
from aiokafka import TopicPartition

from service.runtime.consumer_group.changelog import encode_checkpoint

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
