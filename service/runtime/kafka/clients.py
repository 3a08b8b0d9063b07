"""The one place Kafka clients are made: :class:`KafkaCluster`.

A cluster is where the brokers are and how to talk to them (:class:`KafkaSecurity`).
Everything that opens a consumer, a producer or an admin client is given a cluster and
asks it for one, so every client gets the security settings; ``tests/test_architecture.py``
checks that no module but this one constructs an aiokafka client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaClient, AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from service.runtime.security import PLAINTEXT, KafkaSecurity
from service.runtime.settings import RuntimeSettings

__all__ = ["KafkaCluster"]


@dataclass(frozen=True, slots=True)
class KafkaCluster:
    """The brokers to bootstrap from and the security every client uses with them."""

    bootstrap_servers: str
    security: KafkaSecurity = PLAINTEXT

    @classmethod
    def of(cls, settings: RuntimeSettings) -> KafkaCluster:
        """The cluster the runtime's settings name."""
        return cls(settings.bootstrap_servers, settings.security)

    def consumer(self, *topics: str, **kwargs: Any) -> AIOKafkaConsumer:
        """An ``AIOKafkaConsumer`` (not started) with this cluster's security."""
        return AIOKafkaConsumer(
            *topics, bootstrap_servers=self.bootstrap_servers, **self._security(), **kwargs
        )

    def producer(self, **kwargs: Any) -> AIOKafkaProducer:
        """An ``AIOKafkaProducer`` (not started) with this cluster's security."""
        return AIOKafkaProducer(
            bootstrap_servers=self.bootstrap_servers, **self._security(), **kwargs
        )

    def admin(self, **kwargs: Any) -> AIOKafkaAdminClient:
        """An ``AIOKafkaAdminClient`` (not started) with this cluster's security."""
        return AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap_servers, **self._security(), **kwargs
        )

    def client(self, **kwargs: Any) -> AIOKafkaClient:
        """A bare ``AIOKafkaClient`` (metadata requests) with this cluster's security."""
        return AIOKafkaClient(
            bootstrap_servers=self.bootstrap_servers, **self._security(), **kwargs
        )

    def _security(self) -> dict[str, Any]:
        return self.security.client_kwargs()
