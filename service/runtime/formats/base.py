"""What every payload format's reader is: a batch of records in, one value per record out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Protocol

Failure = tuple[Any, str, str]
"""A record that did not decode: ``(record, reason, detail)``; the reason is one of
:mod:`.wire`'s ``REASON_*``."""


class _Failed:
    __slots__ = ()

    def __repr__(self) -> str:
        return "FAILED"


FAILED: Final = _Failed()
"""The value of a record that did not decode (its failure says why)."""


class PayloadReader(Protocol):
    """Decodes the values of a batch of Kafka records (anything with ``.value``)."""

    def read(self, records: Sequence[Any], values: list[Any], failures: list[Failure]) -> None:
        """Append one value per record to ``values``, in order: the decoded payload, or
        :data:`FAILED` for a record that did not decode, which then is in ``failures``."""
        ...


class SchemaNotResolved(LookupError):
    """A record names a schema id nobody asked the registry for: the runtime decodes a
    batch only after resolving every id in it (so a good record is never dead-lettered
    for a schema that was merely not fetched yet)."""
