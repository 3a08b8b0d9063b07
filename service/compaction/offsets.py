"""The offset store: what the job has consumed, kept in the output dataset itself.

Each successful run writes ``<output>/_clockwork/offsets/<run>.json`` (``<run>`` a
zero-padded sequence number) AFTER its data is committed; the newest file is where the
next run starts. Files are written to a temporary name and renamed into place, through
Hadoop's FileSystem API (the same one Spark writes the data with), so any path Spark
can write to works: ``file:``, ``hdfs:``, ``s3a:``... Old files are kept as a history
(they are small); the leading underscore keeps Spark's Parquet reader away from them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from service.compaction.errors import OffsetStoreError
from service.compaction.ranges import TopicPartition

OFFSETS_DIR = "_clockwork/offsets"
_RUN_DIGITS = 10


@dataclass(frozen=True, slots=True)
class StoredOffsets:
    """One run's record: the next offset to read per partition, and when it ran."""

    run: int
    offsets: dict[TopicPartition, int]
    written_at_ms: int

    def to_dict(self) -> dict[str, Any]:
        topics: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(self.offsets.items()):
            topics.setdefault(topic, {})[str(partition)] = offset
        return {"run": self.run, "written_at_ms": self.written_at_ms, "offsets": topics}

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> StoredOffsets:
        return cls.from_dict(json.loads(data))

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> StoredOffsets:
        """The inverse of :meth:`to_dict`; ``KeyError``, ``ValueError`` or ``TypeError``
        when ``body`` is not one."""
        offsets = {
            (topic, int(p)): int(o)
            for topic, parts in body["offsets"].items()
            for p, o in parts.items()
        }
        return cls(run=int(body["run"]), offsets=offsets, written_at_ms=int(body["written_at_ms"]))


class OffsetStore:
    """Reads and writes :class:`StoredOffsets` under ``<output>/_clockwork/offsets``."""

    def __init__(self, spark: SparkSession, output: str) -> None:
        jvm: Any = spark.sparkContext._jvm
        self._jvm = jvm
        self._dir = jvm.org.apache.hadoop.fs.Path(f"{output.rstrip('/')}/{OFFSETS_DIR}")
        self._fs = self._dir.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def latest(self) -> StoredOffsets | None:
        """The newest run's offsets, or ``None`` before the first run."""
        runs = self._runs()
        if not runs:
            return None
        name = f"{max(runs):0{_RUN_DIGITS}d}.json"
        try:
            stored = StoredOffsets.from_json(self._read(name))
        except (ValueError, KeyError, TypeError) as exc:
            raise OffsetStoreError(f"{self._dir}/{name} is unreadable: {exc}") from exc
        return stored

    def offsets(self, topics: list[str]) -> dict[TopicPartition, int]:
        """The stored next offsets of ``topics`` (empty for topics never read)."""
        latest = self.latest()
        if latest is None:
            return {}
        wanted = set(topics)
        return {tp: o for tp, o in latest.offsets.items() if tp[0] in wanted}

    def commit(self, offsets: Mapping[TopicPartition, int]) -> StoredOffsets:
        """Store ``offsets`` as a new run, merged over the previous run's offsets (so
        topics not read this time keep theirs). Atomic: temporary file, then rename."""
        latest = self.latest()
        merged = dict(latest.offsets) if latest else {}
        merged.update(offsets)
        run = (latest.run if latest else 0) + 1
        stored = StoredOffsets(run=run, offsets=merged, written_at_ms=int(time.time() * 1000))
        name = f"{run:0{_RUN_DIGITS}d}.json"
        path = self._jvm.org.apache.hadoop.fs.Path(self._dir, name)
        temporary = self._jvm.org.apache.hadoop.fs.Path(self._dir, f".{name}.tmp")
        self._fs.mkdirs(self._dir)
        stream = self._fs.create(temporary, True)
        try:
            stream.write(stored.to_json())
        finally:
            stream.close()
        if self._fs.exists(path) or not self._fs.rename(temporary, path):
            self._fs.delete(temporary, False)
            raise OffsetStoreError(f"could not store {path}: another run stored it first?")
        return stored

    def _runs(self) -> list[int]:
        if not self._fs.exists(self._dir):
            return []
        runs = []
        for status in self._fs.listStatus(self._dir):
            name = status.getPath().getName()
            stem = name.removesuffix(".json")
            if name.endswith(".json") and stem.isdigit():
                runs.append(int(stem))
        return runs

    def _read(self, name: str) -> bytes:
        stream = self._fs.open(self._jvm.org.apache.hadoop.fs.Path(self._dir, name))
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()
