"""A topic's compression.type: `producer` (the default) stores batches exactly as sent; a codec
has the broker rewrite batches sent in another one (as Kafka does), keeping every record's key,
value, headers and timestamp."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from kafka.record.default_records import DefaultRecordBatchBuilder

import clients
import kafka_wire
from conftest import Broker

ZSTD = 4
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# The records are stamped in 2023: with the default 7-day retention, a retention pass during a
# test would rightly delete them (Kafka's too), so every topic here keeps its records forever.
BASE_TIMESTAMP_MS = 1_700_000_000_000


def create_topic(broker: Broker, topic: str, config: dict[str, str] | None = None) -> None:
    """A one-partition topic that keeps records stamped BASE_TIMESTAMP_MS."""
    clients.create_topic(broker.bootstrap, topic, 1, {"retention.ms": "-1", **(config or {})})


def stored_batches(broker: Broker, topic: str) -> tuple[bytes, list[kafka_wire.BatchHeader]]:
    with kafka_wire.Connection(broker.host, broker.port) as conn:
        fetched = kafka_wire.fetch(conn, topic, 0, 0)
    assert fetched.error_code == kafka_wire.ERROR_NONE
    return fetched.records, kafka_wire.batch_headers(fetched.records)


def produce_with(broker: Broker, topic: str, codec: str, first: int, count: int) -> None:
    prod = clients.producer(broker.bootstrap, **{"compression.type": codec, "linger.ms": 50})
    for i in range(first, first + count):
        prod.produce(
            topic,
            key=b"key-%d" % i,
            value=b"value-%d " % i + b"v" * 200,
            headers=[("n", b"%d" % i), ("n", b"again"), ("codec", codec.encode())],
            timestamp=BASE_TIMESTAMP_MS + i,
            partition=0,
        )
    assert prod.flush(clients.REQUEST_TIMEOUT_S) == 0


def read_back(broker: Broker, topic: str, count: int) -> list:
    consumer = clients.assigned_consumer(broker.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = []
        while len(got) < count:
            for msg in consumer.consume(num_messages=count, timeout=5):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                got.append(msg)
        return got
    finally:
        consumer.close()


def test_a_zstd_topic_stores_zstd_whatever_the_producer_sent(broker: Broker, unique) -> None:
    topic = unique("topic")
    create_topic(broker, topic, {"compression.type": "zstd"})
    sent = [("none", 0, 40), ("gzip", 40, 40), ("lz4", 80, 40), ("snappy", 120, 40)]
    for codec, first, count in sent:
        produce_with(broker, topic, codec, first, count)
    total = sum(count for _, _, count in sent)

    _, headers = stored_batches(broker, topic)
    assert headers, "no batches fetched"
    assert {h.codec for h in headers} == {ZSTD}, [h.codec for h in headers]
    assert sum(h.record_count for h in headers) == total
    assert [h.base_offset for h in headers] == sorted(h.base_offset for h in headers)

    for i, msg in enumerate(read_back(broker, topic, total)):
        codec = next(c for c, first, count in sent if first <= i < first + count)
        assert msg.offset() == i
        assert msg.key() == b"key-%d" % i
        assert msg.value() == b"value-%d " % i + b"v" * 200
        # Repeated header keys too, in order.
        assert msg.headers() == [("n", b"%d" % i), ("n", b"again"), ("codec", codec.encode())]
        assert msg.timestamp()[1] == BASE_TIMESTAMP_MS + i


def raw_batch(count: int, codec: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, timestamp=BASE_TIMESTAMP_MS + i, key=b"k%d" % i, value=b"x" * 100, headers=[("h", b"1")])
    return bytes(builder.build())


def without_offset_and_epoch(batch: bytes) -> bytes:
    """The parts of a stored batch the broker may not change: all but base offset and leader epoch."""
    return batch[8:12] + batch[16:]


# kafka-python builds the batches; it has no lz4 or zstd codec here (confluent-kafka's lz4 is
# checked below).
@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_a_producer_topic_stores_batches_byte_for_byte(broker: Broker, unique, codec: str) -> None:
    topic = unique("topic")
    create_topic(broker, topic)  # compression.type=producer, the default
    sent = raw_batch(30, CODECS[codec])
    with kafka_wire.Connection(broker.host, broker.port) as conn:
        assert kafka_wire.produce(conn, topic, 0, sent) == (kafka_wire.ERROR_NONE, 0)
    records, headers = stored_batches(broker, topic)
    assert len(headers) == 1
    assert headers[0].crc == kafka_wire.batch_headers(sent)[0].crc
    assert without_offset_and_epoch(records[: headers[0].length]) == without_offset_and_epoch(sent)


def test_a_producer_topic_keeps_each_batch_in_its_producers_codec(broker: Broker, unique) -> None:
    topic = unique("topic")
    create_topic(broker, topic)
    produce_with(broker, topic, "lz4", 0, 20)
    produce_with(broker, topic, "none", 20, 20)
    _, headers = stored_batches(broker, topic)
    assert [h.codec for h in headers if h.base_offset < 20] and all(
        h.codec == CODECS["lz4"] for h in headers if h.base_offset < 20
    )
    assert all(h.codec == CODECS["none"] for h in headers if h.base_offset >= 20)


def test_a_recompressed_batch_gets_a_new_crc_and_a_topic_can_be_switched(broker: Broker, unique) -> None:
    topic = unique("topic")
    create_topic(broker, topic, {"compression.type": "gzip"})
    sent = raw_batch(30)
    with kafka_wire.Connection(broker.host, broker.port) as conn:
        assert kafka_wire.produce(conn, topic, 0, sent) == (kafka_wire.ERROR_NONE, 0)
    _, headers = stored_batches(broker, topic)
    assert [(h.codec, h.record_count) for h in headers] == [(1, 30)]
    assert headers[0].crc != kafka_wire.batch_headers(sent)[0].crc

    # Back to `producer`: the next batch is stored as sent.
    admin = clients.admin(broker.bootstrap)
    entry = ConfigEntry("compression.type", "producer", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(timeout=clients.REQUEST_TIMEOUT_S)
    with kafka_wire.Connection(broker.host, broker.port) as conn:
        assert kafka_wire.produce(conn, topic, 0, sent) == (kafka_wire.ERROR_NONE, 30)
    _, headers = stored_batches(broker, topic)
    assert [h.codec for h in headers] == [1, 0]
    assert headers[1].crc == kafka_wire.batch_headers(sent)[0].crc


def test_every_kafka_value_is_accepted_and_others_refused(broker: Broker, unique) -> None:
    for value in ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]:
        topic = unique(f"topic-{value}")
        clients.create_topic(broker.bootstrap, topic, 1, {"compression.type": value})
    with pytest.raises(KafkaException) as raised:
        clients.create_topic(broker.bootstrap, unique("brotli"), 1, {"compression.type": "brotli"})
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG
