"""Trimming the shuffle topic behind the keyed stage: Kafka's DeleteRecords.

A routed record is read once, by the keyed stage, and is never needed again once a
checkpoint of that stage covers it: a restore resumes from the checkpointed offset.
So after each checkpoint whose offset commit the group accepted, the keyed stage asks
the broker to delete the shuffle partitions' records below the committed offsets (at
most every ``RuntimeSettings.shuffle_trim_interval_s``). Only an accepted commit
counts: the group fences a zombie owner's commit by its generation, so a trim never
removes records that the partition's current owner restored to before them.

This is the topic's only cleanup (``creation.SHUFFLE_CONFIGS`` has no time retention: a
backfill's old timestamps would delete unread records). A broker that refuses
DeleteRecords (Tansu drops the connection) keeps every record; the trimmer then waits
``_RETRY_S`` before trying again, and says why in the log and the metric's outcome.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from aiokafka import TopicPartition
from aiokafka.admin import RecordsToDelete
from prometheus_client import Counter

from service.runtime.kafka.clients import KafkaCluster

logger = logging.getLogger(__name__)

_RETRY_S = 600.0
"""After a refused trim: the broker may not support it, so not every interval."""

_CLOSE_WAIT_S = 10.0
"""How long a stop waits for a trim: it must not hold a shutdown up for long."""


class ShuffleTrimmer:
    """Deletes the keyed stage's shuffle records below its committed offsets."""

    def __init__(
        self, cluster: KafkaCluster, pipeline: str, interval_s: float, trims: Counter
    ) -> None:
        self._cluster = cluster
        self._pipeline = pipeline
        self._interval_s = interval_s
        self._trims = trims
        self._committed: dict[TopicPartition, int] = {}
        self._trimmed: dict[TopicPartition, int] = {}
        self._next_at = 0.0
        """Not before: the interval since the last trim, or the wait after a refusal."""
        self._refused = False
        self._task: asyncio.Task[None] | None = None

    def committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """The group accepted these offsets: everything below them may go."""
        for tp, offset in offsets.items():
            if offset > self._committed.get(tp, 0):
                self._committed[tp] = offset
        if self._task is not None or time.monotonic() < self._next_at:
            return
        due = self._due()
        if due:
            self._task = asyncio.get_running_loop().create_task(
                self._trim(due), name=f"clockwork-shuffle-trim-{self._pipeline}"
            )

    def _due(self) -> dict[TopicPartition, int]:
        return {
            tp: offset
            for tp, offset in self._committed.items()
            if offset > self._trimmed.get(tp, 0)
        }

    async def _trim(self, due: dict[TopicPartition, int]) -> None:
        admin = self._cluster.admin(request_timeout_ms=15_000)
        try:
            await admin.start()
            await admin.delete_records({tp: RecordsToDelete(o) for tp, o in due.items()})
        except Exception as exc:
            self._next_at = time.monotonic() + _RETRY_S
            self._refused = True
            self._trims.labels(self._pipeline, "refused").inc()
            logger.warning(
                "pipeline %s: the shuffle topic was not trimmed (%r); its records are kept "
                "(it has no time retention); trying again in %.0f s",
                self._pipeline,
                exc,
                _RETRY_S,
            )
        else:
            self._trimmed.update(due)
            self._refused = False
            self._next_at = time.monotonic() + self._interval_s
            self._trims.labels(self._pipeline, "done").inc()
        finally:
            self._task = None
            try:
                await admin.close()
            except Exception:  # a dropped connection may fail the close too
                logger.debug("pipeline %s: trim admin close failed", self._pipeline)

    async def close(self) -> None:
        """Finish a trim under way, then trim what was committed since (unless the
        broker refused lately): a stopped stage leaves nothing behind it to read."""
        task = self._task
        if task is not None:
            await asyncio.wait({task}, timeout=_CLOSE_WAIT_S)
        due = self._due()
        if due and self._task is None and not self._refused:
            await asyncio.wait_for(self._trim(due), _CLOSE_WAIT_S)
