"""The compaction job's own exceptions."""

from __future__ import annotations


class CompactionError(RuntimeError):
    """Base class of every error the compaction job raises on purpose."""


class KafkaReadError(CompactionError):
    """Kafka could not be read as planned (broker unreachable, fetch error, stalled read)."""


class DataLossError(CompactionError):
    """Records the job should read are gone (retention deleted them before it ran)."""


class OffsetStoreError(CompactionError):
    """The offsets stored in the output dataset are unreadable or inconsistent."""


class ResultSchemaError(CompactionError):
    """A ``--result-schema`` value is not a valid Spark DDL or JSON schema."""
