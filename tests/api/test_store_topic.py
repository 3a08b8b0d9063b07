"""The store's compacted topic: made by ``kafka/topics.py``'s ``create_topics``, with
the store's own answers to what the broker says (a fake admin client, no broker)."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError

from service.api.store import StoreError, ensure_compacted_topic
from service.runtime.kafka.access import AuthorizationError


class FakeAdmin:
    def __init__(self, answer: list[tuple[Any, ...]] | BaseException) -> None:
        self.answer = answer
        self.asked: list[Any] = []
        self.closed = False

    async def start(self) -> None:
        pass

    async def create_topics(self, topics: list[Any]) -> Any:
        self.asked.extend(topics)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return type("Response", (), {"topic_errors": self.answer})()

    async def close(self) -> None:
        self.closed = True


class FakeCluster:
    def __init__(self, admin: FakeAdmin) -> None:
        self._admin = admin
        self.client_ids: list[str] = []

    def admin(self, client_id: str) -> FakeAdmin:
        self.client_ids.append(client_id)
        return self._admin


async def ensure(answer: list[tuple[Any, ...]] | BaseException) -> FakeAdmin:
    admin = FakeAdmin(answer)
    await ensure_compacted_topic(FakeCluster(admin), "clockwork.pipelines", 3, "c-admin")  # type: ignore[arg-type]
    return admin


async def test_one_compacted_partition_created_or_left_as_it_is() -> None:
    for code in (0, 36):  # created, already exists
        admin = await ensure([("clockwork.pipelines", code, None)])
        [topic] = admin.asked
        assert (topic.name, topic.num_partitions, topic.replication_factor) == (
            "clockwork.pipelines",
            1,
            3,
        )
        assert topic.topic_configs == {"cleanup.policy": "compact"}
        assert admin.closed


async def test_a_refusal_names_the_topic() -> None:
    with pytest.raises(AuthorizationError) as caught:
        await ensure([("clockwork.pipelines", 29, None)])
    assert caught.value.topics == ["clockwork.pipelines"]


async def test_another_error_code_is_a_store_error_with_the_answer() -> None:
    with pytest.raises(StoreError) as caught:
        await ensure([("clockwork.pipelines", 37, "invalid partitions")])
    assert str(caught.value) == (
        "creating the topic 'clockwork.pipelines': "
        "('clockwork.pipelines', 37, 'invalid partitions')"
    )
    assert caught.value.__cause__ is None


async def test_a_kafka_error_is_a_store_error_unless_the_topic_exists() -> None:
    await ensure(TopicAlreadyExistsError())
    cause = KafkaConnectionError("no broker")
    with pytest.raises(StoreError) as caught:
        await ensure(cause)
    assert caught.value.__cause__ is cause
