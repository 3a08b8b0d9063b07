"""What Kafka takes as a topic name, as the source and sink rules check it."""

from __future__ import annotations

from service.pipeline_spec.rules.base import JsonSchema, Loc, Problem

__all__ = ["KAFKA_REFUSED_TOPICS", "MAX_TOPIC_LENGTH", "NOT_REFUSED", "refused_topic"]

MAX_TOPIC_LENGTH = 249
"""Kafka's limit on a topic name (the spec's pattern says it for the topics it names)."""

KAFKA_REFUSED_TOPICS = frozenset({".", ".."})
"""Names the spec's topic pattern allows but Kafka refuses."""

NOT_REFUSED: JsonSchema = {"not": {"enum": sorted(KAFKA_REFUSED_TOPICS)}}
"""The fragment of a topic name Kafka does not refuse."""


def refused_topic(loc: Loc, topic: str) -> Problem:
    """The problem of a topic name Kafka refuses."""
    return Problem(loc, "invalid_topic_name", "Kafka refuses the topic names '.' and '..'", topic)
