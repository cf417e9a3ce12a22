"""Replication (issue 11): replicas byte-identical up to the high watermark, kill -9 of leaders
under acks=all load, a follower killed or stopped and its return to the ISR, NOT_ENOUGH_REPLICAS,
a stopped leader that loses its leadership, acks=1 against acks=all, and group offsets across the
loss of their coordinator. Runs on spindle and, as the reference, on a Kafka KRaft cluster
(tests/cluster.py); every topic has 3 replicas and min.insync.replicas=2.

The cluster has four nodes: three controller voters (1-3) and a broker only (4), so that a
partition whose two followers are stopped (one of them node 4) still has a controller quorum to
commit its ISR change. Every test places its replicas by hand (CreateTopics with an assignment).

Environment:
  SPINDLE_CHAOS_ROUNDS     kill -9 rounds of the chaos test (default 3; `scripts/chaos --rounds N`)
  SPINDLE_FOLLOWER_DOWN_S  how long the killed follower stays down (default 10; the issue says 60)
"""

from __future__ import annotations

import os
import signal
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import NewTopic
from kafka.record.util import calc_crc32c

import clients
import kafka_wire
from cluster import SETTLE_TIMEOUT_S, Cluster, ClusterNode, eventually, for_one_test, metadata, shared_by_module
from conftest import BROKER_KIND

pytestmark = pytest.mark.skipif(BROKER_KIND == "noida", reason="noida-db has no clusters")

MIN_INSYNC_REPLICAS = 2
# Low, so that a stopped follower leaves the ISR soon (Kafka's default is 30 s).
REPLICA_LAG_TIME_MAX_MS = 3000
# How long before the stop a follower under load may last have been caught up.
CAUGHT_UP_BEFORE_STOP_MS = 1000
CHAOS_ROUNDS = int(os.environ.get("SPINDLE_CHAOS_ROUNDS", "3"))
FOLLOWER_DOWN_S = float(os.environ.get("SPINDLE_FOLLOWER_DOWN_S", "10"))
# Rounds of acks=all and acks=1 answered, then the leader killed at once.
ACKS_ROUNDS = 2
# Spindle keeps recent batches in a cache of --cache-bytes per shard; a small one makes a
# follower that comes back after this much was written catch up from the leader's segments.
SPINDLE_CACHE_BYTES = 4 << 20
CATCH_UP_BYTES = 4 * SPINDLE_CACHE_BYTES
# The background load: an idempotent acks=all producer, this many records a second.
LOAD_RECORDS_PER_S = 500
LOAD_TICK_S = 0.01
# Generous: librdkafka must ride through every failover by retrying, never time a record out.
LOAD_MESSAGE_TIMEOUT_MS = 180_000
FLUSH_AFTER_FAILURE_S = 5.0
# A killed node restarted (Kafka: a JVM recovering its logs) and caught up into every ISR.
REJOIN_TIMEOUT_S = 120.0
# How long a stale leader's answer to a request it got while stopped may take once it runs again.
STALE_ANSWER_TIMEOUT_S = 90.0
# Replicas' segment files agree within this once nothing is written.
IDENTICAL_TIMEOUT_S = 60.0
BATCH_PREFIX = struct.Struct(">qi")  # base offset, batch length (what follows it)
# A v2 batch header after the length: epoch 4, magic 1, crc 4, attributes 2, last offset delta 4,
# timestamps 16, producer id 8, epoch 2, base sequence 4, record count 4.
BATCH_HEADER_AFTER_LENGTH = 49
CRC_AT, CRC_FROM, LAST_OFFSET_DELTA_AT = 17, 21, 23
# Replica placements (first: the preferred leader), on the voters 1-3 unless said.
THREE_SPREAD = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
FOUR_SPREAD = [[1, 2, 3], [2, 3, 4], [3, 4, 1], [4, 1, 2]]


@pytest.fixture(scope="module")
def four_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from shared_by_module(
        Cluster.create(
            tmp_path_factory.mktemp("replication"),
            node_count=4,
            voter_count=3,
            extra_args=("--cache-bytes", str(SPINDLE_CACHE_BYTES)),
            replica_lag_time_max_ms=REPLICA_LAG_TIME_MAX_MS,
        )
    )


@pytest.fixture
def cluster(request: pytest.FixtureRequest, four_nodes: Cluster) -> Iterator[Cluster]:
    yield from for_one_test(request, four_nodes)


# Topics and what the nodes say of them.


def create_replicated(cluster: Cluster, topic: str, assignment: list[list[int]]) -> None:
    """The topic with these replicas per partition and min.insync.replicas=2, once every node
    shows each partition led by its first replica with every replica in the ISR."""
    client = clients.admin(cluster.bootstrap())
    config = {"min.insync.replicas": str(MIN_INSYNC_REPLICAS)}
    futures = client.create_topics(
        [NewTopic(topic, len(assignment), replica_assignment=assignment, config=config)],
        operation_timeout=clients.REQUEST_TIMEOUT_S,
    )
    futures[topic].result(timeout=clients.REQUEST_TIMEOUT_S)
    for p, replicas in enumerate(assignment):
        wait_partition(
            cluster.nodes,
            topic,
            p,
            f"led by node {replicas[0]} with ISR {replicas}",
            lambda info, r=replicas: info.leader == r[0] and set(info.isr) == set(r) and list(info.replicas) == r,
        )
    clients.wait_for_partitions(cluster.bootstrap(), topic, len(assignment))


def partition_info(node: ClusterNode, topic: str, partition: int) -> kafka_wire.PartitionInfo | None:
    [info] = metadata(node, [topic]).topics
    found = [p for p in info.partitions if p.partition == partition]
    return found[0] if info.error_code == kafka_wire.ERROR_NONE and found else None


def wait_partition(
    nodes: list[ClusterNode],
    topic: str,
    partition: int,
    what: str,
    ok: Callable[[kafka_wire.PartitionInfo], bool],
    timeout_s: float = SETTLE_TIMEOUT_S,
) -> kafka_wire.PartitionInfo:
    """Until the Metadata of every one of `nodes` shows the partition as `ok` wants; the first
    node's answer. Fails with the last answers."""
    seen: dict[int, kafka_wire.PartitionInfo | None] = {}

    def agreed() -> kafka_wire.PartitionInfo | None:
        seen.clear()
        seen.update({n.node_id: partition_info(n, topic, partition) for n in nodes})
        infos = list(seen.values())
        return infos[0] if all(i is not None and ok(i) for i in infos) else None

    try:
        return eventually(f"{topic}-{partition} {what} through nodes {[n.node_id for n in nodes]}", agreed, timeout_s)
    except AssertionError as e:
        raise AssertionError(f"{e}; last seen: {seen}") from None


def wait_full_isr(
    cluster: Cluster, topic: str, assignment: list[list[int]], timeout_s: float = REJOIN_TIMEOUT_S
) -> dict[int, kafka_wire.PartitionInfo]:
    """Until every running node shows every replica of every partition in its ISR."""
    return {
        p: wait_partition(
            cluster.running(), topic, p, "with every replica in the ISR", lambda i, r=r: set(i.isr) == set(r), timeout_s
        )
        for p, r in enumerate(assignment)
    }


def wait_isr(
    nodes: list[ClusterNode], topic: str, isr: set[int], timeout_s: float = SETTLE_TIMEOUT_S
) -> kafka_wire.PartitionInfo:
    """Until every one of `nodes` shows partition 0's ISR as exactly `isr`."""
    return wait_partition(nodes, topic, 0, f"with ISR {sorted(isr)}", lambda i: set(i.isr) == isr, timeout_s)


def high_watermark(node: ClusterNode, topic: str, partition: int) -> int:
    """The partition's high watermark on its leader `node`."""
    with kafka_wire.Connection(node.host, node.port) as conn:
        fetched = kafka_wire.fetch(conn, topic, partition, 0, max_bytes=1)
    assert fetched.error_code == kafka_wire.ERROR_NONE, f"fetch from node {node.node_id}: error {fetched.error_code}"
    return fetched.high_watermark


@contextmanager
def sigstopped(*nodes: ClusterNode) -> Iterator[None]:
    """The nodes' processes stopped (SIGSTOP) inside, continued (SIGCONT) after, whatever happens.
    Inside, every thread of each process is stopped: kill() returns before that (the thread the
    kernel picks to take the signal may wait for a CPU while the others still run), and a
    request sent in that moment would be served."""
    stopped = []
    try:
        for node in nodes:
            assert node.process is not None and node.alive()
            node.process.send_signal(signal.SIGSTOP)
            stopped.append(node)
        for node in nodes:
            assert node.process is not None
            pid = node.process.pid
            eventually(f"every thread of {node.name} stopped", lambda p=pid: all_threads_stopped(p) or None, 10.0)
        yield
    finally:
        for node in stopped:
            if node.alive():
                assert node.process is not None
                node.process.send_signal(signal.SIGCONT)


def all_threads_stopped(pid: int) -> bool:
    """Whether /proc shows every thread of `pid` stopped (state T)."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            # The state follows the command name, which is in parentheses and may hold spaces.
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            return False
    return bool(states) and all(s in ("T", "t") for s in states)


# Segment files.


def partition_dir(node: ClusterNode, topic: str, partition: int) -> Path:
    """Where the node keeps the partition's segments: a scripts/kafka node's log.dirs is
    `data/` in its node directory; spindle's data directory holds the partitions itself."""
    root = node.data_dir / "data" if BROKER_KIND == "kafka" else node.data_dir
    return root / f"{topic}-{partition}"


def segment_batches(directory: Path, end_offset: int) -> list[bytes]:
    """The whole batches of the partition's `.log` segments, oldest first, that start below
    `end_offset`. A segment's batches end at its file's end, at a zero length (spindle
    preallocates) or at a batch not yet whole (a follower still writing it)."""
    batches = []
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos + BATCH_PREFIX.size <= len(data):
            base_offset, length = BATCH_PREFIX.unpack_from(data, pos)
            if length == 0 or base_offset >= end_offset:
                break
            end = pos + BATCH_PREFIX.size + length
            if end > len(data):
                break
            assert length >= BATCH_HEADER_AFTER_LENGTH, f"{segment}: byte {pos}, offset {base_offset}: length {length}"
            batches.append(data[pos:end])
            pos = end
    return batches


def last_offset(batch: bytes) -> int:
    return BATCH_PREFIX.unpack_from(batch)[0] + struct.unpack_from(">i", batch, LAST_OFFSET_DELTA_AT)[0]


def describe_batch(batch: bytes) -> str:
    base_offset, length = BATCH_PREFIX.unpack_from(batch)
    epoch = struct.unpack_from(">i", batch, 12)[0]
    crc = struct.unpack_from(">I", batch, CRC_AT)[0]
    return f"offsets {base_offset}..{last_offset(batch)}, length {length}, leader epoch {epoch}, crc {crc:#010x}"


def assert_replicas_identical(cluster: Cluster, topic: str, partition: int) -> list[bytes]:
    """Every replica's segments hold the same batches, byte for byte, up to the high watermark
    of the leader (read once nothing more is written), each batch's CRC right and the batches
    dense from offset 0; those batches."""
    info = wait_partition(cluster.running(), topic, partition, "led", lambda i: i.leader >= 0)
    replicas, leader = [cluster.node(n) for n in info.replicas], info.leader
    hw = high_watermark(cluster.node(leader), topic, partition)
    last: dict[int, list[bytes]] = {}

    def identical() -> list[bytes] | None:
        last.clear()
        last.update({n.node_id: segment_batches(partition_dir(n, topic, partition), hw) for n in replicas})
        first = last[leader]
        covered = bool(first) and last_offset(first[-1]) + 1 >= hw
        return first if covered and all(b == first for b in last.values()) else None

    try:
        batches = eventually(f"{topic}-{partition}: replicas identical up to HW {hw}", identical, IDENTICAL_TIMEOUT_S)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{describe_difference(last, leader)}") from None
    expected = 0
    for batch in batches:
        assert BATCH_PREFIX.unpack_from(batch)[0] == expected, f"batches not dense: {describe_batch(batch)}"
        assert struct.unpack_from(">I", batch, CRC_AT)[0] == calc_crc32c(batch[CRC_FROM:]), describe_batch(batch)
        expected = last_offset(batch) + 1
    return batches


def describe_difference(logs: dict[int, list[bytes]], leader: int) -> str:
    lines = []
    reference = logs.get(leader, [])
    for node, batches in logs.items():
        end = last_offset(batches[-1]) + 1 if batches else 0
        lines.append(f"node {node}: {len(batches)} batches up to offset {end}")
        if node == leader:
            continue
        for i, (ours, theirs) in enumerate(zip(batches, reference, strict=False)):
            if ours != theirs:
                lines.append(f"  batch {i}: node {node} {describe_batch(ours)}; leader {describe_batch(theirs)}")
                break
    return "\n".join(lines)


# Load and checks.


class Load:
    """An idempotent acks=all producer sending unique values to every partition of a topic from
    its own thread, at a steady rate, until stopped; every acknowledgement and failure kept."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, tag: str, value_bytes: int = 100) -> None:
        self.topic, self.partitions, self.tag, self.value_bytes = topic, partitions, tag, value_bytes
        self.producer = clients.producer(
            bootstrap, **{"enable.idempotence": True, "message.timeout.ms": LOAD_MESSAGE_TIMEOUT_MS}
        )
        self.acked: list[clients.Record] = []
        self.failed: list[str] = []
        self.sent = 0
        self.done = threading.Event()
        self.flush_timeout_s = LOAD_MESSAGE_TIMEOUT_MS / 1000
        self.thread = threading.Thread(target=self.run, name=f"load {topic}", daemon=True)

    def value(self, seq: int) -> bytes:
        return f"{self.tag}-{seq:09d}-".encode().ljust(self.value_bytes, b".")

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed.append(f"{msg.value()[:20]!r}: {err}")
        else:
            self.acked.append(clients.record_of(msg))

    def run(self) -> None:
        per_tick = max(1, int(LOAD_RECORDS_PER_S * LOAD_TICK_S))
        while not self.done.is_set():
            for _ in range(per_tick):
                try:
                    self.producer.produce(
                        self.topic,
                        value=self.value(self.sent),
                        partition=self.sent % self.partitions,
                        on_delivery=self.on_delivery,
                    )
                    self.sent += 1
                except BufferError:
                    break
            self.producer.poll(LOAD_TICK_S)
        left = self.producer.flush(self.flush_timeout_s)
        if left:
            self.failed.append(f"{left} records still unacknowledged after the flush")

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None:
            # The test failed already: no waiting for what is still unacknowledged.
            self.flush_timeout_s = FLUSH_AFTER_FAILURE_S
        self.stop()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()

    def acked_on(self, partition: int) -> int:
        return sum(1 for r in list(self.acked) if r.partition == partition)

    def wait_acked_on(self, partition: int, more_than: int, what: str, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        eventually(what, lambda: self.acked_on(partition) > more_than or None, timeout_s)


class Watcher:
    """A consumer (assigned, no group) reading every partition from the start in its own thread
    while leaders change; each partition's (offset, value) in the order it got them, and any
    error. auto.offset.reset=error: a position it cannot fetch from is an error, not a jump."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = clients.assigned_consumer(bootstrap, **{"auto.offset.reset": "error"})
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        self.seen: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        self.errors: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, name=f"watcher {topic}", daemon=True)

    def run(self) -> None:
        try:
            while not self.done.is_set():
                for msg in self.consumer.consume(num_messages=1000, timeout=0.2):
                    if msg.error() is not None:
                        self.errors.append(str(msg.error()))
                        continue
                    rec = clients.record_of(msg)
                    self.seen[rec.partition].append((rec.offset, rec.value or b""))
        finally:
            self.consumer.close()

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def caught_up(self, ends: dict[int, int]) -> bool | None:
        return all(self.seen[p] and self.seen[p][-1][0] + 1 >= end for p, end in ends.items() if end > 0) or None


def read_back(cluster: Cluster, topic: str, partitions: int) -> dict[int, dict[int, bytes]]:
    """Each partition's records, offset -> value, read from its leader up to its HW."""
    read = clients.read_partitions(cluster.bootstrap(), topic, range(partitions))
    out: dict[int, dict[int, bytes]] = {}
    for p, records in read.items():
        out[p] = {r.offset: r.value or b"" for r in records}
        assert len(out[p]) == len(records), f"partition {p}: an offset read twice"
    return out


def assert_acknowledged_kept(log: dict[int, dict[int, bytes]], acked: list[clients.Record]) -> None:
    """Every acknowledged record is in the log at the offset its acknowledgement gave."""
    wrong = [(r.partition, r.offset, r.value, log[r.partition].get(r.offset)) for r in acked]
    wrong = [w for w in wrong if w[2] != w[3]]
    assert not wrong, (
        f"{len(wrong)} of {len(acked)} acknowledged records are not at their offsets"
        f" (partition, offset, acknowledged value, value there), first: {wrong[:5]}"
    )


def assert_once(log: dict[int, dict[int, bytes]], tag: str) -> None:
    """The idempotent producer's values appear once in the whole topic."""
    counts = Counter(v for records in log.values() for v in records.values() if v.startswith(tag.encode()))
    twice = [(v[:30], n) for v, n in counts.items() if n > 1]
    assert not twice, f"{len(twice)} values of the idempotent producer appear more than once, first: {twice[:5]}"


def assert_watched_consistently(log: dict[int, dict[int, bytes]], watcher: Watcher) -> None:
    """The watcher's positions only went forward, and what it read at each offset is what the
    log holds there (no offset held two different records)."""
    assert not watcher.errors, f"the consumer got errors: {watcher.errors[:5]}"
    for p, seen in watcher.seen.items():
        offsets = [o for o, _ in seen]
        back = [(a, b) for a, b in zip(offsets, offsets[1:], strict=False) if b <= a]
        assert not back, f"partition {p}: the consumer's position went back (from, to): {back[:5]}"
        differ = [(o, v[:30], log[p].get(o, b"(none)")[:30]) for o, v in seen if log[p].get(o) != v]
        assert not differ, f"partition {p}: offsets read with one record and holding another: {differ[:5]}"


def stats(what: str, **figures: object) -> None:
    """A figure for the report (pytest -s shows it; the README quotes them)."""
    print(f"\n[{what}] " + ", ".join(f"{k}={v}" for k, v in figures.items()))


# The tests.


def test_100000_acks_all_records_leave_every_replica_byte_identical_up_to_the_high_watermark(cluster, unique) -> None:
    topic = unique("topic")
    create_replicated(cluster, topic, THREE_SPREAD)
    # Small batches: many of them to compare.
    prod = clients.producer(cluster.bootstrap(), **{"enable.idempotence": True, "batch.num.messages": 100})

    acked = clients.produce_acked(prod, topic, ((None, b"record %06d" % i) for i in range(100_000)))

    per_partition = Counter(r.partition for r in acked)
    for p in range(len(THREE_SPREAD)):
        batches = assert_replicas_identical(cluster, topic, p)
        assert last_offset(batches[-1]) + 1 == per_partition[p], f"partition {p}: batches end past the acknowledged"
        stats("identical", partition=p, records=per_partition[p], batches=len(batches), bytes=sum(map(len, batches)))
    assert_acknowledged_kept(read_back(cluster, topic, len(THREE_SPREAD)), acked)


@pytest.mark.timeout(120 + 120 * CHAOS_ROUNDS)
def test_kill_9_of_leaders_under_acks_all_load_loses_nothing_acknowledged(cluster, unique) -> None:
    topic = unique("topic")
    create_replicated(cluster, topic, FOUR_SPREAD)
    partitions = len(FOUR_SPREAD)
    tag = unique("v")
    started = time.monotonic()
    bootstrap = cluster.bootstrap()
    with Load(bootstrap, topic, partitions, tag) as load, Watcher(bootstrap, topic, partitions) as watcher:
        for round_ in range(CHAOS_ROUNDS):
            round_started = time.monotonic()
            partition = round_ % partitions
            before = wait_full_isr(cluster, topic, FOUR_SPREAD)[partition]
            victim = cluster.node(before.leader)
            survivors = [n for n in cluster.nodes if n is not victim]
            acked = load.acked_on(partition)

            victim.kill9()
            after = wait_partition(
                survivors,
                topic,
                partition,
                f"led by another node than {victim.node_id}, in a newer epoch",
                lambda i, b=before: i.leader not in (-1, b.leader) and i.leader_epoch > b.leader_epoch,
            )
            # acks=all goes on with the two replicas left.
            load.wait_acked_on(partition, acked, f"round {round_}: records acknowledged by node {after.leader}")
            failover_s = time.monotonic() - round_started

            victim.start()
            wait_full_isr(cluster, topic, FOUR_SPREAD)
            stats("chaos round", round=round_, killed=victim.node_id, new_leader=after.leader,
                  failover_s=f"{failover_s:.1f}", round_s=f"{time.monotonic() - round_started:.1f}")  # fmt: skip
        load.stop()
        leaders = wait_full_isr(cluster, topic, FOUR_SPREAD)
        ends = {p: high_watermark(cluster.node(i.leader), topic, p) for p, i in leaders.items()}
        eventually("the consumer read up to every HW", lambda: watcher.caught_up(ends))

    assert not load.failed, f"{len(load.failed)} of {load.sent} records failed, first: {load.failed[:3]}"
    log = read_back(cluster, topic, partitions)
    assert_acknowledged_kept(log, load.acked)
    assert_once(log, tag)
    assert_watched_consistently(log, watcher)
    for p in range(partitions):
        assert_replicas_identical(cluster, topic, p)
    stats("chaos", rounds=CHAOS_ROUNDS, acked=len(load.acked), seconds=f"{time.monotonic() - started:.0f}")


def test_a_follower_killed_for_a_while_catches_up_from_disk_and_rejoins_the_isr(cluster, unique) -> None:
    topic = unique("topic")
    assignment = [[1, 2, 3]]
    create_replicated(cluster, topic, assignment)
    leader, follower, victim = (cluster.node(n) for n in assignment[0])
    prod = clients.producer(cluster.bootstrap(), **{"enable.idempotence": True})
    acked = clients.produce_acked(prod, topic, ((None, b"before %d" % i) for i in range(1000)))

    victim.kill9()
    down_at = time.monotonic()
    wait_isr([leader, follower], topic, {1, 2})
    # acks=all goes on with two: more than the leader's batch cache while the victim is down (on
    # spindle the catch-up then reads the leader's segments), then small writes until it has been
    # down FOLLOWER_DOWN_S.
    big = b"x" * (16 << 10)
    acked += clients.produce_acked(prod, topic, ((None, b"%d " % i + big) for i in range(CATCH_UP_BYTES // len(big))))
    while time.monotonic() < down_at + FOLLOWER_DOWN_S:
        acked += clients.produce_acked(prod, topic, ((None, b"while down %d" % len(acked)) for _ in range(100)))
        time.sleep(0.5)

    victim.start()
    restarted_at = time.monotonic()
    wait_isr(cluster.nodes, topic, {1, 2, 3}, REJOIN_TIMEOUT_S)
    rejoined_s = time.monotonic() - restarted_at
    stats("follower back", down_s=f"{restarted_at - down_at:.0f}", rejoined_after_start_s=f"{rejoined_s:.1f}")
    assert_acknowledged_kept(read_back(cluster, topic, 1), acked)
    assert_replicas_identical(cluster, topic, 0)


def test_a_follower_stopped_past_the_lag_time_leaves_the_isr_and_acks_all_goes_on_with_two(cluster, unique) -> None:
    topic = unique("topic")
    assignment = [[1, 2, 3]]
    create_replicated(cluster, topic, assignment)
    leader, follower, victim = (cluster.node(n) for n in assignment[0])
    tag = unique("v")
    with Load(cluster.bootstrap(), topic, 1, tag) as load:
        load.wait_acked_on(0, 100, "records acknowledged before the stop")
        with sigstopped(victim):
            stopped_at = time.monotonic()
            wait_isr([leader, follower], topic, {1, 2})
            left_after_s = time.monotonic() - stopped_at
            # Not at the first missed answer: only once it lagged for the lag time (counted from
            # when it was last caught up, which may be a fetch or an append before the stop).
            assert left_after_s * 1000 >= REPLICA_LAG_TIME_MAX_MS - CAUGHT_UP_BEFORE_STOP_MS, (
                f"left the ISR {left_after_s:.1f}s after the stop"
            )
            acked = load.acked_on(0)
            load.wait_acked_on(0, acked + 100, "records acknowledged by the two replicas left")
        wait_isr(cluster.nodes, topic, {1, 2, 3}, REJOIN_TIMEOUT_S)
        back_s = time.monotonic() - stopped_at
        stats("stopped follower", left_isr_after_s=f"{left_after_s:.1f}", back_after_s=f"{back_s:.1f}")
    assert not load.failed, f"{len(load.failed)} of {load.sent} records failed, first: {load.failed[:3]}"
    log = read_back(cluster, topic, 1)
    assert_acknowledged_kept(log, load.acked)
    assert_once(log, tag)
    assert_replicas_identical(cluster, topic, 0)


def test_with_both_followers_stopped_acks_all_gets_not_enough_replicas_and_nothing_is_acknowledged(
    cluster, unique
) -> None:
    topic = unique("topic")
    # Node 4 is no voter: with it and node 2 stopped, voters 1 and 3 still commit the ISR change.
    assignment = [[1, 4, 2]]
    create_replicated(cluster, topic, assignment)
    leader = cluster.node(1)
    followers = [cluster.node(4), cluster.node(2)]
    prod = clients.producer(cluster.bootstrap(), **{"enable.idempotence": True})
    acked = clients.produce_acked(prod, topic, ((None, b"before %d" % i) for i in range(100)))
    refused: list[tuple[int, int]] = []
    tag = unique("refused")
    late = clients.producer(leader.bootstrap, **{"enable.idempotence": True, "message.timeout.ms": 5000})
    late_acked: list[clients.Record] = []
    late_failed: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            late_failed.append(str(err))
        else:
            late_acked.append(clients.record_of(msg))

    with sigstopped(*followers):
        wait_isr([leader, cluster.node(3)], topic, {1})
        with kafka_wire.Connection(leader.host, leader.port, timeout_s=clients.REQUEST_TIMEOUT_S) as conn:
            for i in range(5):
                batch = kafka_wire.record_batch(None, b"%s raw %d" % (tag.encode(), i))
                refused.append(kafka_wire.produce(conn, topic, 0, batch))
        for i in range(10):
            late.produce(topic, value=b"%s client %d" % (tag.encode(), i), partition=0, on_delivery=on_delivery)
        assert late.flush(30) == 0
    wait_isr(cluster.nodes, topic, {1, 2, 4}, REJOIN_TIMEOUT_S)

    assert [error for error, _ in refused] == [kafka_wire.ERROR_NOT_ENOUGH_REPLICAS] * 5, refused
    assert not late_acked, f"acknowledged with only the leader in the ISR: {late_acked}"
    assert len(late_failed) == 10
    log = read_back(cluster, topic, 1)
    assert_acknowledged_kept(log, acked)
    appended = [v for v in log[0].values() if v.startswith(tag.encode())]
    assert not appended, f"refused records in the log: {appended}"
    assert_replicas_identical(cluster, topic, 0)


def test_a_leader_stopped_until_another_is_elected_acknowledges_nothing_after_and_truncates(cluster, unique) -> None:
    topic = unique("topic")
    assignment = [[1, 2, 3]]
    create_replicated(cluster, topic, assignment)
    old = cluster.node(1)
    others = [cluster.node(2), cluster.node(3)]
    tag = unique("v")
    stale_value = b"%s sent to the stopped leader" % tag.encode()
    stale_answer: list[tuple[int, int]] = []
    with Load(cluster.bootstrap(), topic, 1, tag) as load:
        load.wait_acked_on(0, 100, "records acknowledged before the stop")
        before = wait_partition(cluster.nodes, topic, 0, "led by node 1", lambda i: i.leader == 1)
        conn = kafka_wire.Connection(old.host, old.port, timeout_s=STALE_ANSWER_TIMEOUT_S)
        try:
            with sigstopped(old):
                # Waits in the stopped leader's socket until it runs again.
                stale = threading.Thread(
                    target=lambda: stale_answer.append(
                        kafka_wire.produce(conn, topic, 0, kafka_wire.record_batch(None, stale_value))
                    )
                )
                stale.start()
                after = wait_partition(
                    others,
                    topic,
                    0,
                    "led by another node in a newer epoch",
                    lambda i: i.leader in (2, 3) and i.leader_epoch > before.leader_epoch,
                )
            stale.join(STALE_ANSWER_TIMEOUT_S)
        finally:
            conn.close()
        wait_isr(cluster.nodes, topic, {1, 2, 3}, REJOIN_TIMEOUT_S)
        load.wait_acked_on(0, load.acked_on(0) + 100, f"records acknowledged by node {after.leader}")

    assert stale_answer, "the stopped leader never answered the request it got while stopped"
    assert stale_answer[0][0] != kafka_wire.ERROR_NONE, f"a leader that lost its leadership acknowledged {stale_answer}"
    assert not load.failed, f"{len(load.failed)} of {load.sent} records failed, first: {load.failed[:3]}"
    log = read_back(cluster, topic, 1)
    assert_acknowledged_kept(log, load.acked)
    assert stale_value not in log[0].values(), "the stale leader's record is in the log"
    assert_once(log, tag)
    assert_replicas_identical(cluster, topic, 0)
    epochs = (before.leader_epoch, after.leader_epoch)
    stats("stopped leader", stale_answer=stale_answer[0], new_leader=after.leader, epochs=epochs)


def test_acks_all_survives_a_kill_9_of_the_leader_right_after_its_answer(cluster, unique) -> None:
    """acks=1 may lose its record that way (as on Kafka): only reported, never asserted."""
    topic = unique("topic")
    assignment = [[1, 2, 3]]
    create_replicated(cluster, topic, assignment)
    acks_1_lost = 0
    for round_ in range(ACKS_ROUNDS):
        before = wait_full_isr(cluster, topic, assignment)[0]
        victim = cluster.node(before.leader)
        survivors = [n for n in cluster.nodes if n is not victim]
        all_value, one_value = b"acks=all %d" % round_, b"acks=1 %d" % round_
        with kafka_wire.Connection(victim.host, victim.port) as conn:
            all_answer = kafka_wire.produce(conn, topic, 0, kafka_wire.record_batch(None, all_value), acks=-1)
            one_answer = kafka_wire.produce(conn, topic, 0, kafka_wire.record_batch(None, one_value), acks=1)
            victim.kill9()
        assert all_answer[0] == one_answer[0] == kafka_wire.ERROR_NONE, (all_answer, one_answer)
        wait_partition(survivors, topic, 0, "led by a survivor", lambda i, b=before: i.leader not in (-1, b.leader))
        log = read_back(cluster, topic, 1)[0]
        assert log.get(all_answer[1]) == all_value, f"round {round_}: acks=all record not at offset {all_answer[1]}"
        acks_1_lost += log.get(one_answer[1]) != one_value
        victim.start()
    wait_full_isr(cluster, topic, assignment)
    assert_replicas_identical(cluster, topic, 0)
    stats("acks", rounds=ACKS_ROUNDS, acks_1_lost=acks_1_lost)


def test_group_offsets_committed_before_the_coordinator_is_killed_are_there_after(cluster, unique) -> None:
    topic = unique("topic")
    create_replicated(cluster, topic, THREE_SPREAD)
    group = unique("group")
    first = [TopicPartition(topic, p, 100 + p) for p in range(3)]
    commit(cluster.bootstrap(), group, first)
    victim = cluster.node(coordinator_of(cluster.bootstrap(), group))

    victim.kill9()
    survivors = [n for n in cluster.nodes if n is not victim]
    assert committed_offsets(cluster.bootstrap(survivors), group, topic) == {p: 100 + p for p in range(3)}
    successor = coordinator_of(cluster.bootstrap(survivors), group)
    assert successor != victim.node_id
    commit(cluster.bootstrap(survivors), group, [TopicPartition(topic, p, 200 + p) for p in range(3)])
    victim.start()
    assert committed_offsets(cluster.bootstrap(), group, topic) == {p: 200 + p for p in range(3)}
    stats("coordinator", killed=victim.node_id, successor=successor)


def group_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})


def commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    """Commits as a consumer of the group that joined no generation (as an assigned consumer
    does), once the coordinator serves it."""
    consumer = group_consumer(bootstrap, group)
    try:
        deadline = time.monotonic() + clients.REQUEST_TIMEOUT_S
        answers = clients.retrying_not_ready(lambda: consumer.commit(offsets=offsets, asynchronous=False), deadline)
        assert answers is not None and all(tp.error is None for tp in answers), answers
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = group_consumer(bootstrap, group)
    try:
        answers = clients.committed(consumer, [TopicPartition(topic, p) for p in range(3)])
        return {tp.partition: tp.offset for tp in answers}
    finally:
        consumer.close()


def coordinator_of(bootstrap: str, group: str) -> int:
    """The group's coordinator (the leader of its offsets partition), as DescribeGroups says."""
    client = clients.admin(bootstrap)

    def described() -> int | None:
        try:
            return client.describe_consumer_groups([group], request_timeout=10)[group].result().coordinator.id
        except KafkaException as e:
            if e.args[0].code() in clients.NOT_READY_ERRORS:
                return None
            raise

    return eventually(f"group {group}'s coordinator", described)
