"""Topic administration through confluent-kafka's AdminClient."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import ConfigResource, NewTopic

import clients
from conftest import Broker

LONG_MAX = 2**63 - 1


def admin_error(future) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=clients.REQUEST_TIMEOUT_S)
    return raised.value.args[0]


def topic_names(bootstrap: str) -> set[str]:
    return set(clients.admin(bootstrap).list_topics(timeout=clients.REQUEST_TIMEOUT_S).topics)


def test_create_describe_delete_a_six_partition_topic(broker: Broker, unique) -> None:
    topic = unique("topic")
    client = clients.admin(broker.bootstrap)

    client.create_topics([NewTopic(topic, 6, 1, config={"retention.ms": "3600000", "segment.bytes": "16777216"})])[
        topic
    ].result(timeout=clients.REQUEST_TIMEOUT_S)
    clients.wait_for_partitions(broker.bootstrap, topic, 6)

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = client.describe_configs([resource])[resource].result(timeout=clients.REQUEST_TIMEOUT_S)
    values = {name: entry.value for name, entry in configs.items()}
    # Set at creation: reported back as set, not as defaults.
    assert values["retention.ms"] == "3600000"
    assert not configs["retention.ms"].is_default
    assert values["segment.bytes"] == "16777216"
    assert not configs["segment.bytes"].is_default
    # Kafka's defaults, which clients and tools expect to read.
    assert values["retention.bytes"] == "-1"
    assert values["cleanup.policy"] == "delete"
    assert int(values["max.message.bytes"]) >= 1_000_000
    assert 0 < int(values["flush.ms"]) <= LONG_MAX
    assert 0 < int(values["flush.messages"]) <= LONG_MAX

    delete_and_wait(broker.bootstrap, topic)


def test_duplicate_create_gets_topic_already_exists(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 2)

    client = clients.admin(broker.bootstrap)
    futures = client.create_topics([NewTopic(topic, 4, 1)])

    assert admin_error(futures[topic]).code() == KafkaError.TOPIC_ALREADY_EXISTS
    meta = client.list_topics(topic, timeout=clients.REQUEST_TIMEOUT_S)
    assert len(meta.topics[topic].partitions) == 2, "the failed create changed the topic"


def test_invalid_and_unknown_topics_get_errors(broker: Broker, unique) -> None:
    client = clients.admin(broker.bootstrap)
    bad = unique("zero-partitions")

    assert admin_error(client.create_topics([NewTopic(bad, 0, 1)])[bad]).code() == KafkaError.INVALID_PARTITIONS
    assert bad not in topic_names(broker.bootstrap)

    missing = unique("missing")
    assert admin_error(client.delete_topics([missing])[missing]).code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def delete_and_wait(bootstrap: str, topic: str) -> None:
    client = clients.admin(bootstrap)
    client.delete_topics([topic])[topic].result(timeout=clients.REQUEST_TIMEOUT_S)
    deadline = time.monotonic() + clients.REQUEST_TIMEOUT_S
    while topic in topic_names(bootstrap):
        assert time.monotonic() < deadline, f"{topic} still listed after DeleteTopics"
        time.sleep(0.05)


def test_a_deleted_topic_comes_back_empty(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1)
    prod = clients.producer(broker.bootstrap)
    clients.produce_acked(prod, topic, [(None, b"old %d" % i) for i in range(10)], partition=0)
    assert clients.watermarks(broker.bootstrap, topic, [0]) == {0: (0, 10)}

    delete_and_wait(broker.bootstrap, topic)
    clients.create_topic(broker.bootstrap, topic, 1)

    assert clients.watermarks(broker.bootstrap, topic, [0]) == {0: (0, 0)}
    [fresh] = clients.produce_acked(clients.producer(broker.bootstrap), topic, [(None, b"new")], partition=0)
    assert (fresh.partition, fresh.offset) == (0, 0)


@pytest.mark.spindle_only("checks spindle's own defaults and flags")
def test_broker_configs_are_described_with_kafkas_names(broker_factory) -> None:
    own = broker_factory(default_partitions=3, extra_args=("--default-retention-ms", "3600000"))
    admin = clients.admin(own.bootstrap)
    [broker_id] = admin.list_topics(timeout=clients.REQUEST_TIMEOUT_S).brokers
    [future] = admin.describe_configs([ConfigResource("broker", str(broker_id))]).values()
    configs = future.result(timeout=clients.REQUEST_TIMEOUT_S)
    assert configs["num.partitions"].value == "3"
    assert configs["log.retention.ms"].value == "3600000"
    assert configs["log.segment.bytes"].value == str(1 << 30)
    assert configs["message.max.bytes"].value == "1048588"
    assert configs["auto.create.topics.enable"].value == "true"
    assert configs["broker.id"].value == str(broker_id)


def test_create_partitions_follows_the_replica_assignment_and_checks_its_count(broker: Broker, unique) -> None:
    from confluent_kafka.admin import NewPartitions

    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1)
    client = clients.admin(broker.bootstrap)
    [node] = client.list_topics(timeout=10).brokers

    wrong = client.create_partitions([NewPartitions(topic, 3, replica_assignment=[[node]])])
    with pytest.raises(KafkaException) as refused:
        wrong[topic].result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT

    right = client.create_partitions([NewPartitions(topic, 3, replica_assignment=[[node], [node]])])
    right[topic].result(timeout=30)
    clients.wait_for_partitions(broker.bootstrap, topic, 3)
    partitions = client.list_topics(topic, timeout=10).topics[topic].partitions
    assert sorted(partitions) == [0, 1, 2]
    assert all(p.replicas == [node] for p in partitions.values())
