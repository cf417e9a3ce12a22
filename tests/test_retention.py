"""Retention deletes whole old segments, by size and by age, and consumers see the log start move."""

from __future__ import annotations

import time

import pytest

import clients
from conftest import Broker

pytestmark = pytest.mark.spindle_only("spindle's retention check interval")

CHECK_INTERVAL = ("--retention-check-interval-ms", "200")


def settled_watermarks(broker: Broker, topic: str, timeout_s: float = 30.0) -> tuple[int, int]:
    """The watermarks once retention has moved the log start and then left it alone for a second
    (a pass may run while the last records are still arriving, and the next one go further)."""
    deadline = time.monotonic() + timeout_s
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = clients.watermarks(broker.bootstrap, topic, [0])[0]
        if now != last:
            last, since = now, time.monotonic()
        elif now[0] > 0 and time.monotonic() - since > 1.0:
            return now
        time.sleep(0.1)
    assert last is not None
    return last


def test_retention_bytes_keeps_the_newest_segments(broker_factory, unique) -> None:
    broker: Broker = broker_factory(extra_args=CHECK_INTERVAL)
    topic = unique("topic")
    clients.create_topic(
        broker.bootstrap, topic, 1, {"segment.bytes": "65536", "retention.bytes": "200000"}
    )
    values = [(None, b"%06d" % i + b"x" * 994) for i in range(2_000)]
    # Batches must fit a segment (Kafka refuses larger ones too).
    prod = clients.producer(broker.bootstrap, **{"batch.size": 16384})
    acked = clients.produce_acked(prod, topic, values, partition=0)

    low, high = settled_watermarks(broker, topic)

    assert high == 2_000
    assert low > 0, "retention never deleted a segment"
    # Whole segments only, and never below retention.bytes: about 200 KB of 1 KB records stay.
    assert high - low >= 150
    kept = clients.read_partitions(broker.bootstrap, topic, [0])[0]
    assert [r.offset for r in kept] == list(range(low, high))
    assert [r.value for r in kept] == [r.value for r in acked[low:]]


def test_retention_ms_deletes_expired_records_even_in_the_active_segment(broker_factory, unique) -> None:
    broker: Broker = broker_factory(extra_args=CHECK_INTERVAL)
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1, {"retention.ms": "60000"})
    an_hour_ago = int(time.time() * 1000) - 3_600_000
    clients.produce_acked(
        clients.producer(broker.bootstrap), topic, [(None, b"old")] * 100, partition=0, timestamp_ms=an_hour_ago
    )

    low, high = settled_watermarks(broker, topic)

    assert (low, high) == (100, 100), "every record was older than retention.ms"
    # The log goes on at the same offsets.
    [fresh] = clients.produce_acked(clients.producer(broker.bootstrap), topic, [(None, b"new")], partition=0)
    assert fresh.offset == 100
