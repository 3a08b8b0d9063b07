"""A work-around for an aiokafka bug, installed when :mod:`service.runtime` is imported.

The bug: ``AIOKafkaClient.bootstrap`` (aiokafka 0.11 to 0.14) opens a connection, asks it
for the cluster metadata and closes it; a cancellation while it waits for the answer
(or an error other than the two it catches) leaves that connection open and referenced
by nothing. The socket stays open until the garbage collector finds the object, whose
``__del__`` then warns "Unclosed AIOKafkaConnection". Every client start runs a
bootstrap (consumer, producer, admin), and the service cancels starts on purpose: a
stop interrupts a consumer that is still starting, a lost broker cancels a session
wherever it waits, a health check times out. A loop that cancelled 200 starts at random
points leaked about one connection in eight; with this fix, none
(``tests/integration/test_aiokafka_fixes.py``).

The fix wraps ``bootstrap``: the connections it opens are noted (by wrapping the
``create_conn`` it calls, for the bootstrapping task only) and, if it does not
complete, each one the client did not keep is closed before the error propagates.
Related upstream report: aio-libs/aiokafka#715 (connections left open by a failed
start). Remove this module once aiokafka closes the bootstrap connection itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import aiokafka.client


class _Opening:
    """The connections one bootstrap has opened so far, and the task running it."""

    __slots__ = ("conns", "task")

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task = task
        self.conns: list[Any] = []


_opening: ContextVar[_Opening | None] = ContextVar("clockwork_bootstrap", default=None)

_INSTALLED = "_clockwork_closes_cancelled_bootstrap"


def install() -> None:
    """Wrap ``AIOKafkaClient.bootstrap`` (once; later calls change nothing)."""
    client_class: Any = aiokafka.client.AIOKafkaClient
    if getattr(client_class, _INSTALLED, False):
        return
    create_conn: Callable[..., Awaitable[Any]] = aiokafka.client.create_conn
    bootstrap: Callable[[Any], Awaitable[None]] = client_class.bootstrap

    async def noting_create_conn(*args: Any, **kwargs: Any) -> Any:
        conn = await create_conn(*args, **kwargs)
        opening = _opening.get()
        # The metadata task that bootstrap starts inherits the variable: only the
        # bootstrapping task itself notes its connections.
        if opening is not None and opening.task is asyncio.current_task():
            opening.conns.append(conn)
        return conn

    async def closing_bootstrap(self: Any) -> None:
        opening = _Opening(asyncio.current_task())
        token = _opening.set(opening)
        try:
            await bootstrap(self)
        except BaseException:
            kept = list(self._conns.values())
            for conn in opening.conns:
                if not any(conn is k for k in kept):
                    conn.close()
            raise
        finally:
            _opening.reset(token)
            # The metadata task keeps this context (and so this object) for the client's
            # life: hold on to neither the connections nor the finished task.
            opening.task = None
            opening.conns.clear()

    aiokafka.client.create_conn = noting_create_conn
    client_class.bootstrap = closing_bootstrap
    setattr(client_class, _INSTALLED, True)
