"""Errors a client must see as Kafka's error codes: unknown topics, offsets past the end."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

import clients
import kafka_wire
from conftest import Broker


def metadata_error(broker: Broker, topic: str, allow_auto_topic_creation: bool) -> int:
    with kafka_wire.Connection(broker.host, broker.port) as conn:
        [info] = conn.metadata([topic], allow_auto_topic_creation=allow_auto_topic_creation).topics
    assert info.name == topic
    return info.error_code


def test_metadata_that_may_not_create_gets_unknown_topic(broker: Broker, unique) -> None:
    topic = unique("missing")

    assert metadata_error(broker, topic, allow_auto_topic_creation=False) == kafka_wire.ERROR_UNKNOWN_TOPIC_OR_PARTITION
    # Asking did not create it.
    assert metadata_error(broker, topic, allow_auto_topic_creation=False) == kafka_wire.ERROR_UNKNOWN_TOPIC_OR_PARTITION
    consumer = clients.assigned_consumer(broker.bootstrap, **{"allow.auto.create.topics": False})
    try:
        meta = consumer.list_topics(topic, timeout=clients.REQUEST_TIMEOUT_S).topics[topic]
        assert meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        consumer.close()
    assert (
        produce_error(broker, topic, **{"allow.auto.create.topics": False}).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    )
    assert metadata_error(broker, topic, allow_auto_topic_creation=False) == kafka_wire.ERROR_UNKNOWN_TOPIC_OR_PARTITION


def produce_error(broker: Broker, topic: str, **config: object) -> KafkaError:
    """Produces one record that must fail, and returns its error."""
    outcomes: list[KafkaError | None] = []
    prod = clients.producer(
        broker.bootstrap, **{"topic.metadata.propagation.max.ms": 1000, "message.timeout.ms": 10_000, **config}
    )
    prod.produce(topic, b"nowhere", on_delivery=lambda err, msg: outcomes.append(err))
    assert prod.flush(clients.REQUEST_TIMEOUT_S) == 0
    [err] = outcomes
    assert err is not None, "the record was acknowledged"
    return err


@pytest.mark.spindle_only("--auto-create-topics")
def test_unknown_topic_with_auto_create_off(broker_factory, unique) -> None:
    broker = broker_factory(auto_create_topics=False)
    topic = unique("missing")

    # Even a request that allows creation may not create: the broker forbids it.
    assert metadata_error(broker, topic, allow_auto_topic_creation=True) == kafka_wire.ERROR_UNKNOWN_TOPIC_OR_PARTITION

    assert produce_error(broker, topic).code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert metadata_error(broker, topic, allow_auto_topic_creation=False) == kafka_wire.ERROR_UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.spindle_only("--auto-create-topics, --default-partitions")
def test_auto_create_on_uses_the_default_partition_count(broker_factory, unique) -> None:
    broker = broker_factory(auto_create_topics=True, default_partitions=3)
    topic = unique("auto")

    [acked] = clients.produce_acked(clients.producer(broker.bootstrap), topic, [(b"k", b"v")])

    assert acked.offset == 0
    meta = clients.admin(broker.bootstrap).list_topics(topic, timeout=clients.REQUEST_TIMEOUT_S).topics[topic]
    assert sorted(meta.partitions) == [0, 1, 2]


def test_fetch_beyond_the_end_gets_offset_out_of_range(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1)
    clients.produce_acked(
        clients.producer(broker.bootstrap), topic, [(None, b"r%d" % i) for i in range(10)], partition=0
    )

    consumer = clients.assigned_consumer(broker.bootstrap, **{"auto.offset.reset": "error"})
    try:
        consumer.assign([TopicPartition(topic, 0, 1000)])
        deadline = time.monotonic() + clients.REQUEST_TIMEOUT_S
        while (msg := consumer.poll(0.2)) is None:
            assert time.monotonic() < deadline, "no error for a fetch at offset 1000 of 10"
        err = msg.error()
        assert err is not None, f"got a record at offset {msg.offset()} instead of an error"
        # With auto.offset.reset=error librdkafka reports the broker's OFFSET_OUT_OF_RANGE this way.
        assert err.code() == KafkaError._AUTO_OFFSET_RESET
        assert "Offset out of range" in err.str()
        assert (msg.partition(), msg.offset()) == (0, 1000)
    finally:
        consumer.close()


def test_fetch_at_the_end_waits_for_the_next_record(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1)
    prod = clients.producer(broker.bootstrap)
    clients.produce_acked(prod, topic, [(None, b"r%d" % i) for i in range(10)], partition=0)

    consumer = clients.assigned_consumer(broker.bootstrap, **{"auto.offset.reset": "error"})
    try:
        consumer.assign([TopicPartition(topic, 0, 10)])
        # The end is a valid position: polling there yields neither records nor errors.
        quiet_until = time.monotonic() + 1.0
        while time.monotonic() < quiet_until:
            msg = consumer.poll(0.2)
            assert msg is None, f"at the end, got {msg.error() or msg.offset()}"
        [acked] = clients.produce_acked(prod, topic, [(None, b"next")], partition=0)
        assert acked.offset == 10
        deadline = time.monotonic() + clients.REQUEST_TIMEOUT_S
        while (msg := consumer.poll(0.2)) is None:
            assert time.monotonic() < deadline, "the record produced at the end never arrived"
        assert msg.error() is None, msg.error()
        assert (msg.offset(), msg.value()) == (10, b"next")
    finally:
        consumer.close()


def test_committing_offsets_of_a_missing_topic_gets_unknown_topic(broker: Broker, unique) -> None:
    topic, missing = unique("topic"), unique("missing")
    clients.create_topic(broker.bootstrap, topic, 1)
    consumer = clients.assigned_consumer(broker.bootstrap, **{"group.id": unique("group")})
    try:
        with pytest.raises(KafkaException) as raised:
            consumer.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(missing, 0, 5)], asynchronous=False)
        assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        # The partition the broker has is committed all the same, as Kafka does.
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=clients.REQUEST_TIMEOUT_S)
        assert committed.offset == 3
    finally:
        consumer.close()
