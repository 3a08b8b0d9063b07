"""Topics on the cluster, for any caller: creating, growing, describing, listing.

Below any pipeline: what a pipeline's topics are called and how they are laid out is
``runtime/pipeline_topics``'s business; this module only talks to the broker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic

from service.runtime.kafka.access import AuthorizationError
from service.runtime.kafka.clients import KafkaCluster

logger = logging.getLogger(__name__)

_TOPIC_ALREADY_EXISTS = 36
_TOPIC_AUTHORIZATION_FAILED = 29


class TopicError(RuntimeError):
    """A topic is missing, or could not be created or grown."""


class TopicCreationFailed(TopicError):
    """The broker answered a topic's creation with an error code other than "exists"
    and "not authorized"; :attr:`entry` is its answer as it came (name, code, ...)."""

    def __init__(self, entry: tuple[Any, ...]) -> None:
        name, code, *rest = entry
        super().__init__(f"could not create topic {name}: error {code} {rest}")
        self.entry = entry


async def create_topics(
    admin: AIOKafkaAdminClient,
    wanted: dict[str, tuple[int, dict[str, str]]],
    replication_factor: int,
) -> None:
    """Create ``wanted`` (name -> partitions, configs); one that exists already is
    left as it is. :class:`AuthorizationError` names those the broker refused us,
    :class:`TopicCreationFailed` is the first other error the broker answered."""
    if not wanted:
        return
    response = await admin.create_topics(
        [
            NewTopic(name, partitions, replication_factor, topic_configs=configs)
            for name, (partitions, configs) in wanted.items()
        ]
    )
    refused = [n for n, code, *_ in response.topic_errors if code == _TOPIC_AUTHORIZATION_FAILED]
    if refused:
        raise AuthorizationError(refused, create=True)
    for entry in response.topic_errors:
        if entry[1] not in (0, _TOPIC_ALREADY_EXISTS):
            raise TopicCreationFailed(entry)


async def grow_topic(admin: AIOKafkaAdminClient, topic: str, width: int) -> int:
    """Add partitions to ``topic`` up to ``width``; the count the broker then describes.

    Raises :class:`TopicError` when the broker refuses (Tansu cannot add partitions).
    """
    try:
        await admin.create_partitions({topic: NewPartitions(total_count=width)})
    except Exception as exc:
        raise TopicError(
            f"topic {topic} could not be grown to {width} partitions: {exc!r}"
        ) from exc
    logger.info("topic %s grown to %d partitions", topic, width)
    return (await wait_described(admin, {topic: width}, {}))[topic]


async def wait_described(
    admin: AIOKafkaAdminClient,
    at_least: dict[str, int],
    counts: dict[str, int],
    timeout_s: float = 15.0,
) -> dict[str, int]:
    """The partition counts of topics just created or grown, once the broker describes
    each with at least the given number of partitions (``counts``: what is known).

    Apache Kafka answers CreateTopics (and CreatePartitions) once its controller has
    the change; the broker that describes it may learn of it a moment later and until
    then answers "unknown topic", or the old count (Tansu knows it at once). Without
    this wait, a pipeline's first start on Kafka could fail its changelog check at
    random and restart.
    """
    found = {t: counts.get(t, 0) for t in at_least}
    missing = [t for t, n in at_least.items() if found[t] < n]
    deadline = time.monotonic() + timeout_s
    while missing:
        if time.monotonic() > deadline:
            raise TopicError(f"topics not described within {timeout_s}s: {missing}")
        await asyncio.sleep(0.05)
        found.update(await described_partition_counts(admin, missing))
        missing = [t for t, n in at_least.items() if found[t] < n]
    return found


async def topic_names(cluster: KafkaCluster) -> set[str]:
    """Every topic the broker has."""
    admin = cluster.admin(request_timeout_ms=15_000)
    try:
        await admin.start()
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def partition_counts(cluster: KafkaCluster, topics: list[str]) -> dict[str, int]:
    """The partition counts of those of ``topics`` that exist."""
    admin = cluster.admin(request_timeout_ms=15_000)
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        return await described_partition_counts(admin, [t for t in topics if t in existing])
    finally:
        await admin.close()


async def described_partition_counts(
    admin: AIOKafkaAdminClient, topics: list[str]
) -> dict[str, int]:
    """Partition counts of those of ``topics`` that exist; :class:`AuthorizationError`
    for any the broker will not describe to us (Kafka says so whether or not it exists,
    so "does not exist" would mislead)."""
    counts: dict[str, int] = {}
    refused = []
    for topic in await admin.describe_topics(topics):
        code = topic.get("error_code", 0)
        if code == 0:
            counts[topic["topic"]] = len(topic["partitions"])
        elif code == _TOPIC_AUTHORIZATION_FAILED:
            refused.append(topic["topic"])
    if refused:
        raise AuthorizationError(refused)
    return counts
