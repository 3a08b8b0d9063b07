"""Work-arounds for three aiokafka bugs, installed when :mod:`service.runtime` is imported.

**A connection left open by a cancelled bootstrap.** ``AIOKafkaClient.bootstrap``
(aiokafka 0.11 to 0.14) opens a connection, asks it for the cluster metadata and closes
it; a cancellation while it waits for the answer (or an error other than the two it
catches) leaves that connection open and referenced by nothing. The socket stays open
until the garbage collector finds the object, whose ``__del__`` then warns "Unclosed
AIOKafkaConnection". Every client start runs a bootstrap (consumer, producer, admin),
and the service cancels starts on purpose: a stop interrupts a consumer that is still
starting, a lost broker cancels a session wherever it waits, a health check times out. A
loop that cancelled 200 starts at random points leaked about one connection in eight;
with this fix, none (``tests/integration/test_aiokafka_fixes.py``).

The fix wraps ``bootstrap``: the connections it opens are noted (by wrapping the
``create_conn`` it calls, for the bootstrapping task only) and, if it does not complete,
each one the client did not keep is closed before the error propagates. Related upstream
report: aio-libs/aiokafka#715 (connections left open by a failed start). Remove it once
aiokafka closes the bootstrap connection itself.

**A JoinGroup per assignor.** ``CoordinatorGroupRebalance.perform_group_join`` (aiokafka
0.14.0) sends its JoinGroup inside the loop over the consumer's assignors: with two
(the standby replicas' assignor and round-robin, :mod:`..consumer_group.standby`) every
join sends one JoinGroup naming the first protocol, then one naming both. The
coordinator sees the member's protocols change between the two: when the first one
completed the join phase (the group is completing the rebalance, or stable), the
second starts a new rebalance ("Updating metadata for member ... during
CompletingRebalance" in Apache Kafka's log), whose joins do the same: two members
rebalance in turn without end (seen: 200 rebalances in 45 s, two members never both assigned).
The fix installs aiokafka's method with the one change upstream proposes
(aio-libs/aiokafka#1168): one JoinGroup, naming every assignor's protocol. Only for the
versions it was copied from (:data:`ONE_JOIN_VERSIONS`): a consumer with one assignor
sends the same request as before. ``tests/integration/test_aiokafka_fixes.py`` checks
that a join sends one JoinGroup with every protocol, whatever the version.

**No heartbeat during the assignment's callback.** aiokafka (0.11 to 0.14) stops its
heartbeat task before a join and starts it again only once the join is complete, after
``on_partitions_assigned`` has returned (the revoke's callback, before the join, keeps
it). The service restores the assigned partitions' state in that callback: a restore
longer than the group's session timeout (a 1M-key changelog takes ~12 s on this
machine, the default timeout is 10 s) got the member dropped from the group by its
coordinator while it restored. The restore completed, the member's first heartbeat
after it found itself unknown, and the group rebalanced again: the partitions were
revoked, checkpointed and restored a second time (seen as 3M keys found locally for
two partitions of 1M in ``benchmarks/standby_failover``), and with more members they
could move on. The Java consumer heartbeats from its own thread, callbacks or not
(KIP-62): what bounds a callback's length there is ``max.poll.interval.ms``, as it still
is here (aiokafka's heartbeat task leaves the group when no fetch was made for that
long). The fix starts the heartbeat task as the join completes, before the callback
(``GroupCoordinator._on_join_complete``); aiokafka's own start after it then finds it
running. ``tests/integration/test_aiokafka_fixes.py`` holds an assignment's callback
for three session timeouts, and the member's generation is still the group's after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import aiokafka
import aiokafka.client
import aiokafka.errors as Errors
from aiokafka.consumer import group_coordinator
from aiokafka.coordinator.protocol import ConsumerProtocol
from aiokafka.protocol.group import JoinGroupRequest

ONE_JOIN_VERSIONS = frozenset({"0.14.0"})
"""The aiokafka versions whose ``perform_group_join`` :func:`perform_group_join` copies."""

_log = group_coordinator.log


class _Opening:
    """The connections one bootstrap has opened so far, and the task running it."""

    __slots__ = ("conns", "task")

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task = task
        self.conns: list[Any] = []


_opening: ContextVar[_Opening | None] = ContextVar("clockwork_bootstrap", default=None)

_INSTALLED = "_clockwork_closes_cancelled_bootstrap"
_HEARTBEATS_INSTALLED = "_clockwork_heartbeats_during_assignment"


def install() -> None:
    """The three fixes (once; later calls change nothing)."""
    _install_bootstrap_fix()
    _install_one_join()
    _install_heartbeat_during_assignment()


def _install_heartbeat_during_assignment() -> None:
    """Wrap ``GroupCoordinator._on_join_complete``: the heartbeat task first."""
    coordinator_class: Any = group_coordinator.GroupCoordinator
    if getattr(coordinator_class, _HEARTBEATS_INSTALLED, False):
        return
    on_join_complete: Callable[..., Awaitable[None]] = coordinator_class._on_join_complete

    async def heartbeating_on_join_complete(self: Any, *args: Any, **kwargs: Any) -> None:
        # The join is complete (generation and member id are the new ones): heartbeats
        # are valid from here, and keep the member in the group through the callback.
        self._start_heartbeat_task()
        await on_join_complete(self, *args, **kwargs)

    coordinator_class._on_join_complete = heartbeating_on_join_complete
    setattr(coordinator_class, _HEARTBEATS_INSTALLED, True)


def _install_one_join() -> None:
    """:func:`perform_group_join` in place of aiokafka's (its versions only)."""
    if aiokafka.__version__ not in ONE_JOIN_VERSIONS:
        return
    group_coordinator.CoordinatorGroupRebalance.perform_group_join = perform_group_join


def _install_bootstrap_fix() -> None:
    """Wrap ``AIOKafkaClient.bootstrap``."""
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


async def perform_group_join(self: Any) -> Any:
    """aiokafka 0.14.0's ``CoordinatorGroupRebalance.perform_group_join``, but for one
    change: the JoinGroup (and its second, KIP-394's, when the coordinator asks for a
    member id) is sent once, naming every assignor's protocol, after the loop over them
    (upstream, it was inside it: a JoinGroup per assignor). The rest is aiokafka's.

    Join the group and return the assignment for the next generation, delegating to
    ``_perform_assignment()`` if elected as leader by the coordinator node; None: join
    again."""
    _log.info("(Re-)joining group %s", self.group_id)

    topics = self._subscription.topics
    metadata_list = []
    for assignor in self._assignors:
        metadata = assignor.metadata(topics)
        if not isinstance(metadata, bytes):
            metadata = metadata.encode()
        metadata_list.append((assignor.name, metadata))

    # for KIP-394 we may have to send a second join request
    try_join = True
    while try_join:
        try_join = False
        request = JoinGroupRequest(
            self.group_id,
            self._session_timeout_ms,
            self._rebalance_timeout_ms,
            self._coordinator.member_id,
            self._coordinator._group_instance_id,
            ConsumerProtocol.PROTOCOL_TYPE,
            metadata_list,
        )
        _log.debug("Sending JoinGroup (%s) to coordinator %s", request, self.coordinator_id)
        try:
            response = await self._coordinator._send_req(request)
        except Errors.KafkaError:
            # Return right away. It's a connection error, so backoff will be
            # handled by coordinator lookup
            return None
        if not self._subscription.active:
            # Subscription changed. Ignore response and restart group join
            return None

        error_type = Errors.for_code(response.error_code)
        if error_type is Errors.MemberIdRequired:
            self._coordinator.member_id = response.member_id
            try_join = True

    if error_type is Errors.NoError:
        _log.debug("Join group response %s", response)
        self._coordinator.member_id = response.member_id
        self._coordinator.generation = response.generation_id
        protocol = response.group_protocol
        _log.info(
            "Joined group '%s' (generation %s) with member_id %s",
            self.group_id,
            response.generation_id,
            response.member_id,
        )
        if response.leader_id == response.member_id:
            _log.info("Elected group leader -- performing partition assignments using %s", protocol)
            assignment_bytes = await self._on_join_leader(response)
        else:
            assignment_bytes = await self._on_join_follower()
        if assignment_bytes is None:
            return None
        return (protocol, assignment_bytes)
    elif error_type is Errors.GroupLoadInProgressError:
        # Backoff and retry
        _log.debug(
            "Attempt to join group %s rejected since coordinator %s is loading the group.",
            self.group_id,
            self.coordinator_id,
        )
        await asyncio.sleep(self._retry_backoff_ms / 1000)
    elif error_type is Errors.UnknownMemberIdError:
        # reset the member id and retry immediately
        self._coordinator.reset_generation()
        _log.debug("Attempt to join group %s failed due to unknown member id", self.group_id)
    elif error_type in (
        Errors.GroupCoordinatorNotAvailableError,
        Errors.NotCoordinatorForGroupError,
    ):
        # Coordinator changed we should be able to find it immediately
        err = error_type()
        self._coordinator.coordinator_dead()
        _log.debug(
            "Attempt to join group %s failed due to obsolete coordinator information: %s",
            self.group_id,
            err,
        )
    elif error_type in (
        Errors.InconsistentGroupProtocolError,
        Errors.InvalidSessionTimeoutError,
        Errors.InvalidGroupIdError,
    ):
        err = error_type()
        _log.error("Attempt to join group failed due to fatal error: %s", err)
        raise err
    elif error_type is Errors.GroupAuthorizationFailedError:
        raise error_type(self.group_id)
    else:
        err = error_type()
        _log.error("Unexpected error in join group '%s' response: %s", self.group_id, err)
        raise Errors.KafkaError(repr(err))
    return None
