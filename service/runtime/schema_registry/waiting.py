"""Fetching the writer schemas a batch names, waiting out a registry that does not answer.

A source's fetch loop and a lookup table's reader both hold a batch whose records name
schema ids not fetched yet. Neither may dead-letter a good record because the registry
is down, so both ask again with backoff, the batch in hand, and say why they wait
(the stage's or the table's status) until the registry answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol, TypeVar

from service.runtime.formats.schemas import WriterSchemas
from service.runtime.schema_registry.client import RegistryUnavailable

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Resolver(Protocol):
    """What fills a schema cache: :class:`~.client.SchemaRegistry`."""

    async def resolve(self, schemas: WriterSchemas[Any], ids: Iterable[int]) -> None: ...


async def _as_is(coroutine: Coroutine[Any, Any, T]) -> T:
    return await coroutine


async def resolve_waiting(
    registry: Resolver,
    wanted: Iterable[tuple[WriterSchemas[Any], set[int]]],
    *,
    pipeline: str,
    what: str,
    backoff_s: tuple[float, float],
    say: Callable[[str | None], None],
    wait: Callable[[Coroutine[Any, Any, Any]], Awaitable[Any]] = _as_is,
) -> None:
    """Fetch every ``(schemas, ids)`` of ``wanted`` into its cache. While the registry
    cannot be reached: log once, ``say`` the reason with the next retry, sleep
    (doubling from ``backoff_s[0]`` up to ``backoff_s[1]``) and ask again for the ids
    still missing; ``say(None)`` once it answers after a wait.

    ``what`` names the reader in the reason (``""`` for a pipeline's source);
    ``wait`` wraps each await (a session's ``interruptible``, whose ``Interrupted``
    passes through to the caller)."""
    pending = [(schemas, set(ids)) for schemas, ids in wanted if ids]
    backoff, longest = backoff_s
    waited = False
    while pending:
        try:
            for schemas, ids in pending:
                await wait(registry.resolve(schemas, ids))
        except RegistryUnavailable as exc:
            reason = f"waiting for the schema registry{what}: {exc}"
            if not waited:
                logger.warning("pipeline %s: %s", pipeline, reason)
                waited = True
            say(f"{reason} (retrying in {backoff:.1f}s)")
            await wait(asyncio.sleep(backoff))
            backoff = min(backoff * 2, longest)
            pending = [
                (schemas, left)
                for schemas, ids in pending
                if (left := {i for i in ids if i not in schemas.by_id})
            ]
            continue
        break
    if waited:
        logger.info("pipeline %s: the schema registry answers again", pipeline)
        say(None)
