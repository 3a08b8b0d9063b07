"""The errors of the event-time core, as types.

Configuration problems (a bad strategy name, an empty field path) are found once, when
a pipeline is built, and are :class:`ConfigError` (a ``ValueError``), so a spec
validator can turn them into a 422. Per-record problems are :class:`TimestampError`:
the runtime sends that record to the dead-letter topic with ``reason`` and counts it.
"""

from __future__ import annotations


class CoreError(Exception):
    """Base class of every error raised by ``service.core``."""


class ConfigError(CoreError, ValueError):
    """A core component was built with invalid parameters."""


class TimestampError(CoreError):
    """A record's timestamp is missing or unparsable; ``reason`` says why, briefly.

    The reason is meant for a dead-letter header and a log line, so it is short and
    names the field and (a truncated form of) the offending value.
    """

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PartitionError(CoreError, KeyError):
    """A watermark combiner was asked about a partition it does not (or already) hold."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""
