"""What the API asks of a pipeline's topics when it creates, replaces or deletes one.

The API never names a topic itself nor talks to an admin client: it asks here for the
epoch a new pipeline starts in, where bounded input ends, and to drop what a reset or a
delete leaves behind. The runtime asks the same when a replacement resets its state.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from service.runtime.definition import PipelineDefinition
from service.runtime.kafka.clients import KafkaCluster
from service.runtime.kafka.end_offsets import probe_end_offsets
from service.runtime.kafka.topics import topic_names
from service.runtime.pipeline_topics.cleanup import (
    delete_old_changelogs,
    delete_shuffle_topics,
    reset_state,
)
from service.runtime.pipeline_topics.names import first_free_state_epoch

__all__ = ["PinnedEnds", "PipelineTopics"]

logger = logging.getLogger(__name__)

PinnedEnds = tuple[tuple[str, int, int], ...]
"""``(topic, partition, end offset)`` of every source partition of bounded input."""


class PipelineTopics:
    """A pipeline's topics and state epochs on one cluster."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self._cluster = cluster

    async def first_free_epoch(self, name: str) -> int:
        """The state epoch a pipeline created as ``name`` starts in: past every epoch a
        deleted pipeline of this name left topics in (see
        :func:`~service.runtime.pipeline_topics.names.first_free_state_epoch`). Raises
        when the broker cannot list its topics: a guess could reuse an epoch."""
        return first_free_state_epoch(name, await topic_names(self._cluster))

    async def bounded_ends(self, pipeline: str, topics: Sequence[str]) -> PinnedEnds | None:
        """Where every partition of ``topics`` ends now, to pin in the store so that
        every replica reads bounded input to the same offsets; None (each session reads
        them when it starts) when they cannot be read or a topic does not exist yet."""
        try:
            ends = await probe_end_offsets(self._cluster, topics)
        except Exception as exc:  # the sessions read them themselves
            logger.warning("pipeline %r: end offsets not read: %r", pipeline, exc)
            return None
        if {tp.topic for tp in ends} != set(topics):
            return None
        return tuple(sorted((tp.topic, tp.partition, end) for tp, end in ends.items()))

    async def created(self, definition: PipelineDefinition) -> None:
        """A pipeline was created in ``definition.state_epoch``: what its deleted
        predecessors of the same name left in older epochs goes, as after a reset."""
        if definition.state_epoch > 1:
            await delete_old_changelogs(self._cluster, definition)

    async def reset(self, definition: PipelineDefinition) -> None:
        """Discard the checkpointed state and positions of ``definition``'s epoch (a
        replacement with ``reset_state``); see
        :func:`~service.runtime.pipeline_topics.cleanup.reset_state`."""
        await reset_state(self._cluster, definition)

    async def deleted(self, definition: PipelineDefinition, state_epoch: int) -> None:
        """A pipeline was deleted (and stopped here): its positions are nulled and its
        shuffle topics go. Its changelog stays: a replica that has not followed the
        delete yet may still checkpoint to it; a new pipeline of the same name starts
        in the next epoch."""
        definition = replace(definition, state_epoch=state_epoch)
        await reset_state(self._cluster, definition)
        if definition.shuffle is not None:
            await delete_shuffle_topics(self._cluster, definition)
