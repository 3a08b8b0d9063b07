"""The words an operator gets for a refused operation: the kafka-acls line it needs."""

from __future__ import annotations

from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from service.runtime.kafka.access import AuthorizationError, authorization_problem
from service.runtime.security import KafkaSecurity

PRINCIPAL = "User:app"
ALLOW = f"kafka-acls --add --allow-principal {PRINCIPAL}"


def test_a_source_topic_needs_read_an_output_write_an_internal_both() -> None:
    exc = TopicAuthorizationFailedError({"in", "out", "clockwork.p.changelog"})
    found = authorization_problem(
        exc, principal=PRINCIPAL, sources=("in",), own_prefix="clockwork."
    )
    assert found is not None
    assert f"{ALLOW} --operation Describe --operation Read --topic in" in found
    assert f"{ALLOW} --operation Describe --operation Write --topic out" in found
    assert (
        f"{ALLOW} --operation Describe --operation Read --operation Write "
        "--topic clockwork.p.changelog"
    ) in found


def test_a_refused_describe_or_create_names_its_topics() -> None:
    described = authorization_problem(
        AuthorizationError(["in"]), principal=PRINCIPAL, sources=["in"]
    )
    assert described is not None
    assert f"{ALLOW} --operation Describe --operation Read --topic in" in described
    created = authorization_problem(AuthorizationError(["out"], create=True), principal=PRINCIPAL)
    assert created is not None
    assert (
        f"{ALLOW} --operation Create --operation Describe --operation Write --topic out" in created
    )


def test_group_and_transactional_ids() -> None:
    group = authorization_problem(
        GroupAuthorizationFailedError(), principal=PRINCIPAL, group_id="clockwork.p"
    )
    assert group is not None and f"{ALLOW} --operation Read --group clockwork.p" in group
    txn = authorization_problem(
        TransactionalIdAuthorizationFailed(), principal=PRINCIPAL, group_id="clockwork.p"
    )
    assert txn is not None
    assert "--transactional-id clockwork.p --resource-pattern-type prefixed" in txn


def test_other_errors_are_not_authorization_problems() -> None:
    assert authorization_problem(KafkaConnectionError("x"), principal=PRINCIPAL) is None
    assert authorization_problem(ValueError("x"), principal=PRINCIPAL) is None


def test_the_principal_the_broker_sees() -> None:
    sasl = KafkaSecurity("SASL_SSL", "PLAIN", "app", "pw")
    assert sasl.principal == "User:app"
    assert KafkaSecurity().principal == "User:ANONYMOUS"
    assert "CN=" in KafkaSecurity("SSL", ssl_cert_file="c", ssl_key_file="k").principal
