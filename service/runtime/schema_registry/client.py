"""Writer schemas by id from a Confluent-compatible schema registry, with
confluent-kafka's ``AsyncSchemaRegistryClient`` (which caches each id it fetched).

Only an answer "no such schema" (HTTP 404) makes an id unknown, and so its records
dead letters; anything else (no connection, a timeout, a 5xx, a refused login) is
:class:`RegistryUnavailable`, which the fetch loop waits out: a good record is never
dead-lettered because the registry was down.

A schema that names others (Confluent's schema references) is added with all of them,
fetched by subject and version (:mod:`.references`; the client caches each); one the
registry lacks (a 404) makes the schema's records ``unknown_schema`` with its name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from confluent_kafka.schema_registry import (
    AsyncSchemaRegistryClient,
    Schema,
    SchemaRegistryError,
)

from service.runtime.formats.schemas import WriterSchemas
from service.runtime.schema_registry.references import (
    UnresolvedReference,
    Version,
    resolve_references,
)
from service.runtime.settings import SchemaRegistrySettings

_NOT_FOUND = 404

T = TypeVar("T")


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

    async def _ask(self, request: Callable[..., Awaitable[T]], *args: Any) -> T:
        """The registry's answer to ``request(client, *args)``: its result, or its
        ``SchemaRegistryError`` (an HTTP answer, which each caller reads its own way);
        raises :class:`RegistryUnavailable` where there is no answer."""
        client = self._connected()
        try:
            return await request(client, *args)
        except SchemaRegistryError:
            raise
        except Exception as exc:
            # The client's transport errors come from httpx or its successor httpx2,
            # whichever confluent-kafka found (schema_registry/common/_httpx_compat):
            # any failure without an answer is the registry being unavailable.
            raise RegistryUnavailable(
                f"the schema registry is unreachable: {type(exc).__name__}: {exc}"
            ) from exc

    async def resolve(self, schemas: WriterSchemas[Any], ids: Iterable[int]) -> None:
        """Fetch each of ``ids`` into ``schemas`` (its schema, or that there is none);
        raises :class:`RegistryUnavailable`, leaving the ids not fetched yet missing."""
        for schema_id in sorted(ids):
            try:
                schema = await self._ask(AsyncSchemaRegistryClient.get_schema, schema_id)
            except SchemaRegistryError as exc:
                if exc.http_status_code == _NOT_FOUND:
                    schemas.absent(schema_id)
                    continue
                raise _unavailable(exc) from exc
            try:
                references = await resolve_references(schema.references or (), self._version)
            except UnresolvedReference as exc:
                schemas.unresolved(schema_id, str(exc))
                continue
            schemas.add(
                schema_id, schema.schema_type or "AVRO", schema.schema_str or "", references
            )

    async def _version(self, subject: str, version: int) -> Version | None:
        """The schema of ``subject`` at ``version`` (deleted or not, as a reference
        still names it), None where the registry has none; raises
        :class:`RegistryUnavailable`."""
        try:
            found = await self._ask(AsyncSchemaRegistryClient.get_version, subject, version, True)
        except SchemaRegistryError as exc:
            if exc.http_status_code == _NOT_FOUND:
                return None
            raise _unavailable(exc) from exc
        schema = found.schema
        return Version(
            schema.schema_type or "AVRO", schema.schema_str or "", schema.references or ()
        )

    async def register(self, subject: str, schema_type: str, text: str) -> int:
        """The id of ``text`` under ``subject``, registering it if new (the registry's
        compatibility rules apply: an incompatible schema raises its
        ``SchemaRegistryError``, status 409); raises :class:`RegistryUnavailable`."""
        schema = Schema(text, schema_type)
        try:
            return int(await self._ask(AsyncSchemaRegistryClient.register_schema, subject, schema))
        except SchemaRegistryError as exc:
            if exc.http_status_code in (408, 429) or exc.http_status_code >= 500:
                raise _unavailable(exc) from exc
            raise

    async def compatible(self, subject: str, schema_type: str, text: str) -> bool:
        """Whether ``text`` may be registered under ``subject`` by its compatibility
        rules (True for a subject without versions); raises :class:`RegistryUnavailable`."""
        schema = Schema(text, schema_type)
        try:
            return bool(
                await self._ask(AsyncSchemaRegistryClient.test_compatibility, subject, schema)
            )
        except SchemaRegistryError as exc:
            if exc.http_status_code == _NOT_FOUND:  # no such subject (or version) yet
                return True
            raise _unavailable(exc) from exc

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()


def _unavailable(exc: SchemaRegistryError) -> RegistryUnavailable:
    """An answer that is neither the result nor a refusal of the request itself."""
    return RegistryUnavailable(
        f"the schema registry answered {exc.http_status_code}: {exc.error_message}"
    )
