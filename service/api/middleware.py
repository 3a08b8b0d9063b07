"""Pure ASGI middlewares: the bearer token on mutating requests, and the body size limit.

Why plain ASGI rather than FastAPI dependencies: they must run before anything reads or
parses the body, so an unauthenticated client gets 401 (not a 422 about its JSON) and an
oversized body is refused before it is buffered. Both answer with the same JSON shape as
FastAPI's errors: ``{"detail": "..."}``.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Sequence

from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BearerTokenMiddleware", "BodySizeLimitMiddleware", "BodyTooLarge", "methods_served"]

MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


async def _send_json(
    send: Send, status: int, detail: str, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BearerTokenMiddleware:
    """401 for a POST, PUT, PATCH or DELETE without ``Authorization: Bearer <token>``.

    The comparison is constant-time (``hmac.compare_digest`` on bytes), so response times
    say nothing about how much of a guessed token was right. Reads stay open: status and
    metrics are for dashboards and probes. A method no route serves at that path is left
    to the router (404, or 405 with ``Allow``): it can change nothing, and a client learns
    the methods of a path with or without the token, as the OpenAPI document says them.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in MUTATING_METHODS and _routed(scope):
            given = b""
            for name, value in scope["headers"]:
                if name == b"authorization":
                    given = value
                    break
            if not hmac.compare_digest(given, self._expected):
                await _send_json(
                    send,
                    401,
                    "missing or wrong bearer token",
                    [(b"www-authenticate", b'Bearer realm="clockwork"')],
                )
                return
        await self.app(scope, receive, send)


HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def methods_served(routes: Sequence[BaseRoute], scope: Scope, *, mounts: bool = True) -> list[str]:
    """The methods some route fully matches at the scope's path (``mounts=False``: leave
    out mounted apps, which match every method and answer for themselves)."""
    return [
        method
        for method in HTTP_METHODS
        if any(
            (mounts or not isinstance(route, Mount))
            and route.matches({**scope, "method": method})[0] is Match.FULL
            for route in routes
        )
    ]


def _routed(scope: Scope) -> bool:
    """Some route of the app serves this method at this path."""
    routes = getattr(getattr(scope.get("app"), "router", None), "routes", None)
    if routes is None:
        return True  # not inside a Starlette app: guard everything
    return scope["method"] in methods_served(routes, scope)


class BodyTooLarge(HTTPException):
    """The request body grew past the limit while it was being read."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes")


class BodySizeLimitMiddleware:
    """413 for a request body over ``max_bytes``.

    A declared ``Content-Length`` over the limit is refused before reading anything; a
    body without one (chunked) is counted as it streams in, and reading past the limit
    raises :class:`BodyTooLarge`, an HTTP exception that FastAPI turns into the 413.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await _send_json(send, 400, "invalid Content-Length")
                    return
                if declared > self.max_bytes:
                    await _send_json(send, 413, f"request body larger than {self.max_bytes} bytes")
                    return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except BodyTooLarge as exc:
            # Raised outside a FastAPI route (which would have answered it already).
            if started:
                raise
            await _send_json(send, 413, str(exc.detail))
