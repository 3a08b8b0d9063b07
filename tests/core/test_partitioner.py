"""Kafka's default partitioner: murmur2 of the key bytes, as keyed producers do it."""

from __future__ import annotations

import pytest
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given, settings
from hypothesis import strategies as st

from service.core.partitioner import KeyPartitioner, murmur2, partition_for


@pytest.mark.parametrize(
    ("key", "signed"),
    [  # Kafka's own vectors (UtilsTest.testMurmur2), as signed 32-bit ints
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_gives_kafka_s_own_test_vectors(key: bytes, signed: int) -> None:
    assert murmur2(key) == signed & 0xFFFFFFFF


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_agrees_with_aiokafka_s_partitioner(data: bytes) -> None:
    assert murmur2(data) == aiokafka_murmur2(data) & 0xFFFFFFFF


@settings(max_examples=300, deadline=None)
@given(key=st.text(max_size=20), partitions=st.integers(1, 64))
def test_the_cached_partitioner_gives_the_partition_of_the_key_s_utf8_bytes(
    key: str, partitions: int
) -> None:
    partitioner = KeyPartitioner(partitions, cache_size=3)
    expected = (aiokafka_murmur2(key.encode()) & 0x7FFFFFFF) % partitions
    assert partitioner(key) == partition_for(key.encode(), partitions) == expected
    assert partitioner(key) == expected  # from the cache


def test_the_cache_is_bounded() -> None:
    partitioner = KeyPartitioner(4, cache_size=10)
    for i in range(100):
        partitioner(f"k{i}")
    assert len(partitioner.known) <= 10


def test_a_partitioner_needs_partitions() -> None:
    with pytest.raises(ValueError):
        KeyPartitioner(0)
