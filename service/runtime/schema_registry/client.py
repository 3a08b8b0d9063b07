"""Writer schemas by id from a Confluent-compatible schema registry, with
confluent-kafka's ``AsyncSchemaRegistryClient`` (which caches each id it fetched).

Only an answer "no such schema" (HTTP 404) makes an id unknown, and so its records
dead letters; anything else (no connection, a timeout, a 5xx, a refused login) is
:class:`RegistryUnavailable`, which the fetch loop waits out: a good record is never
dead-lettered because the registry was down.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka.schema_registry import (
    AsyncSchemaRegistryClient,
    Schema,
    SchemaRegistryError,
)

from service.runtime.formats.schemas import WriterSchemas
from service.runtime.settings import SchemaRegistrySettings

_NOT_FOUND = 404


class RegistryUnavailable(ConnectionError):
    """The registry did not answer, or not with a schema or a "not found"."""


class SchemaRegistry:
    """One registry client; :meth:`resolve` fills a format's schema cache."""

    def __init__(self, settings: SchemaRegistrySettings | None) -> None:
        self._settings = settings
        self._client: AsyncSchemaRegistryClient | None = None

    def _connected(self) -> AsyncSchemaRegistryClient:
        if self._settings is None:
            raise RegistryUnavailable(
                "no schema registry is configured (SERVICE_SCHEMA_REGISTRY_URL)"
            )
        if self._client is None:
            self._client = AsyncSchemaRegistryClient(self._settings.client_config())
        return self._client

    async def resolve(self, schemas: WriterSchemas[Any], ids: Iterable[int]) -> None:
        """Fetch each of ``ids`` into ``schemas`` (its schema, or that there is none);
        raises :class:`RegistryUnavailable`, leaving the ids not fetched yet missing."""
        client = self._connected()
        for schema_id in sorted(ids):
            try:
                schema = await client.get_schema(schema_id)
            except SchemaRegistryError as exc:
                if exc.http_status_code == _NOT_FOUND:
                    schemas.absent(schema_id)
                    continue
                raise RegistryUnavailable(
                    f"the schema registry answered {exc.http_status_code}: {exc.error_message}"
                ) from exc
            except Exception as exc:
                # The client's transport errors come from httpx or its successor httpx2,
                # whichever confluent-kafka found (schema_registry/common/_httpx_compat):
                # any failure without an answer is the registry being unavailable.
                raise RegistryUnavailable(
                    f"the schema registry is unreachable: {type(exc).__name__}: {exc}"
                ) from exc
            schemas.add(schema_id, schema.schema_type or "AVRO", schema.schema_str or "")

    async def register(self, subject: str, schema_type: str, text: str) -> int:
        """The id of ``text`` under ``subject``, registering it if new (the registry's
        compatibility rules apply: an incompatible schema raises its
        ``SchemaRegistryError``, status 409); raises :class:`RegistryUnavailable`."""
        client = self._connected()
        try:
            return int(await client.register_schema(subject, Schema(text, schema_type)))
        except SchemaRegistryError as exc:
            if exc.http_status_code in (408, 429) or exc.http_status_code >= 500:
                raise RegistryUnavailable(
                    f"the schema registry answered {exc.http_status_code}: {exc.error_message}"
                ) from exc
            raise
        except Exception as exc:  # no answer: see resolve()
            raise RegistryUnavailable(
                f"the schema registry is unreachable: {type(exc).__name__}: {exc}"
            ) from exc

    async def compatible(self, subject: str, schema_type: str, text: str) -> bool:
        """Whether ``text`` may be registered under ``subject`` by its compatibility
        rules (True for a subject without versions); raises :class:`RegistryUnavailable`."""
        client = self._connected()
        try:
            return bool(await client.test_compatibility(subject, Schema(text, schema_type)))
        except SchemaRegistryError as exc:
            if exc.http_status_code == _NOT_FOUND:  # no such subject (or version) yet
                return True
            raise RegistryUnavailable(
                f"the schema registry answered {exc.http_status_code}: {exc.error_message}"
            ) from exc
        except Exception as exc:
            raise RegistryUnavailable(
                f"the schema registry is unreachable: {type(exc).__name__}: {exc}"
            ) from exc

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
