"""The broker's memory stays within its budgets under hostile and heavy load (issue 15).

Each test starts its own broker with small budgets, so it is cheap, and watches the broker's
resident memory (VmRSS in /proc/PID/status, sampled every 50 ms) against its baseline plus the
budgets that cover the load. Without the budgets the first test would have the broker zero
300 x 90 MiB and the second hold 100 x 50 MB of fetch responses: both far over the bound.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import clients
import kafka_wire
from conftest import TEST_CORES, Broker

MIB = 1 << 20
# What a shard's storage may hold besides the budgets under test: its read-ahead budget
# (storage's default, 64 MiB) and the batch cache these tests set (--cache-bytes).
READAHEAD_BYTES_PER_SHARD = 64 * MIB
# Allocator slack, thread stacks, the kernel's view of pages just freed.
RSS_SLACK_BYTES = 64 * MIB
# Under 100 consumers the fan-out peaks about 45 MiB over its budgets with one shard (measured;
# read-ahead stretches dropped while their reads are still in flight are the likely holders).
FANOUT_SLACK_BYTES = 96 * MIB

API_PRODUCE = 0
API_FETCH = 1


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


class RssWatch:
    """Samples a process's VmRSS in a thread; `peak` is the largest seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def __enter__(self) -> RssWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def pid_of(broker: Broker) -> int:
    assert broker.process is not None
    return broker.process.pid


@contextmanager
def latency_probe(bootstrap: str, topic: str) -> Iterator[list[float]]:
    """An ordinary client producing (acks=all) and reading back one record at a time while the
    body runs; yields the list of round-trip times it measured."""
    latencies: list[float] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])

    def run() -> None:
        try:
            n = 0
            while not stop.is_set():
                started = time.monotonic()
                producer.produce(topic, value=f"probe-{n}".encode(), partition=0)
                assert producer.flush(10) == 0, "a probe record was not acknowledged"
                while True:
                    msg = consumer.poll(10)
                    assert msg is not None, "a probe record was not fetched within 10 s"
                    assert msg.error() is None, msg.error()
                    if msg.value() == f"probe-{n}".encode():
                        break
                latencies.append(time.monotonic() - started)
                n += 1
                time.sleep(0.05)
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    # One round before the load, so connections and metadata are in place.
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not latencies and not errors:
        assert time.monotonic() < deadline, "the probe never completed a round"
        time.sleep(0.05)
    try:
        yield latencies
    finally:
        stop.set()
        thread.join(30)
        consumer.close()
    if errors:
        raise errors[0]


def broker_config(bootstrap: str) -> dict[str, str]:
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.BROKER, "0")
    client = clients.admin(bootstrap)  # must outlive its futures
    future = client.describe_configs([resource])[resource]
    return {name: entry.value for name, entry in future.result(timeout=30).items()}


@pytest.mark.spindle_only("--connections-max-idle-ms is spindle's flag for Kafka's setting")
def test_idle_connections_are_closed_and_busy_ones_kept(broker_factory: Callable[..., Broker]) -> None:
    idle_s = 1.0
    broker = broker_factory(extra_args=("--connections-max-idle-ms", str(int(idle_s * 1000))))
    with (
        kafka_wire.Connection(broker.host, broker.port) as idle,
        kafka_wire.Connection(broker.host, broker.port) as busy,
    ):
        idle.api_versions()
        started = time.monotonic()
        # Requests more often than the idle timeout keep a connection open.
        while time.monotonic() - started < 3 * idle_s:
            busy.api_versions()
            time.sleep(idle_s / 4)
        with pytest.raises((kafka_wire.WireError, ConnectionError)):
            idle.api_versions()
        busy.api_versions()


def produce_header_v3() -> bytes:
    """The start of a Produce v3 body (transactional id, acks, timeout): what a real client's
    large produce frame starts with."""
    return kafka_wire.string(None) + struct.pack(">hi", -1, 30_000)


@pytest.mark.spindle_only("--request-memory-bytes and --request-read-timeout-ms are spindle's")
def test_partial_frames_stay_in_the_request_budget_and_are_closed_after_the_read_timeout(
    broker_factory: Callable[..., Broker], unique: Callable[[str], str]
) -> None:
    connections = 300  # the figure; each costs this test 1 MiB of socket buffers
    announced = 90 * MIB
    sent_bytes = 1 * MIB
    request_memory = 256 * MIB  # a 90 MiB frame fits in a shard's share with one or two shards
    read_timeout_s = 3.0
    broker = broker_factory(
        extra_args=(
            "--request-memory-bytes",
            str(request_memory),
            "--request-read-timeout-ms",
            str(int(read_timeout_s * 1000)),
            "--cache-bytes",
            str(16 * MIB),
        )
    )
    topic = unique("probe")
    clients.create_topic(broker.bootstrap, topic, 1)
    # An operator sees the budgets: one log line per shard at start, and DescribeConfigs.
    assert broker.log_path.read_text(errors="replace").count("memory budgets") == TEST_CORES
    described = broker_config(broker.bootstrap)
    assert described["queued.max.request.bytes"] == str(request_memory // TEST_CORES * TEST_CORES)
    assert described["spindle.request.read.timeout.ms"] == str(int(read_timeout_s * 1000))
    assert "bytes in use" in described["spindle.fetch.memory.in.use"]
    with latency_probe(broker.bootstrap, topic) as latencies:
        baseline = rss_bytes(pid_of(broker))
        with RssWatch(pid_of(broker)) as watch:
            socks = []
            header = struct.pack(">hhi", API_PRODUCE, 3, 1) + kafka_wire.string("hostile") + produce_header_v3()
            for _ in range(connections):
                s = socket.create_connection((broker.host, broker.port), timeout=10)
                s.setblocking(False)
                socks.append([s, struct.pack(">i", announced) + header + bytes(sent_bytes - len(header))])
            started = time.monotonic()
            # Send what the kernel takes; what the broker does not read waits in socket buffers.
            send_until = started + 2.0
            while time.monotonic() < send_until and any(data for _, data in socks):
                for entry in socks:
                    s, data = entry
                    if data:
                        try:
                            entry[1] = data[s.send(data) :]
                        except BlockingIOError:
                            pass
                time.sleep(0.01)
            # Every connection is closed by the broker within the read timeout (plus slack for
            # a loaded machine), and none before it.
            closed_at: dict[int, float] = {}
            deadline = started + read_timeout_s + 15
            while len(closed_at) < connections and time.monotonic() < deadline:
                for i, (s, _) in enumerate(socks):
                    if i in closed_at:
                        continue
                    try:
                        if s.recv(1) == b"":
                            closed_at[i] = time.monotonic() - started
                    except BlockingIOError:
                        pass
                    except ConnectionError:
                        closed_at[i] = time.monotonic() - started
                time.sleep(0.05)
            for s, _ in socks:
                s.close()
        probe_rounds = len(latencies)
    assert len(closed_at) == connections, f"{connections - len(closed_at)} connections still open"
    assert min(closed_at.values()) >= read_timeout_s * 0.9, f"closed early: {min(closed_at.values()):.2f}s"
    bound = baseline + request_memory + RSS_SLACK_BYTES
    assert watch.peak <= bound, (
        f"peak RSS {watch.peak / MIB:.0f} MiB over baseline {baseline / MIB:.0f} MiB + "
        f"request budget {request_memory / MIB:.0f} MiB + slack"
    )
    print(f"partial frames: baseline {baseline / MIB:.0f} MiB, peak {watch.peak / MIB:.0f} MiB, bound {bound / MIB:.0f}")
    assert probe_rounds >= 5, f"the ordinary client got only {probe_rounds} round trips done"
    # A client starved behind the hostile frames would wait until the broker closes them, the
    # read timeout (3 s) after they started: its round takes 2-3 s. One round of 1.1-1.5 s
    # among rounds of milliseconds is this shared machine stalling the probe's fsync (seen
    # 2026-12-03, 1 run in 4-9, with the broker builds before and after that day's changes),
    # so the bound sits between the two.
    assert max(latencies) < 2.0, f"an ordinary produce+fetch took {max(latencies):.2f}s under the attack"
    log = broker.log_path.read_text(errors="replace")
    timeouts = log.count(f"frame not complete within {int(read_timeout_s * 1000)} ms")
    assert timeouts == connections, f"{timeouts} read-timeout log lines for {connections} connections"


class FetchStream:
    """One raw consumer connection: Fetch v4 requests, responses parsed as they stream in (batch
    headers only), so a 50 MB answer costs this test no 50 MB."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=60)
        self.correlation_id = 0

    def recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, MIB))
            if not chunk:
                raise kafka_wire.WireError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def skip(self, n: int) -> None:
        while n:
            chunk = self.sock.recv(min(n, MIB))
            if not chunk:
                raise kafka_wire.WireError("connection closed by the broker")
            n -= len(chunk)

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> tuple[int, int]:
        """One fetch; returns (record bytes received, the offset after the last batch)."""
        self.correlation_id += 1
        body = struct.pack(">iiiib", -1, 5000, 1, max_bytes, 0)
        body += struct.pack(">i", 1) + kafka_wire.string(topic)
        body += struct.pack(">iiqi", 1, partition, offset, max_bytes)
        self.sock.sendall(kafka_wire.request_frame(API_FETCH, 4, self.correlation_id, body))
        (size,) = struct.unpack(">i", self.recv_exact(4))
        correlation_id, _throttle, topics = struct.unpack(">iii", self.recv_exact(12))
        assert correlation_id == self.correlation_id and topics == 1
        (name_len,) = struct.unpack(">h", self.recv_exact(2))
        self.recv_exact(name_len)
        (partitions,) = struct.unpack(">i", self.recv_exact(4))
        assert partitions == 1
        _index, error, _hw, _lso, aborted = struct.unpack(">ihqqi", self.recv_exact(26))
        assert error == 0, f"fetch error {error}"
        assert aborted in (0, -1)
        (records,) = struct.unpack(">i", self.recv_exact(4))
        next_offset, left = offset, records
        while left >= 61:
            head = self.recv_exact(27)
            base_offset, length = struct.unpack(">qi", head[:12])
            (last_delta,) = struct.unpack(">i", head[23:27])
            self.skip(length + 12 - 27)
            next_offset = base_offset + last_delta + 1
            left -= length + 12
        self.skip(left)
        return records, next_offset


@pytest.mark.spindle_only("--fetch-memory-bytes is spindle's")
def test_many_consumers_reading_from_disk_stay_in_the_fetch_budget_and_all_progress(
    broker_factory: Callable[..., Broker], unique: Callable[[str], str]
) -> None:
    consumers = 100
    fetch_max_bytes = 50 * 1000 * 1000
    fetch_memory = 64 * MIB
    cache_bytes = 4 * MIB
    partitions = 4
    per_partition = 56 * MIB  # more than one fetch's 50 MB, so every answer could be 50 MB
    broker = broker_factory(
        extra_args=("--fetch-memory-bytes", str(fetch_memory), "--cache-bytes", str(cache_bytes))
    )
    topic = unique("fanout")
    clients.create_topic(broker.bootstrap, topic, partitions)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.size": MIB, "acks": 1}
    )
    value = bytes(100_000)
    for p in range(partitions):
        for _ in range(per_partition // len(value)):
            while True:
                try:
                    producer.produce(topic, value=value, partition=p)
                    break
                except BufferError:
                    producer.poll(0.1)
    assert producer.flush(60) == 0
    # What was written is older than the small cache holds: the consumers read the disk.
    baseline = rss_bytes(pid_of(broker))

    def consume(i: int) -> list[int]:
        stream = FetchStream(broker.host, broker.port)
        try:
            got, offset = [], 0
            for _ in range(2):
                received, offset = stream.fetch(topic, i % partitions, offset, fetch_max_bytes)
                got.append(received)
            return got
        finally:
            stream.sock.close()

    with RssWatch(pid_of(broker)) as watch, ThreadPoolExecutor(consumers) as pool:
        results = list(pool.map(consume, range(consumers)))
    shards = TEST_CORES
    bound = baseline + fetch_memory + shards * READAHEAD_BYTES_PER_SHARD + FANOUT_SLACK_BYTES
    print(f"fan-out: baseline {baseline / MIB:.0f} MiB, peak {watch.peak / MIB:.0f} MiB, bound {bound / MIB:.0f}")
    assert watch.peak <= bound, (
        f"peak RSS {watch.peak / MIB:.0f} MiB over baseline {baseline / MIB:.0f} MiB + fetch budget "
        f"{fetch_memory / MIB:.0f} MiB + read-ahead {shards * READAHEAD_BYTES_PER_SHARD / MIB:.0f} MiB + slack"
    )
    # Every consumer made progress in each of its fetches.
    starved = [i for i, got in enumerate(results) if min(got) == 0]
    assert not starved, f"consumers {starved} got an empty answer"
    total = sum(sum(got) for got in results)
    assert total >= consumers * 2 * MIB, f"only {total / MIB:.0f} MiB served in all"
