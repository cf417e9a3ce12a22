"""Produce with acks=all and read back by assignment, with confluent-kafka (current librdkafka)."""

from __future__ import annotations

import os
import time
from collections import defaultdict

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, TopicPartition
from confluent_kafka.admin import ConfigResource

import clients
from conftest import Broker

RECORDS = 100_000
KEYS = 1_000
PARTITIONS = 6


def test_100k_keyed_records_are_read_back_once_in_order(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, PARTITIONS)
    produced = [(b"key-%d" % (i % KEYS), b"value-%d" % i) for i in range(RECORDS)]

    acked = clients.produce_acked(clients.producer(broker.bootstrap, **{"linger.ms": 20}), topic, produced)
    read = clients.read_all(broker.bootstrap, topic)

    # Acknowledgements: every (partition, offset) once, each partition densely from 0.
    by_position = {(r.partition, r.offset): r for r in acked}
    assert len(by_position) == RECORDS, "two acknowledgements named the same offset"
    per_partition_count = defaultdict(int)
    for r in acked:
        per_partition_count[r.partition] += 1
    for p, count in per_partition_count.items():
        assert {o for (q, o) in by_position if q == p} == set(range(count)), f"partition {p} offsets have gaps"
    assert len(per_partition_count) == PARTITIONS, "the keys did not spread over every partition"

    # Reads: exactly what was acknowledged, where it was acknowledged.
    assert sum(len(v) for v in read.values()) == RECORDS
    for p, records in read.items():
        assert [r.offset for r in records] == list(range(len(records))), f"partition {p} read out of order"
        for r in records:
            sent = by_position[(p, r.offset)]
            assert (r.key, r.value) == (sent.key, sent.value), f"partition {p} offset {r.offset}"
    values = [r.value for records in read.values() for r in records]
    assert len(set(values)) == RECORDS, "a record was read twice"

    # Per key: one partition, in the order produced.
    partition_of_key: dict[bytes, int] = {}
    last_index_of_key: dict[bytes, int] = {}
    for p, records in read.items():
        for r in records:
            assert r.key is not None and r.value is not None
            assert partition_of_key.setdefault(r.key, p) == p, f"key {r.key!r} on two partitions"
            index = int(r.value.removeprefix(b"value-"))
            assert index > last_index_of_key.get(r.key, -1), f"key {r.key!r} out of order"
            last_index_of_key[r.key] = index

    marks = clients.watermarks(broker.bootstrap, topic, range(PARTITIONS))
    assert marks == {p: (0, per_partition_count[p]) for p in range(PARTITIONS)}


def test_watermarks_and_offsets_for_times(broker: Broker, unique) -> None:
    topic = unique("topic")
    # The records are stamped in 2023: with the default 7-day retention, any retention pass during
    # the test would rightly delete them (Kafka's too), so this topic keeps records forever.
    clients.create_topic(broker.bootstrap, topic, 2, {"retention.ms": "-1"})
    base_ms = 1_700_000_000_000
    # Partition 0: 50 records whose timestamps step by 1 s from base_ms; partition 1 stays empty.
    prod = clients.producer(broker.bootstrap)
    acked = []
    for i in range(50):
        acked += clients.produce_acked(prod, topic, [(None, b"t%d" % i)], partition=0, timestamp_ms=base_ms + i * 1000)
    assert [r.timestamp_ms for r in acked] == [base_ms + i * 1000 for i in range(50)]

    assert clients.watermarks(broker.bootstrap, topic, [0, 1]) == {0: (0, 50), 1: (0, 0)}

    queries = {
        base_ms - 5000: 0,  # before everything: the first record
        base_ms: 0,  # exactly a record's timestamp: that record
        base_ms + 10_000: 10,
        base_ms + 10_001: 11,  # between two: the later one
        base_ms + 49_000: 49,
        base_ms + 49_001: -1,  # after everything: no offset
    }
    consumer = clients.assigned_consumer(broker.bootstrap)
    try:
        for ts, want in queries.items():
            [answer] = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=clients.REQUEST_TIMEOUT_S)
            assert answer.error is None
            assert answer.offset == want, f"offsets_for_times({ts - base_ms:+} ms from base)"
        [empty] = consumer.offsets_for_times([TopicPartition(topic, 1, base_ms)], timeout=clients.REQUEST_TIMEOUT_S)
        assert empty.offset == -1
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_round_trip(broker: Broker, unique, codec: str) -> None:
    topic = unique(codec)
    clients.create_topic(broker.bootstrap, topic, 1)
    # Compressible values (repetitive text) and incompressible ones (random bytes), mixed.
    produced = [(b"k%d" % i, (b"compressible %d " % i) * 50 if i % 2 else os.urandom(300)) for i in range(2_000)]

    prod = clients.producer(broker.bootstrap, **{"compression.type": codec, "linger.ms": 50})
    acked = clients.produce_acked(prod, topic, produced, partition=0)
    read = clients.read_partitions(broker.bootstrap, topic, [0])[0]

    assert [r.offset for r in acked] == list(range(len(produced)))
    assert [(r.key, r.value) for r in read] == produced


def test_a_900_kb_record_round_trips(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1)
    big = os.urandom(900 * 1024)
    produced = [(b"small-before", b"a"), (b"big", big), (b"small-after", b"b")]

    prod = clients.producer(broker.bootstrap, **{"linger.ms": 0})
    acked = clients.produce_acked(prod, topic, produced, partition=0)
    read = clients.read_partitions(broker.bootstrap, topic, [0])[0]

    assert [r.offset for r in acked] == [0, 1, 2]
    assert [(r.key, r.value) for r in read] == produced


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_log_append_time_topics_stamp_records_with_the_brokers_time(broker: Broker, unique, codec: str) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1, {"message.timestamp.type": "LogAppendTime"})
    prod = clients.producer(broker.bootstrap, **{"compression.type": codec})
    acked: list[tuple[int, int]] = []
    prod_start_ms = int(time.time() * 1000)
    for i in range(20):
        # The producer's own timestamps are from 2001: the broker's replace them.
        prod.produce(
            topic, value=b"v%d" % i, partition=0, timestamp=1_000_000_000_000 + i,
            on_delivery=lambda err, msg: acked.append(msg.timestamp()) if err is None else None,
        )  # fmt: skip
    assert prod.flush(clients.REQUEST_TIMEOUT_S) == 0
    prod_end_ms = int(time.time() * 1000)

    assert len(acked) == 20
    for kind, ts in acked:
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert prod_start_ms - 1000 <= ts <= prod_end_ms + 1000
    read = clients.read_partitions(broker.bootstrap, topic, [0])[0]
    assert [r.value for r in read] == [b"v%d" % i for i in range(20)]
    assert sorted({r.timestamp_ms for r in read}) == sorted({ts for _, ts in acked})
    admin = clients.admin(broker.bootstrap)
    [config] = admin.describe_configs([ConfigResource("topic", topic)]).values()
    assert config.result(timeout=clients.REQUEST_TIMEOUT_S)["message.timestamp.type"].value == "LogAppendTime"
