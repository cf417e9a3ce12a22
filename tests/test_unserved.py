"""Features Spindle does not serve yet fail at once, with Kafka's error for them, instead of
leaving clients to retry until their timeout: transactions (FindCoordinator for a
transactional id, InitProducerId with one) and ACLs (answered SECURITY_DISABLED, as Kafka
answers them without an authorizer)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaProducer
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
)
from kafka.admin import ResourcePattern, ResourcePatternFilter
from kafka.admin import ResourceType as KpResourceType
from kafka.errors import KafkaError as KpKafkaError
from kafka.errors import SecurityDisabledError

import clients
from conftest import Broker

# Far longer than a fatal error takes to arrive, far shorter than the timeout given.
FAIL_FAST_S = 5.0
INIT_TIMEOUT_S = 60.0


@pytest.mark.spindle_only("Spindle has no transactions and must say so at once; Kafka has them")
def test_init_transactions_fails_at_once_with_confluent_kafka(broker: Broker, unique) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique("txn")})
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(INIT_TIMEOUT_S)
    elapsed = time.monotonic() - started
    error = raised.value.args[0]
    assert error.fatal(), error
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
    assert "not supported" in error.str(), error
    assert elapsed < FAIL_FAST_S, f"init_transactions took {elapsed:.1f} s"


@pytest.mark.spindle_only("Spindle has no transactions and must say so at once; Kafka has them")
def test_init_transactions_fails_at_once_with_kafka_python(broker: Broker, unique) -> None:
    started = time.monotonic()
    with pytest.raises(KpKafkaError) as raised:
        producer = KafkaProducer(
            bootstrap_servers=broker.bootstrap,
            transactional_id=unique("txn"),
            max_block_ms=int(INIT_TIMEOUT_S * 1000),
        )
        try:
            producer.init_transactions()
        finally:
            producer.close(timeout=1)
    elapsed = time.monotonic() - started
    assert "TransactionalIdAuthorization" in type(raised.value).__name__, raised.value
    assert elapsed < FAIL_FAST_S, f"init_transactions took {elapsed:.1f} s"


def test_acl_apis_answer_security_disabled_with_confluent_kafka(broker: Broker, unique) -> None:
    admin = clients.admin(broker.bootstrap)
    topic = unique("topic")
    binding = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    match_all = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )

    def refused(future) -> KafkaError:
        with pytest.raises(KafkaException) as raised:
            future.result(timeout=clients.REQUEST_TIMEOUT_S)
        return raised.value.args[0]

    created = refused(admin.create_acls([binding])[binding])
    assert created.code() == KafkaError.SECURITY_DISABLED, created
    assert "No Authorizer" in created.str()
    # librdkafka reads DescribeAcls' error code but does not report it (against Kafka too): it
    # answers no ACLs. kafka-python reports it (below).
    assert admin.describe_acls(match_all).result(timeout=clients.REQUEST_TIMEOUT_S) == []
    deleted = refused(admin.delete_acls([match_all])[match_all])
    assert deleted.code() == KafkaError.SECURITY_DISABLED, deleted


def test_acl_apis_answer_security_disabled_with_kafka_python(broker: Broker, unique) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        acl = ACL(
            principal="User:bob",
            host="*",
            operation=ACLOperation.WRITE,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(KpResourceType.TOPIC, unique("topic")),
        )
        result = admin.create_acls([acl])
        assert not result["succeeded"]
        assert result["failed"] == [SecurityDisabledError], result
        match_all = ACLFilter(
            principal=None,
            host=None,
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        with pytest.raises(SecurityDisabledError):
            admin.describe_acls(match_all)
    finally:
        admin.close()
