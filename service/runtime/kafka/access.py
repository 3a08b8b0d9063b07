"""Why the service cannot use the cluster, in words an operator can act on.

aiokafka reports a failed bootstrap as ``KafkaConnectionError("Unable to bootstrap
from ...")`` whatever the cause, and logs the cause (a refused connection, an untrusted
certificate, a rejected password) at every attempt. :func:`connection_problem` asks
again with one plain connection to each bootstrap server and names the cause, so
``/readyz``, the status and one log line can say it. :func:`authorization_problem`
turns the broker's authorization errors into the ACL that is missing, as a
``kafka-acls`` line (see docs/operations.md).

No message built here contains a secret: aiokafka's and ``ssl``'s messages do not, and
the user name is the only credential named.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterable

from aiokafka.conn import create_conn
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from service.runtime.kafka.clients import KafkaCluster

__all__ = ["AuthorizationError", "authorization_problem", "connection_problem"]


class AuthorizationError(KafkaError):  # type: ignore[misc]
    """The broker answered a describe or create of ``topics`` with
    TOPIC_AUTHORIZATION_FAILED (aiokafka's admin client returns it as an error code)."""

    def __init__(self, topics: Iterable[str], create: bool = False) -> None:
        self.topics = sorted(set(topics))
        self.create = create
        what = "create" if create else "describe"
        super().__init__(
            f"not authorized to {what} topic(s) {', '.join(self.topics)} "
            "(see the ACLs in docs/operations.md)"
        )


async def connection_problem(cluster: KafkaCluster, timeout_s: float = 5.0) -> str | None:
    """Why no bootstrap server accepts a connection (TCP, TLS and SASL), or None when
    one does (the problem is then past the connection: see the error itself)."""
    problems = []
    for server in cluster.bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            async with asyncio.timeout(timeout_s):
                conn = await create_conn(
                    host,
                    int(port),
                    request_timeout_ms=int(timeout_s * 1000),
                    **cluster.security.client_kwargs(),
                )
        except TimeoutError:
            problems.append(f"{server}: no answer within {timeout_s:g}s")
            continue
        except Exception as exc:
            problems.append(f"{server}: {describe_connection_error(exc, cluster)}")
            continue
        conn.close()
        return None
    return "; ".join(problems) or None


def describe_connection_error(exc: BaseException, cluster: KafkaCluster) -> str:
    """One failed connection's cause, named by the layer that refused it."""
    security = cluster.security
    if isinstance(exc, SaslAuthenticationFailed):
        return (
            f"SASL authentication failed for user {security.sasl_username!r} "
            f"({security.sasl_mechanism}): {_message(exc)} (check KAFKA_SASL_USERNAME "
            "and KAFKA_SASL_PASSWORD, and that the user exists on the cluster)"
        )
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"TLS: the broker's certificate is not trusted: {exc.verify_message} "
            "(check KAFKA_SSL_CA_FILE and KAFKA_SSL_CHECK_HOSTNAME)"
        )
    if isinstance(exc, ssl.SSLError):
        return (
            f"TLS handshake failed: {exc.reason or exc} "
            "(is the listener TLS? mutual TLS needs KAFKA_SSL_CERT_FILE)"
        )
    if isinstance(exc, ConnectionError | OSError):
        return f"cannot connect: {exc.strerror or exc}"
    if isinstance(exc, KafkaConnectionError) and "closed" in str(exc):
        # The broker hung up on the first request: its listener wants something else.
        if security.uses_ssl and security.ssl_cert_file is None:
            hint = "does the listener require a client certificate? (KAFKA_SSL_CERT_FILE)"
        elif not security.uses_ssl:
            hint = "is the listener TLS? (KAFKA_SECURITY_PROTOCOL)"
        else:
            hint = "does KAFKA_SECURITY_PROTOCOL match the listener?"
        return f"the broker closed the connection at once: {hint}"
    return f"{type(exc).__name__}: {_message(exc)}"


def _message(exc: BaseException) -> str:
    text = str(exc)
    return text.split(": ", 1)[1] if text.startswith("[Error") and ": " in text else text


def authorization_problem(
    exc: BaseException,
    *,
    principal: str,
    sources: Iterable[str] = (),
    group_id: str | None = None,
    own_prefix: str | None = None,
) -> str | None:
    """The ACL ``exc`` says is missing, as a ``kafka-acls`` line for ``principal``, or
    None if ``exc`` is no authorization error. ``sources``: the topics the failing
    client reads (READ on them); ``own_prefix``: the caller's own topics (a pipeline's
    changelog and shuffle), read and written; any other topic is one it writes (WRITE).
    The caller names the prefix: nothing in ``kafka/`` knows what a pipeline is."""
    allow = f"kafka-acls --add --allow-principal {principal}"
    if isinstance(exc, AuthorizationError | TopicAuthorizationFailedError):
        create = isinstance(exc, AuthorizationError) and exc.create
        topics = exc.topics if isinstance(exc, AuthorizationError) else sorted(_names(exc))
        # The service's own topics (changelogs, shuffle) are read and written.
        both = [t for t in topics if own_prefix and t.startswith(own_prefix)]
        read = [t for t in topics if t in set(sources) and t not in both]
        write = [t for t in topics if t not in set(sources) and t not in both]
        lines = [
            f"{allow}{' --operation Create' if create else ''} --operation Describe {ops} "
            f"--topic {topic}"
            for ops, names in (
                ("--operation Read", read),
                ("--operation Write", write),
                ("--operation Read --operation Write", both),
            )
            for topic in names
        ]
        if not lines:
            lines = [f"{allow} --operation Describe --operation Read --operation Write --topic ..."]
        return f"not authorized for topic(s) {', '.join(topics) or '?'}; needs: " + "; ".join(lines)
    if isinstance(exc, GroupAuthorizationFailedError):
        group = group_id or "?"
        return (
            f"not authorized for consumer group {group}; needs: "
            f"{allow} --operation Read --group {group}"
        )
    if isinstance(exc, TransactionalIdAuthorizationFailed):
        return (
            "not authorized for the transactional ids of exactly-once delivery; needs: "
            f"{allow} --operation Write --operation Describe --transactional-id "
            f"{group_id or 'clockwork.'} --resource-pattern-type prefixed"
        )
    if isinstance(exc, ClusterAuthorizationFailedError):
        return (
            "not authorized for a cluster operation; needs e.g.: "
            f"{allow} --operation IdempotentWrite --cluster"
        )
    return None


def _names(exc: BaseException) -> list[str]:
    found: list[str] = []
    for arg in exc.args:
        if isinstance(arg, str):
            found.append(arg)
        elif isinstance(arg, list | set | tuple | frozenset):
            found.extend(str(a) for a in arg)
    return found
