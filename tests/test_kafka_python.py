"""kafka-python 3 (idempotent by default) produces and fetches through the broker."""

from __future__ import annotations

import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

import clients
from conftest import Broker

RECORDS = 3_000
PARTITIONS = 3


def produce_with_kafka_python(broker: Broker, topic: str) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    try:
        # kafka-python turns idempotence off, with only a warning, if the broker looks too old.
        assert producer.config["enable_idempotence"] is True
        assert producer.config["acks"] == -1
        futures = [
            (b"k%d" % i, b"v%d" % i, producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % PARTITIONS))
            for i in range(RECORDS)
        ]
        producer.flush(timeout=clients.REQUEST_TIMEOUT_S)
        acked = {}
        for key, value, future in futures:
            meta = future.get(timeout=clients.REQUEST_TIMEOUT_S)
            acked[(meta.partition, meta.offset)] = (key, value)
        return acked
    finally:
        producer.close(timeout=10)


def poll_all(consumer: KafkaConsumer) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """Polls until RECORDS records arrived; each (partition, offset) only once."""
    got: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    deadline = time.monotonic() + 60
    while len(got) < RECORDS:
        assert time.monotonic() < deadline, f"got {len(got)} of {RECORDS}"
        for tp, messages in consumer.poll(timeout_ms=200).items():
            for m in messages:
                assert (tp.partition, m.offset) not in got, "a record arrived twice"
                got[(tp.partition, m.offset)] = (m.key, m.value)
    return got


def test_kafka_python_produces_and_fetches(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, PARTITIONS)

    acked = produce_with_kafka_python(broker, topic)
    assert len(acked) == RECORDS
    for p in range(PARTITIONS):
        assert sorted(o for (q, o) in acked if q == p) == list(range(RECORDS // PARTITIONS))

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, group_id=None)
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        assert poll_all(consumer) == acked
        assert consumer.end_offsets(partitions) == {tp: RECORDS // PARTITIONS for tp in partitions}
    finally:
        consumer.close()

    # And a librdkafka client sees the same log.
    read = clients.read_all(broker.bootstrap, topic)
    assert {(r.partition, r.offset): (r.key, r.value) for rs in read.values() for r in rs} == acked


def test_kafka_python_group_consumer_reads_everything(broker: Broker, unique) -> None:
    topic = unique("topic")
    group = unique("group")
    clients.create_topic(broker.bootstrap, topic, PARTITIONS)
    acked = produce_with_kafka_python(broker, topic)

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        assert poll_all(consumer) == acked
        assert {tp.partition for tp in consumer.assignment()} == set(range(PARTITIONS))
        consumer.commit()
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
        assert committed == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
    finally:
        consumer.close()
