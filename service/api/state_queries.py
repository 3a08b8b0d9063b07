"""Pull queries over REST, from any replica: where a key's state is, and the way there.

docs/pull-queries.md is the reference; the rules here:

- **A member answers what it holds.** A process that runs pipelines (a replica alone,
  or a worker) answers from the keyed stage's partition that owns the key
  (``runtime/lifecycle/queries.py``), between batches.
- **One hop at most between replicas.** A replica that does not hold the key's
  partition finds the member that does in the members' reports (``members.py``: each
  report names the partitions its member holds, and the address its queries go to) and
  forwards the request there, with the caller's token and :data:`FORWARDED`. A forwarded
  request is answered from what the receiver holds, or 503: it is never forwarded again,
  so a report that is behind a rebalance gives a 503 to retry, never a loop or a stale
  answer.
- **Workers.** A replica with workers runs no pipeline in its API process: it asks the
  worker that holds the partition on its loopback port (it learns the stage's topic and
  partition count from the first answer of any worker, and finds the key's partition
  with the partitioner), and a request another replica forwards for one of its workers
  names that worker in :data:`MEMBER`.
- **Scans** ask every member that holds a partition of the stage, merge by key and
  answer only when every partition answered exactly once (else 503).
- **Patience.** The replica asked tries again, every 0.1 s for up to :data:`WAIT_S`, while
  the answer is a 503 (a pipeline starting, a partition restored or moving is a matter
  of seconds), and only then answers 503; a forwarded request is answered at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from fastapi.responses import JSONResponse

from service.api.pipeline_view import MemberReport
from service.api.routes.deps import Services
from service.core.partitioner import partition_for
from service.runtime.lifecycle.queries import (
    KeyAnswer,
    NotOwnedHere,
    NotQueryable,
    ScanAnswer,
    StateUnavailable,
)
from service.runtime.observability.status import UnknownPipeline

__all__ = [
    "DEFAULT_LIMIT",
    "FORWARDED",
    "MAX_KEY_BYTES",
    "MAX_LIMIT",
    "MEMBER",
    "Reply",
    "StateQueries",
]

FORWARDED = "x-clockwork-forwarded"
"""Header of a request one replica forwarded to another (or to a worker): answer from
what you hold, never forward again."""
MEMBER = "x-clockwork-member"
"""Header naming the member (a worker of the receiving replica) a forwarded query is for."""
MAX_KEY_BYTES = 8192
"""The longest key (and scan bound) a query takes, in UTF-8 bytes."""
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
RETRY_AFTER_S = 1
WAIT_S = 5.0
"""How long the replica asked keeps trying before it answers 503."""
RETRY_EVERY_S = 0.1
FORWARD_TIMEOUT_S = 5.0


@dataclass(slots=True)
class Reply:
    """What a query answers: a status and a JSON body (and ``Retry-After`` on a 503)."""

    status: int
    body: dict[str, Any]
    retry_after_s: int | None = None

    def response(self) -> JSONResponse:
        headers = (
            {"Retry-After": str(self.retry_after_s)} if self.retry_after_s is not None else None
        )
        return JSONResponse(self.body, status_code=self.status, headers=headers)


def unavailable(reason: str, **where: Any) -> Reply:
    return Reply(503, {"detail": reason, **where}, RETRY_AFTER_S)


def too_long(where: str, what: str) -> Reply:
    return Reply(
        422,
        {
            "detail": [
                {
                    "loc": [where, what],
                    "msg": f"longer than {MAX_KEY_BYTES} bytes (UTF-8)",
                    "type": "key_too_long",
                }
            ]
        },
    )


def key_path(name: str, key: str) -> str:
    return f"/pipelines/{quote(name, safe='')}/state/{quote(key, safe='')}"


@dataclass(slots=True)
class _Partial:
    """One member's part of a scan."""

    kind: str | None
    rows: list[dict[str, Any]]
    as_of: list[dict[str, Any]]
    topic: str
    partitions: int

    def body(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "rows": self.rows,
            "as_of": self.as_of,
            "topic": self.topic,
            "partitions": self.partitions,
        }

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> _Partial:
        return cls(
            body.get("kind"),
            list(body["rows"]),
            list(body["as_of"]),
            str(body["topic"]),
            int(body["partitions"]),
        )


@dataclass(slots=True)
class StateQueries:
    """The pull queries of one app instance (module docstring)."""

    found: Services
    client: httpx.AsyncClient
    worker: bool = False
    """This process is a worker: every request comes from its API process, forwarded."""
    stage_topics: dict[str, tuple[str, int]] = field(default_factory=dict)
    """A replica with workers: each pipeline's keyed stage topic and its partition count,
    as the workers last answered."""

    # -- one key ------------------------------------------------------------------------

    async def lookup(self, name: str, key: str, headers: Mapping[str, str]) -> Reply:
        if len(key.encode()) > MAX_KEY_BYTES:
            return too_long("path", "key")
        return await self._patiently(headers, lambda: self._lookup(name, key, headers))

    async def _patiently(
        self, headers: Mapping[str, str], answer: Callable[[], Awaitable[Reply]]
    ) -> Reply:
        """``answer()``, asked again while it is a 503 for up to :data:`WAIT_S` (a
        pipeline starting, a partition restored or moving is a matter of seconds); a
        forwarded request is answered at once (the replica that was asked waits)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            reply = await answer()
            if (
                reply.status != 503
                or self.worker
                or FORWARDED in headers
                or time.monotonic() + RETRY_EVERY_S > deadline
            ):
                return reply
            await asyncio.sleep(RETRY_EVERY_S)

    async def _lookup(self, name: str, key: str, headers: Mapping[str, str]) -> Reply:
        if self.found.store.get(name) is None:
            return Reply(404, {"detail": f"no pipeline {name!r}"})
        forwarded = self.worker or FORWARDED in headers
        if self.found.runtime is not None:
            return await self._lookup_here(name, key, forwarded, headers)
        if self.found.workers is not None:
            return await self._lookup_by_workers(name, key, headers)
        return unavailable("this process runs no pipeline")

    def _answer_here(self, name: str, key: str) -> Reply | NotOwnedHere:
        runtime = self.found.runtime
        assert runtime is not None
        try:
            answer = runtime.query_key(name, key)
        except UnknownPipeline:
            return unavailable(f"pipeline {name!r} is not running here yet")
        except NotQueryable as exc:
            return Reply(409, {"detail": str(exc)})
        except StateUnavailable as exc:
            return unavailable(exc.reason)
        except NotOwnedHere as exc:
            return exc
        return Reply(200, self._key_body(name, key, answer))

    def _key_body(self, name: str, key: str, answer: KeyAnswer) -> dict[str, Any]:
        return {
            "pipeline": name,
            "key": key,
            "found": answer.state is not None,
            "kind": answer.kind,
            "state": answer.state,
            "as_of": answer.as_of,
            "partitions": answer.partitions,
            "member": self.found.members.member,
        }

    async def _lookup_here(
        self, name: str, key: str, forwarded: bool, headers: Mapping[str, str]
    ) -> Reply:
        here = self._answer_here(name, key)
        if isinstance(here, Reply):
            return here
        where = {"topic": here.topic, "partition": here.partition, "partitions": here.partitions}
        if forwarded:
            return unavailable(
                f"partition {here.partition} is not held here: it is moving", **where
            )
        owner = self._owner(name, here.topic, here.partition)
        if owner is None or owner.member == self.found.members.member:
            return unavailable(f"no member holds partition {here.partition} now", **where)
        return await self._forward(owner, "GET", key_path(name, key), headers)

    async def _lookup_by_workers(self, name: str, key: str, headers: Mapping[str, str]) -> Reply:
        path = key_path(name, key)
        named = headers.get(MEMBER)
        if named is not None:  # another replica sent it for one of our workers
            port = self._worker_port(named)
            if port is None:
                return unavailable(f"member {named!r} is not running here")
            return await self._ask_worker(port, "GET", path)
        known = self.stage_topics.get(name)
        if known is not None:
            topic, count = known
            owner = self._owner(name, topic, partition_for(key.encode(), count))
            if owner is not None:
                reply = await self._to_member(owner, "GET", path, headers)
                if reply.status != 503:
                    return self._learn(name, reply)
        port = self._any_worker()
        if port is None:
            return unavailable("no worker of this replica is running")
        reply = self._learn(name, await self._ask_worker(port, "GET", path))
        if reply.status != 503 or "partition" not in reply.body:
            return reply
        owner = self._owner(name, str(reply.body["topic"]), int(reply.body["partition"]))
        if owner is None:
            return reply
        return self._learn(name, await self._to_member(owner, "GET", path, headers))

    def _learn(self, name: str, reply: Reply) -> Reply:
        """Keep the stage topic and partition count a worker's answer names."""
        body = reply.body
        topic = body.get("topic") or (body.get("as_of") or {}).get("topic")
        count = body.get("partitions")
        if isinstance(topic, str) and isinstance(count, int):
            self.stage_topics[name] = (topic, count)
        return reply

    # -- a range of keys ----------------------------------------------------------------

    async def scan(
        self,
        name: str,
        from_key: str | None,
        to_key: str | None,
        limit: int,
        headers: Mapping[str, str],
    ) -> Reply:
        for what, bound in (("from", from_key), ("to", to_key)):
            if bound is not None and len(bound.encode()) > MAX_KEY_BYTES:
                return too_long("query", what)
        return await self._patiently(
            headers, lambda: self._scan(name, from_key, to_key, limit, headers)
        )

    async def _scan(
        self,
        name: str,
        from_key: str | None,
        to_key: str | None,
        limit: int,
        headers: Mapping[str, str],
    ) -> Reply:
        if self.found.store.get(name) is None:
            return Reply(404, {"detail": f"no pipeline {name!r}"})
        forwarded = self.worker or FORWARDED in headers
        params: dict[str, Any] = {"limit": limit}
        if from_key is not None:
            params["from"] = from_key
        if to_key is not None:
            params["to"] = to_key
        path = f"/pipelines/{quote(name, safe='')}/state"
        partials: list[_Partial] = []
        mine: set[str] = set()
        if self.found.runtime is not None:
            here = self._scan_here(name, from_key, to_key, limit)
            if isinstance(here, Reply):
                return here
            if forwarded:
                return Reply(200, here.body())
            partials.append(here)
            mine.add(self.found.members.member)
        elif self.found.workers is not None:
            named = headers.get(MEMBER)
            if named is not None:
                port = self._worker_port(named)
                if port is None:
                    return unavailable(f"member {named!r} is not running here")
                return await self._ask_worker(port, "GET", path, params)
            pool = self.found.workers
            for slot in pool.slots:
                if slot.pid is None:
                    continue
                reply = await self._ask_worker(slot.port, "GET", path, params)
                if reply.status != 200:
                    return reply
                partials.append(_Partial.of(reply.body))
                mine.add(pool.member(slot.index))
        else:
            return unavailable("this process runs no pipeline")
        known = next((p for p in partials if p.partitions), None)
        if known is None:
            return unavailable(f"pipeline {name!r} is not running here yet")
        topic, count = known.topic, known.partitions
        covered = {int(a["partition"]) for p in partials for a in p.as_of}
        missing = set(range(count)) - covered
        if missing:
            owners: dict[str, MemberReport] = {}
            for partition in sorted(missing):
                owner = self._owner(name, topic, partition)
                if owner is None or owner.member in mine:
                    return unavailable(f"no member holds partition {partition} now")
                owners[owner.member] = owner
            for owner in owners.values():
                reply = await self._to_member(owner, "GET", path, headers, params)
                if reply.status != 200:
                    return reply
                partials.append(_Partial.of(reply.body))
        return self._merged(name, partials, count, limit)

    def _scan_here(
        self, name: str, from_key: str | None, to_key: str | None, limit: int
    ) -> _Partial | Reply:
        runtime = self.found.runtime
        assert runtime is not None
        try:
            answer: ScanAnswer = runtime.scan(name, from_key, to_key, limit)
        except UnknownPipeline:
            return unavailable(f"pipeline {name!r} is not running here yet")
        except NotQueryable as exc:
            return Reply(409, {"detail": str(exc)})
        except StateUnavailable as exc:
            return unavailable(exc.reason)
        rows = [{"key": key, "state": state} for key, state in answer.rows]
        return _Partial(answer.kind, rows, answer.as_of, answer.topic, answer.partitions)

    @staticmethod
    def _merged(name: str, partials: list[_Partial], count: int, limit: int) -> Reply:
        as_of = sorted((a for p in partials for a in p.as_of), key=lambda a: int(a["partition"]))
        seen = [int(a["partition"]) for a in as_of]
        if seen != list(range(count)):  # one missing, or one answered twice (it moved)
            return unavailable("the partitions are moving between members")
        rows = sorted((r for p in partials for r in p.rows), key=lambda r: str(r["key"]))[:limit]
        kind = next((p.kind for p in partials if p.kind is not None), None)
        return Reply(
            200,
            {
                "pipeline": name,
                "kind": kind,
                "rows": rows,
                "as_of": as_of,
                # the smallest key after the last one: the next page's ``from``
                "next": rows[-1]["key"] + "\u0000" if len(rows) == limit else None,
            },
        )

    # -- where, and the way there -------------------------------------------------------

    def _owner(self, name: str, topic: str, partition: int) -> MemberReport | None:
        """The live member whose newest report holds ``topic``/``partition`` (the newest
        report when two do)."""
        found = self.found
        now = int(time.time() * 1000)
        best: MemberReport | None = None
        for report in found.members.view_of(name, now):
            if now - report.published_ms > found.lost_after_ms or report.status is None:
                continue
            for part in report.status.get("partitions") or ():
                if (
                    part.get("topic") == topic
                    and part.get("partition") == partition
                    and (best is None or report.published_ms > best.published_ms)
                ):
                    best = report
        return best

    def _worker_port(self, member: str) -> int | None:
        pool = self.found.workers
        if pool is None:
            return None
        for slot in pool.slots:
            if pool.member(slot.index) == member and slot.pid is not None:
                return slot.port
        return None

    def _any_worker(self) -> int | None:
        pool = self.found.workers
        if pool is None:
            return None
        return next((slot.port for slot in pool.slots if slot.pid is not None), None)

    async def _to_member(
        self,
        owner: MemberReport,
        method: str,
        path: str,
        headers: Mapping[str, str],
        params: Mapping[str, Any] | None = None,
    ) -> Reply:
        """A member of this replica (a worker) on its loopback port, another through its
        replica's address."""
        if self.found.workers is not None and owner.replica == self.found.workers.replica:
            port = self._worker_port(owner.member)
            if port is None:
                return unavailable(f"worker {owner.member!r} is not running")
            return await self._ask_worker(port, method, path, params)
        return await self._forward(owner, method, path, headers, params)

    async def _ask_worker(
        self, port: int, method: str, path: str, params: Mapping[str, Any] | None = None
    ) -> Reply:
        return await self._send(
            f"http://127.0.0.1:{port}{path}", method, {FORWARDED: "1"}, params, "a worker"
        )

    async def _forward(
        self,
        owner: MemberReport,
        method: str,
        path: str,
        headers: Mapping[str, str],
        params: Mapping[str, Any] | None = None,
    ) -> Reply:
        if not owner.address:
            return unavailable(f"member {owner.member!r} publishes no query address")
        sent = {FORWARDED: "1", MEMBER: owner.member}
        token = headers.get("authorization")
        if token is not None:
            sent["authorization"] = token
        return await self._send(
            owner.address + path, method, sent, params, f"member {owner.member!r}"
        )

    async def _send(
        self,
        url: str,
        method: str,
        headers: dict[str, str],
        params: Mapping[str, Any] | None,
        who: str,
    ) -> Reply:
        try:
            response = await self.client.request(
                method, url, headers=headers, params=params, timeout=FORWARD_TIMEOUT_S
            )
            body = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            return unavailable(f"{who} did not answer: {type(exc).__name__}")
        if not isinstance(body, dict):
            return unavailable(f"{who} answered something else than a JSON object")
        retry = RETRY_AFTER_S if response.status_code == 503 else None
        return Reply(response.status_code, body, retry)
