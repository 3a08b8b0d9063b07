"""Checking the promise ``key.partitioned``: the source is partitioned by the key.

A pipeline keyed by a payload field skips the shuffle when its spec declares the source
partitioned by that field, as a producer keyed by it with Kafka's default partitioner
would have written it. Per record the check asks the partitioner where the key belongs
(cached per key, ``core/partitioner.py``) and counts those found elsewhere: the windows
of such a key are split between partitions, so their results are wrong, and status and
``clockwork_key_partition_mismatches_total`` say so. The records are processed as
always: the check tells, it does not repair (a shuffle does; drop ``partitioned``).
"""

from __future__ import annotations

from collections.abc import Sequence

from service.core.partitioner import KeyPartitioner
from service.operators.base import InputRecord


class PartitioningCheck:
    """Counts the input records of one partition whose key belongs to another; the
    partition task runs it on every slice before the operator (prefetched ones too)."""

    __slots__ = ("_partition", "_partitioner", "mismatches")

    def __init__(self, partitioner: KeyPartitioner, partition: int) -> None:
        self._partitioner = partitioner
        self._partition = partition
        self.mismatches = 0

    def __call__(self, inputs: Sequence[InputRecord]) -> None:
        partition_of = self._partitioner
        partition = self._partition
        for record in inputs:
            if partition_of(record[0]) != partition:
                self.mismatches += 1
