"""Which partition a key belongs to: Kafka's default partitioner (murmur2 of the key bytes).

The keyed shuffle writes each record to ``murmur2(utf8(key)) & 0x7fffffff mod n``, the
partition a keyed Kafka producer (Java, librdkafka's ``murmur2_random``, aiokafka) picks
for that key, so a topic that producers keyed by the pipeline's key is partitioned
exactly as the shuffle would partition it: what ``key.partitioned`` promises, and what
is checked per record.

Why a cache: murmur2 in pure Python costs ~1-2 us for a short key, more than the rest
of routing a record; keys repeat (users, devices, orders in flight), so the partition of
each recent key is kept in a dict (~50 ns a lookup), emptied when it reaches its bound.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit MurmurHash2 of ``data`` (``Utils.murmur2``), as an unsigned int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length - length % 4
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length - end
    if tail == 3:
        h ^= data[end + 2] << 16
    if tail >= 2:
        h ^= data[end + 1] << 8
    if tail >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` among ``partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class KeyPartitioner:
    """:func:`partition_for` of text keys (UTF-8), with the recent keys' answers kept."""

    __slots__ = ("_limit", "known", "partitions")

    def __init__(self, partitions: int, cache_size: int = 100_000) -> None:
        if type(partitions) is not int or partitions <= 0:
            raise ValueError(f"partitions must be an int > 0, not {partitions!r}")
        self.partitions = partitions
        self.known: dict[str, int] = {}
        """The recent keys' partitions: a hot loop may read it first and call only on a
        miss (a call per record costs more than the lookup)."""
        self._limit = cache_size

    def __call__(self, key: str) -> int:
        found = self.known.get(key)
        if found is not None:
            return found
        cache = self.known
        if len(cache) >= self._limit:
            cache.clear()  # cheaper than an LRU's bookkeeping per hit; refills at once
        partition = cache[key] = partition_for(key.encode(), self.partitions)
        return partition
