"""confluent-kafka helpers shared by the tests: create topics, produce with acks=all and keep
every acknowledgement, read partitions back by assignment (no group)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

REQUEST_TIMEOUT_S = 30.0
T = TypeVar("T")
# Answers a client retries: a partition or group whose leader or coordinator is not serving it
# yet. Kafka gives them for a moment after a topic is created or the broker restarts, while
# Metadata already names the leader.
NOT_READY_ERRORS = (
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    # A new leader's ListOffsets until its high watermark caught up with its log end (issue 11).
    KafkaError.OFFSET_NOT_AVAILABLE,
)
RETRY_BACKOFF_S = 0.1


@dataclass(frozen=True)
class Record:
    """One record as the broker placed it: where, and what."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    # The client must outlive its futures: destroying it fails them.
    client = admin(bootstrap)
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=REQUEST_TIMEOUT_S,
    )
    futures[topic].result(timeout=REQUEST_TIMEOUT_S)
    wait_for_partitions(bootstrap, topic, partitions)


def wait_for_partitions(bootstrap: str, topic: str, partitions: int) -> None:
    """CreateTopics may answer before every partition has a leader in Metadata, and Kafka's leader
    may answer NOT_LEADER_OR_FOLLOWER a moment longer (watermarks waits for that); clients need
    a leader that serves."""
    client = admin(bootstrap)
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while True:
        meta = client.list_topics(topic, timeout=REQUEST_TIMEOUT_S).topics.get(topic)
        if (
            meta is not None
            and meta.error is None
            and len(meta.partitions) == partitions
            and all(p.leader >= 0 and p.error is None for p in meta.partitions.values())
        ):
            break
        assert time.monotonic() < deadline, f"topic {topic} never showed {partitions} led partitions: {meta}"
        time.sleep(0.05)
    watermarks(bootstrap, topic, range(partitions))


def retrying_not_ready(call: Callable[[], T], deadline: float) -> T:
    """`call()`, again after NOT_READY_ERRORS until `deadline`, as clients retry them."""
    while True:
        try:
            return call()
        except KafkaException as e:
            if e.args[0].code() not in NOT_READY_ERRORS or time.monotonic() > deadline:
                raise
        time.sleep(RETRY_BACKOFF_S)


def committed(consumer: Consumer, partitions: list[TopicPartition]) -> list[TopicPartition]:
    """The group's committed offsets, once its coordinator serves them (see NOT_READY_ERRORS)."""
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    return retrying_not_ready(lambda: consumer.committed(partitions, timeout=REQUEST_TIMEOUT_S), deadline)


def record_of(msg: Message) -> Record:
    partition, offset = msg.partition(), msg.offset()
    assert partition is not None and offset is not None
    return Record(partition, offset, msg.key(), msg.value(), msg.timestamp()[1])


def producer(bootstrap: str, **config: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **config})


def produce_acked(
    prod: Producer,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None]],
    partition: int | None = None,
    timestamp_ms: int | None = None,
) -> list[Record]:
    """Produces every (key, value) and returns them in acknowledgement order; any error fails."""
    acked: list[Record] = []
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append(record_of(msg))

    sent = 0
    for key, value in records:
        kwargs: dict[str, object] = {"key": key, "value": value, "on_delivery": on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms + sent
        while True:
            try:
                prod.produce(topic, **kwargs)
                break
            except BufferError:
                prod.poll(0.05)
        sent += 1
        prod.poll(0)
    left = prod.flush(REQUEST_TIMEOUT_S)
    assert left == 0, f"{left} records still unacknowledged after {REQUEST_TIMEOUT_S}s"
    assert not errors, f"{len(errors)} records failed, first: {errors[0]}"
    assert len(acked) == sent
    return acked


def assigned_consumer(bootstrap: str, **config: object) -> Consumer:
    # The Python binding insists on a group.id; the consumer never joins it (assign, no subscribe)
    # and never commits, so the broker sees no group membership.
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused-assign-only",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            **config,
        }
    )


def watermarks(bootstrap: str, topic: str, partitions: Iterable[int]) -> dict[int, tuple[int, int]]:
    """(low, high) of each partition, once its leader serves it (see NOT_READY_ERRORS)."""
    consumer = assigned_consumer(bootstrap)
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    try:
        return {
            p: retrying_not_ready(
                lambda p=p: consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=REQUEST_TIMEOUT_S, cached=False
                ),
                deadline,
            )
            for p in partitions
        }
    finally:
        consumer.close()


def read_partitions(
    bootstrap: str, topic: str, partitions: Iterable[int], timeout_s: float = 60.0, **config: object
) -> dict[int, list[Record]]:
    """Reads each partition from its start up to the high watermark it has when the read begins."""
    partitions = list(partitions)
    ends = {p: high for p, (_, high) in watermarks(bootstrap, topic, partitions).items()}
    out: dict[int, list[Record]] = {p: [] for p in partitions}
    pending = {p for p in partitions if ends[p] > 0}
    if not pending:
        return out
    consumer = assigned_consumer(bootstrap, **config)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        deadline = time.monotonic() + timeout_s
        while pending:
            assert time.monotonic() < deadline, (
                f"read timed out: have { {p: len(v) for p, v in out.items()} }, want ends {ends}"
            )
            for msg in consumer.consume(num_messages=10_000, timeout=0.2):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                rec = record_of(msg)
                if rec.partition in pending:
                    out[rec.partition].append(rec)
                    if rec.offset + 1 >= ends[rec.partition]:
                        pending.discard(rec.partition)
        return out
    finally:
        consumer.close()


def partitions_of(bootstrap: str, topic: str) -> list[int]:
    """The topic's partitions, asking in a way that never auto-creates it."""
    consumer = assigned_consumer(bootstrap, **{"allow.auto.create.topics": False})
    try:
        meta = consumer.list_topics(topic, timeout=REQUEST_TIMEOUT_S).topics[topic]
    finally:
        consumer.close()
    assert meta.error is None, f"topic {topic}: {meta.error}"
    return sorted(meta.partitions)


def read_all(bootstrap: str, topic: str, timeout_s: float = 60.0) -> dict[int, list[Record]]:
    return read_partitions(bootstrap, topic, partitions_of(bootstrap, topic), timeout_s)
