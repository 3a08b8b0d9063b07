"""How the runtime talks to Kafka and how often it checkpoints: one frozen value.

Separate from :class:`~service.runtime.definition.PipelineDefinition` because these are
properties of the deployment (the broker, its timeouts), not of a pipeline.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

from service.runtime.security import PLAINTEXT, KafkaSecurity


@dataclass(frozen=True, slots=True)
class SchemaRegistrySettings:
    """Where the schema registry is and how to reach it, named as Confluent's clients
    name them (``SERVICE_SCHEMA_REGISTRY_*``; docs/formats.md)."""

    url: str
    """One URL, or several comma-separated (tried in turn)."""
    basic_auth_user_info: str | None = field(default=None, repr=False)
    """``user:password`` for HTTP basic auth."""
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    timeout_s: float = 5.0
    """One request's timeout; an unreachable registry is retried by the runtime."""

    def client_config(self) -> dict[str, Any]:
        """The configuration of confluent-kafka's registry client."""
        config: dict[str, Any] = {"url": self.url, "timeout": self.timeout_s, "max.retries": 0}
        for name, value in (
            ("basic.auth.user.info", self.basic_auth_user_info),
            ("ssl.ca.location", self.ssl_ca_location),
            ("ssl.certificate.location", self.ssl_certificate_location),
            ("ssl.key.location", self.ssl_key_location),
        ):
            if value is not None:
                config[name] = value
        return config


@dataclass(frozen=True, slots=True)
class RuntimeSettings:
    bootstrap_servers: str
    security: KafkaSecurity = PLAINTEXT
    """TLS and SASL for every client (``KafkaCluster.of(settings)`` makes them)."""
    schema_registry: SchemaRegistrySettings | None = None
    """For the sources in Confluent's wire format (None: such pipelines wait, failed)."""
    checkpoint_interval_ms: int = 5000
    """A partition's state and offset are made durable at least this often."""
    fetch_max_wait_ms: int = 20
    """Short: some brokers (Tansu) answer a waiting fetch only when this expires."""
    fetch_timeout_ms: int = 100
    """How long one ``getmany`` may wait; bounds the reaction to stop/pause."""
    max_records: int = 20_000
    """Records per ``getmany``: the batch a partition's operator gets at once."""
    max_partition_fetch_bytes: int = 4 * 1024 * 1024
    fetch_max_bytes: int = 50 * 1024 * 1024
    """Per fetch response, all partitions together (aiokafka's default). Some brokers
    (Tansu) ignore the per-partition limit but honour this one."""
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int | None = None
    """Default: a third of the session timeout."""
    request_timeout_ms: int = 30_000
    max_pending_bytes: int = 32 * 1024 * 1024
    """Produced bytes not yet acknowledged before the consumer loop waits (backpressure)."""
    max_batch_bytes: int = 1024 * 1024
    transaction_timeout_ms: int = 60_000
    """Exactly-once delivery: the broker aborts a transaction open this long (a producer
    that died without a successor). Above the checkpoint interval, with room for a slow
    commit; Kafka's default."""
    prefetch_max_records: int = 250_000
    """Records read and decoded at most while a session joins its group (prefetch.py);
    0: none. A decoded record takes ~0.7 KB until processed (~175 MB at the default)."""
    replication_factor: int = 1
    """For created topics (aiokafka cannot ask for the broker's default); 3 in production."""
    shuffle_frame_max_bytes: int = 512 * 1024
    """The largest frame stage 1 writes into the shuffle topic (``core/frames.py``): well
    below the broker's ``message.bytes`` (1 MiB by default) and ``max_batch_bytes``, so a
    frame always fits a batch of its own; a flush with more rows splits."""
    shuffle_trim_interval_s: float = 30.0
    """How often at most the keyed stage of a shuffled pipeline deletes the shuffle
    records it has checkpointed past (pipeline_topics/trim.py)."""
    table_partition_discovery_s: float = 60.0
    """How often a lookup join's table reader asks whether its topics gained partitions
    (and then reads the new ones from their start), as Flink's Kafka source discovers
    them (``scan.topic-partition-discovery.interval``)."""
    restart_backoff_initial_s: float = 0.5
    restart_backoff_max_s: float = 30.0
    broker_check_interval_s: float = 2.0
    metrics_interval_s: float = 1.0
    state_backend: str = "memory"
    """``SERVICE_STATE_BACKEND``: a pipeline's state backend when its spec names none."""
    state_dir: str = ""
    """``SERVICE_STATE_DIR``: the rocksdb backend's stores (empty: the system's temporary
    directory's ``clockwork-state``)."""
    standby_replicas: int = 0
    """``SERVICE_STANDBY_REPLICAS``: a rocksdb pipeline's standbys per partition when its
    spec names none (consumer_group/standby.py)."""
    member: str = ""
    """This process's name in the groups it joins (``SERVICE_INSTANCE_ID``): what the
    status names a partition's standbys by. Empty: the host name and the process id."""
    gc_threshold: tuple[int, int, int] | None = (500_000, 20, 100)
    """Set by ``Runtime.start`` (None: leave the interpreter's). Window state is millions
    of small long-lived objects; with the default (700, 10, 10) the cyclic collector
    rescans them so often that it took ~40% of the end-to-end benchmark's time. The first
    number counts the net growth of tracked objects, and one fetch alone holds ~400k
    (~200k aiokafka batch records, each with its headers list): at 50k a young
    collection ran every ~25k input records and scanned the fetch in hand each time (37
    collections, 0.34 s CPU, ~7% of the 1M e2e run); at 500k, 0-1 (0.06 s). The state's
    own growth still triggers them, each over at most 500k young objects (tens of ms);
    nothing here relies on cycles being freed sooner."""

    def member_name(self) -> str:
        """:attr:`member`, or the host name and the process id."""
        return self.member or f"{socket.gethostname()}-{os.getpid()}"
