"""Pure ASGI middlewares: the bearer token on mutating requests and data reads, and the
body size limit.

Why plain ASGI rather than FastAPI dependencies: they must run before anything reads or
parses the body, so an unauthenticated client gets 401 (not a 422 about its JSON) and an
oversized body is refused before it is buffered. Both answer with the same JSON shape as
FastAPI's errors: ``{"detail": "..."}``.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Sequence

from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match, Mount, compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "DATA_READS",
    "BearerTokenMiddleware",
    "BodySizeLimitMiddleware",
    "BodyTooLarge",
    "is_data_read",
    "methods_served",
    "openapi_template",
]

MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
READ_METHODS = frozenset({"GET", "HEAD"})

DATA_READS = frozenset(
    {
        "/pipelines",
        "/pipelines/{name}",
        "/pipelines/{name}/history",
        "/pipelines/{name}/tail",
        "/pipelines/{name}/state",
        "/pipelines/{name}/state/{key:path}",
        "/history",
    }
)
"""The routes whose GET shows what the pipelines are and what they produce: the specs
(topics, functions, keys), the history, the tail (the records of the result, late
and dead-letter topics) and the state (pull queries). With a token they need it too,
unless reads are kept open. Status, probes, ``/metrics``, the schema, the docs and the
console's static files stay open: dashboards and probes read them, and the console must
load to ask for the token.
``tests/api/test_middleware.py`` checks that each is a GET route of the app."""


def openapi_template(template: str) -> str:
    """A route's path as the OpenAPI document writes it (no ``:path`` convertor)."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", template)


_DATA_READ_PATTERNS = tuple(compile_path(template)[0] for template in sorted(DATA_READS))


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
    """401 for a POST, PUT, PATCH or DELETE without ``Authorization: Bearer <token>``,
    and for a GET of a :data:`DATA_READS` route unless ``read_open``.

    The comparison is constant-time (``hmac.compare_digest`` on bytes), so response times
    say nothing about how much of a guessed token was right. Other reads stay open:
    status and metrics are for dashboards and probes. A method no route serves at that
    path is left to the router (404, or 405 with ``Allow``): it can change nothing, and a
    client learns the methods of a path with or without the token, as the OpenAPI
    document says them.
    """

    def __init__(self, app: ASGIApp, token: str, read_open: bool = False) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._read_open = read_open

    def _guarded(self, scope: Scope) -> bool:
        method = scope["method"]
        if method in MUTATING_METHODS:
            return _routed(scope)
        if method in READ_METHODS and not self._read_open:
            return is_data_read(scope["path"])
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self._guarded(scope):
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


def is_data_read(path: str) -> bool:
    """The path is one of :data:`DATA_READS` (matched as the router matches it)."""
    return any(pattern.match(path) for pattern in _DATA_READ_PATTERNS)


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
