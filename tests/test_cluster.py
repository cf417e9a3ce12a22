"""A cluster of real nodes on loopback (issue 10): replicated topic metadata, clients that reach
every leader, the loss of the active controller, a controlled shutdown, and the nodes a cluster
refuses. Runs on spindle and, as the reference, on a Kafka KRaft cluster (tests/cluster.py).

Most tests share one 3-node cluster; a test that stops or kills a node leaves it down, and the
next test's `cluster` fixture starts it again and waits until every node lists every broker.
"""

from __future__ import annotations

import hashlib
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message
from kafka import KafkaConsumer, TopicPartition

import clients
import kafka_wire
from cluster import (
    SESSION_TIMEOUT_MS,
    SETTLE_TIMEOUT_S,
    Cluster,
    ClusterNode,
    active_controller,
    controller_named_by,
    describe_cluster_controller,
    eventually,
    for_one_test,
    metadata,
    shared_by_module,
    spindle_node_command,
)
from conftest import BROKER_KIND, Kcat, clean_exit_code, free_port, record_broker_use
from test_cli_admin import ok_json
from test_kafka_python import poll_all, produce_with_kafka_python
from test_kafkajs import kafkajs

# noida-db, the other reference broker, runs a single node.
pytestmark = pytest.mark.skipif(BROKER_KIND == "noida", reason="noida-db has no clusters")

# Issue 10: a topic created through one node is visible, identical, through every node within this.
VISIBLE_WITHIN_S = 1.0
# Issue 10: after the active controller is killed, topics can be created again within this.
CREATE_AGAIN_WITHIN_S = 10.0
# A node that misses its session is fenced after SESSION_TIMEOUT_MS; then Metadata settles.
FENCED_WITHIN_S = SESSION_TIMEOUT_MS / 1000 + SETTLE_TIMEOUT_S
REFUSAL_TIMEOUT_S = 60.0


def clean_sigterm() -> int:
    return clean_exit_code(signal.SIGTERM)


# The 5-node test comes first: it starts and stops its own cluster before the shared one exists,
# so that the two are never up at once (Kafka's nodes are JVMs).


def test_five_nodes_three_voters_and_two_brokers_see_the_same_topic(request, tmp_path: Path, unique) -> None:
    five = Cluster.create(tmp_path, node_count=5, voter_count=3)
    for node in five.nodes:
        record_broker_use(request, node)
    try:
        five.start()
        topic = unique("topic")
        # Through node 5, a broker only: its admin request goes to the active controller.
        created = create_through(five.node(5), topic, partitions=5, replication_factor=3)
        partitions = wait_visible_everywhere(five, topic, 5, since=created, timeout_s=SETTLE_TIMEOUT_S)

        assert sorted(b.node_id for b in metadata(five.node(1)).brokers) == [1, 2, 3, 4, 5]
        assert_placed_on_live_brokers(partitions, [1, 2, 3, 4, 5], replication_factor=3)
        assert Counter(p.leader for p in partitions) == {i: 1 for i in range(1, 6)}, "leaders are not spread"
    finally:
        codes = five.stop()
        five.ensure_stopped()
    assert codes == {i: clean_sigterm() for i in range(1, 6)}


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from shared_by_module(Cluster.create(tmp_path_factory.mktemp("cluster"), node_count=3))


@pytest.fixture
def cluster(request: pytest.FixtureRequest, three_nodes: Cluster) -> Iterator[Cluster]:
    """The shared 3-node cluster with every node up and listed by every node."""
    yield from for_one_test(request, three_nodes)


def create_through(node: ClusterNode, topic: str, partitions: int, replication_factor: int) -> float:
    """CreateTopics sent to `node` itself; when it answered (time.monotonic)."""
    with kafka_wire.Connection(node.host, node.port, timeout_s=clients.REQUEST_TIMEOUT_S) as conn:
        answer = kafka_wire.create_topic(conn, topic, partitions, replication_factor)
    assert answer == (kafka_wire.ERROR_NONE, None), f"CreateTopics through node {node.node_id}: {answer}"
    return time.monotonic()


def led_partitions(topic: kafka_wire.TopicInfo) -> tuple[kafka_wire.PartitionInfo, ...] | None:
    """The topic's partitions, sorted, if it exists and every partition has a leader."""
    if topic.error_code != kafka_wire.ERROR_NONE or any(p.leader < 0 or p.error_code for p in topic.partitions):
        return None
    return tuple(sorted(topic.partitions, key=lambda p: p.partition))


def wait_visible_everywhere(
    cluster: Cluster, topic: str, partitions: int, since: float, timeout_s: float = VISIBLE_WITHIN_S
) -> tuple[kafka_wire.PartitionInfo, ...]:
    """Until every running node's Metadata shows the topic with every partition led, the same on
    every node (leader, epoch, replicas, ISR); fails if that takes longer than `timeout_s` after
    `since`."""
    seen: dict[int, object] = {}

    def same_everywhere() -> tuple[kafka_wire.PartitionInfo, ...] | None:
        seen.clear()
        for node in cluster.running():
            [info] = metadata(node, [topic]).topics
            seen[node.node_id] = led_partitions(info) if len(info.partitions) == partitions else info
        answers = set(seen.values())
        if len(answers) != 1:
            return None
        answer = answers.pop()
        return answer if isinstance(answer, tuple) else None

    answer = eventually(f"topic {topic} led and identical through every node", same_everywhere, timeout_s)
    elapsed = time.monotonic() - since
    assert elapsed <= timeout_s, f"every node showed {topic} only {elapsed:.2f}s after CreateTopics: {seen}"
    return answer


def assert_placed_on_live_brokers(
    partitions: tuple[kafka_wire.PartitionInfo, ...], brokers: list[int], replication_factor: int
) -> None:
    for p in partitions:
        assert len(set(p.replicas)) == replication_factor and set(p.replicas) <= set(brokers), p
        assert p.leader == p.replicas[0], f"partition {p.partition}: the leader is not the preferred replica"
        assert set(p.isr) == set(p.replicas), f"partition {p.partition}: a new partition's ISR is all its replicas"
        assert p.leader_epoch >= 0, p


def spread_topic(cluster: Cluster, topic: str, partitions: int = 3) -> tuple[kafka_wire.PartitionInfo, ...]:
    """A topic with 3 replicas whose leaders are on every node, once each leader serves it."""
    created = create_through(cluster.node(1), topic, partitions, replication_factor=3)
    placed = wait_visible_everywhere(cluster, topic, partitions, since=created, timeout_s=SETTLE_TIMEOUT_S)
    assert {p.leader for p in placed} == {1, 2, 3}, f"leaders not on every node: {placed}"
    clients.wait_for_partitions(cluster.bootstrap(), topic, partitions)
    return placed


def test_a_topic_created_through_node_2_is_the_same_through_every_node_within_a_second(cluster, unique) -> None:
    topic = unique("topic")

    created = create_through(cluster.node(2), topic, partitions=6, replication_factor=3)

    partitions = wait_visible_everywhere(cluster, topic, 6, since=created)
    assert [p.partition for p in partitions] == list(range(6))
    assert_placed_on_live_brokers(partitions, [1, 2, 3], replication_factor=3)
    assert Counter(p.leader for p in partitions) == {1: 2, 2: 2, 3: 2}, f"leaders are not spread: {partitions}"


@pytest.mark.spindle_only(
    "placement rule: Kafka's StripedReplicaPlacer follows (i + j) mod n only for its first n partitions,"
    " then reshuffles the brokers"
)
def test_replicas_follow_i_plus_j_mod_n_over_the_brokers_sorted_by_id(cluster, unique) -> None:
    brokers = [1, 2, 3]
    for partitions, replication_factor in [(7, 3), (5, 2), (4, 1)]:
        topic = unique(f"rf{replication_factor}")
        created = create_through(cluster.node(2), topic, partitions, replication_factor)
        placed = wait_visible_everywhere(cluster, topic, partitions, since=created, timeout_s=SETTLE_TIMEOUT_S)

        # Replica j of partition i on broker b((start + i + j) mod n), for the topic's start.
        n = len(brokers)
        starts = [
            start
            for start in range(n)
            if all(
                p.replicas == tuple(brokers[(start + p.partition + j) % n] for j in range(replication_factor))
                for p in placed
            )
        ]
        assert starts, f"{topic}: replicas {[p.replicas for p in placed]} follow no start of (i + j) mod {n}"


@pytest.mark.kafka_differs(
    reason="a KRaft broker's DescribeCluster names a random live broker as the controller (clients cannot"
    " reach KRaft controllers); spindle names the active controller, which is also a broker"
)
def test_describe_cluster_names_the_same_active_controller_through_every_node(cluster) -> None:
    # Five asks each: Kafka's random answer agrees everywhere by chance once in 3^14.
    named = {describe_cluster_controller(node) for node in cluster.nodes for _ in range(5)}

    assert len(named) == 1, f"the nodes name different controllers: {named}"
    assert named <= {1, 2, 3}


def test_every_node_answers_the_same_api_versions(cluster) -> None:
    answers = []
    for node in cluster.nodes:
        with kafka_wire.Connection(node.host, node.port) as conn:
            answers.append(conn.api_versions())

    assert answers[0] and all(a == answers[0] for a in answers), answers


def test_a_request_to_a_node_that_does_not_lead_gets_not_leader_or_follower(cluster, unique) -> None:
    topic = unique("topic")
    placed = spread_topic(cluster, topic)

    for p in placed:
        for node in cluster.nodes:
            with kafka_wire.Connection(node.host, node.port) as conn:
                produced = kafka_wire.produce(conn, topic, p.partition, kafka_wire.record_batch(b"k", b"v"))
                fetched = kafka_wire.fetch(conn, topic, p.partition, 0).error_code
            if node.node_id == p.leader:
                assert produced == (kafka_wire.ERROR_NONE, 0), f"partition {p.partition} on its leader"
                assert fetched == kafka_wire.ERROR_NONE, f"partition {p.partition} on its leader"
            else:
                wrong = f"partition {p.partition} (leader {p.leader}) on node {node.node_id}"
                assert produced[0] == kafka_wire.ERROR_NOT_LEADER_OR_FOLLOWER, f"{wrong}: produce {produced}"
                assert fetched == kafka_wire.ERROR_NOT_LEADER_OR_FOLLOWER, f"{wrong}: fetch {fetched}"


def test_confluent_kafka_bootstrapped_from_one_node_reaches_every_leader(cluster, unique) -> None:
    topic = unique("topic")
    spread_topic(cluster, topic)
    node = cluster.node(1)

    prod = clients.producer(node.bootstrap)
    acked = [
        r
        for p in range(3)
        for r in clients.produce_acked(prod, topic, [(b"k%d" % i, b"p%d-v%d" % (p, i)) for i in range(200)], p)
    ]

    assert Counter(r.partition for r in acked) == {0: 200, 1: 200, 2: 200}
    read = clients.read_all(node.bootstrap, topic)
    assert [r for p in range(3) for r in read[p]] == sorted(acked, key=lambda r: (r.partition, r.offset))


def test_kafka_python_bootstrapped_from_one_node_reaches_every_leader(cluster, unique) -> None:
    topic = unique("topic")
    spread_topic(cluster, topic)
    node = cluster.node(2)

    acked = produce_with_kafka_python(node, topic)

    assert {p for p, _ in acked} == {0, 1, 2}
    consumer = KafkaConsumer(bootstrap_servers=node.bootstrap, enable_auto_commit=False, group_id=None)
    try:
        partitions = [TopicPartition(topic, p) for p in range(3)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        assert poll_all(consumer) == acked
    finally:
        consumer.close()


def test_kafkajs_bootstrapped_from_one_node_reaches_every_leader_and_the_group_coordinator(
    cluster, unique, tmp_path: Path
) -> None:
    topic = unique("topic")
    spread_topic(cluster, topic)
    node = cluster.node(3)

    produced = kafkajs(tmp_path, "produce", node.bootstrap, topic, "3", "600")
    consumed = kafkajs(tmp_path, "consume-group", node.bootstrap, topic, unique("group"), "600")

    assert {p for p, _, _, _ in produced} == {0, 1, 2}
    assert sorted(consumed) == sorted(produced)


def test_kcat_bootstrapped_from_one_node_reaches_every_leader(cluster, kcat: Kcat, unique) -> None:
    topic = unique("topic")
    spread_topic(cluster, topic)
    node = cluster.node(2)

    want = []
    for p in range(3):
        lines = [f"k{i}:partition {p} line {i}" for i in range(50)]
        produced = kcat.run(
            "-b", node.bootstrap, "-P", "-t", topic, "-p", str(p), "-K", ":", "-X", "acks=all",
            input=("\n".join(lines) + "\n").encode(),
        )  # fmt: skip
        assert produced.returncode == 0, produced.stderr.decode()
        want += [f"{p}|{i}|k{i}|partition {p} line {i}" for i in range(50)]

    consumed = kcat.run("-b", node.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%p|%o|%k|%s\\n")
    assert consumed.returncode == 0, consumed.stderr.decode()
    assert sorted(consumed.stdout.decode().splitlines()) == sorted(want)


def test_sigterm_moves_a_brokers_leadership_first_and_producers_see_only_retriable_errors(cluster, unique) -> None:
    topic = unique("topic")
    spread_topic(cluster, topic)  # the victim leads one partition
    controller = active_controller(cluster.node(1))
    victim = next(n for n in cluster.nodes if n.node_id != controller)
    others = [n for n in cluster.nodes if n is not victim]
    client_errors: list[KafkaError] = []
    failed: list[str] = []
    sent_at: list[float] = []
    acked_partitions_of: list[int] = []  # the records sent after the victim exited, once acknowledged

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed.append(str(err))
        elif stopped_at is not None and sent_at[int(msg.value())] > stopped_at:
            acked_partitions_of.append(msg.partition())

    # Bootstrapped from the others; the client still sends the victim's partitions to the victim.
    prod = clients.producer(cluster.bootstrap(others), error_cb=client_errors.append)
    exit_codes: list[int] = []
    stopper = threading.Thread(target=lambda: exit_codes.append(victim.stop()))
    stopped_at: float | None = None
    started = time.monotonic()
    while stopped_at is None or time.monotonic() < stopped_at + 2.0:
        sent_at.append(time.monotonic())
        prod.produce(topic, value=b"%d" % (len(sent_at) - 1), partition=len(sent_at) % 3, on_delivery=on_delivery)
        prod.poll(0.002)
        if stopper.ident is None and time.monotonic() > started + 1.0:
            stopper.start()
        elif stopper.ident is not None and not stopper.is_alive() and stopped_at is None:
            assert exit_codes, "stopping the victim failed"
            stopped_at = time.monotonic()
    assert prod.flush(clients.REQUEST_TIMEOUT_S) == 0, "records still unacknowledged"

    assert exit_codes == [clean_sigterm()]
    assert not failed, f"{len(failed)} of {len(sent_at)} records failed, first: {failed[0]}"
    not_retriable = [e for e in client_errors if e.fatal() or not (e.retriable() or e.code() == KafkaError._TRANSPORT)]
    assert not not_retriable, f"the producer saw errors it does not retry: {not_retriable}"
    after = Counter(acked_partitions_of)
    assert all(after[p] > 0 for p in range(3)), f"records sent after the stop and acknowledged, per partition: {after}"

    # Every node that is left: the victim gone from the brokers, leading nothing.
    cluster.wait_brokers(others)
    for node in others:
        meta = metadata(node)
        led = [(t.name, p.partition) for t in meta.topics for p in t.partitions if p.leader == victim.node_id]
        assert not led, f"node {node.node_id} says node {victim.node_id} still leads {led}"


def test_a_preferred_leader_election_moves_leadership_back_to_the_restarted_first_replica(cluster, unique) -> None:
    """Kill -9 a partition's first replica: another in-sync replica leads, and an election
    cannot move it back while the first is away. Restarted, the first replica catches up and
    rejoins the ISR (replication, issue 11); then `spindle cluster elect-leaders` makes it the
    leader again, on every node, with every record acknowledged before."""
    topic = unique("topic")
    created = create_through(cluster.node(1), topic, partitions=1, replication_factor=3)
    [placed] = wait_visible_everywhere(cluster, topic, 1, since=created, timeout_s=SETTLE_TIMEOUT_S)
    preferred = placed.replicas[0]
    assert placed.leader == preferred, f"a new partition is led by its first replica: {placed}"
    clients.wait_for_partitions(cluster.bootstrap(), topic, 1)
    values = [b"before-%d" % i for i in range(100)]
    acked = clients.produce_acked(clients.producer(cluster.bootstrap()), topic, [(None, v) for v in values], partition=0)
    assert [r.value for r in acked] == values
    victim = cluster.node(preferred)
    other = next(n for n in cluster.nodes if n is not victim)

    def partition_seen_by(node: ClusterNode) -> kafka_wire.PartitionInfo:
        [info] = metadata(node, [topic]).topics
        [partition] = info.partitions
        return partition

    def led_by_another() -> kafka_wire.PartitionInfo | None:
        p = partition_seen_by(other)
        return p if p.leader not in (-1, preferred) and preferred not in p.isr else None

    victim.kill9()
    moved = eventually(
        f"another in-sync replica leads once node {preferred} is fenced", led_by_another, timeout_s=FENCED_WITHIN_S
    )
    with kafka_wire.Connection(other.host, other.port) as conn:
        answer = kafka_wire.elect_leaders(conn, {topic: [0]})
    assert answer == (kafka_wire.ERROR_NONE, {(topic, 0): kafka_wire.ERROR_PREFERRED_LEADER_NOT_AVAILABLE})

    cluster.start()
    eventually(
        f"node {preferred}, restarted, is in sync again (its leader adds it once caught up)",
        lambda: preferred in partition_seen_by(other).isr or None,
    )
    elected = ok_json(other, "cluster", "elect-leaders", "--topic", topic)
    assert elected == [{"topic": topic, "partition": 0, "result": "elected", "message": None}], elected

    brokers, topics = cluster.wait_same_metadata(cluster.nodes)
    [(_, error, [(_, leader, leader_epoch, replicas, _)])] = [t for t in topics if t[0] == topic]
    assert (error, leader, replicas) == (kafka_wire.ERROR_NONE, preferred, placed.replicas)
    assert leader_epoch > moved.leader_epoch, "a new leader, a new epoch"
    with kafka_wire.Connection(victim.host, victim.port) as conn:
        again = kafka_wire.elect_leaders(conn, {topic: [0]})
    assert again == (kafka_wire.ERROR_NONE, {(topic, 0): kafka_wire.ERROR_ELECTION_NOT_NEEDED})
    read = clients.read_partitions(cluster.bootstrap(), topic, [0])
    assert [(r.offset, r.value) for r in read[0]] == [(r.offset, r.value) for r in acked]


@pytest.mark.spindle_only("spindle cluster describe is spindle's command line")
def test_a_stopped_broker_is_shown_fenced_until_it_registers_and_catches_up_again(cluster) -> None:
    victim = cluster.node(3)
    victim.stop_clean()

    def fenced(node: ClusterNode) -> dict[int, object]:
        # Only the cluster's own nodes: a refusal test's extra node may be listed, fenced.
        listed = {b["node"]: b for b in cluster_describe(node)["brokers"] if b["node"] in (1, 2, 3)}
        return {i: listed[i].get("fenced", "(no 'fenced' field)") if i in listed else "(not listed)" for i in (1, 2, 3)}

    shown: list[dict[int, object]] = []

    def only_node_3_fenced() -> bool | None:
        shown.append(fenced(cluster.node(1)))
        return shown[-1] == {1: False, 2: False, 3: True} or None

    try:
        eventually("cluster describe shows node 3 fenced and the others not", only_node_3_fenced)
    except AssertionError as e:
        raise AssertionError(f"{e}; last shown: {shown[-1:]}") from None
    victim.start()
    cluster.wait_brokers(cluster.nodes)
    assert fenced(cluster.node(2)) == {1: False, 2: False, 3: False}

    # Node 3 is a voter again and has caught up, as the active controller reports the quorum.
    def quorum_whole() -> dict | None:
        described = cluster_describe(cluster.node(3))
        quorum = described["quorum"]
        states = {v["node"]: v["state"] for v in quorum["voters"]} if quorum else {}
        caught_up = set(states) == {1, 2, 3} and set(states.values()) == {"leader", "follower (caught up)"}
        return described if caught_up and quorum["leader"] == described["controller"] else None

    eventually("cluster describe shows every voter caught up, the leader the controller", quorum_whole)


def cluster_describe(node: ClusterNode) -> dict:
    described = ok_json(node, "cluster", "describe")
    assert isinstance(described, dict), described
    return described


def create_within(node: ClusterNode, topic: str, since: float, timeout_s: float) -> float:
    """CreateTopics (2 partitions, 2 replicas) through `node` until it succeeds, as a client
    retries while there is no controller; how long after `since` it did. TOPIC_ALREADY_EXISTS
    after an attempt that got no answer in time means that attempt's creation went through."""
    deadline = since + timeout_s
    answers: list[object] = []
    while time.monotonic() < deadline:
        try:
            with kafka_wire.Connection(node.host, node.port, timeout_s=5.0) as conn:
                answer = kafka_wire.create_topic(conn, topic, 2, 2, timeout_ms=3_000)
        except (OSError, kafka_wire.WireError) as e:
            answer = (None, str(e))
        if answer == (kafka_wire.ERROR_NONE, None) or (answers and answer[0] == kafka_wire.ERROR_TOPIC_ALREADY_EXISTS):
            return time.monotonic() - since
        answers.append(answer)
        time.sleep(0.1)
    raise AssertionError(f"CreateTopics through node {node.node_id} failed for {timeout_s}s: answers {answers}")


def test_kill_9_of_the_active_controller_leaves_a_cluster_that_agrees_and_takes_the_node_back(
    cluster, unique
) -> None:
    before = unique("before")
    spread_topic(cluster, before)
    first = cluster.node(active_controller(cluster.node(1)))
    survivors = [n for n in cluster.nodes if n is not first]

    first.kill9()
    killed_at = time.monotonic()

    during = unique("during")
    took = create_within(survivors[0], during, killed_at, CREATE_AGAIN_WITHIN_S)
    assert took <= CREATE_AGAIN_WITHIN_S

    def agreed_controller() -> int | None:
        named = {controller_named_by(n) for n in survivors}
        return named.pop() if len(named) == 1 else None

    elected = eventually("the survivors name one new active controller", agreed_controller)
    assert elected in {n.node_id for n in survivors}
    cluster.wait_brokers(survivors, FENCED_WITHIN_S)
    brokers, topics = cluster.wait_same_metadata(survivors)
    assert {before, during} <= {name for name, _, _ in topics}

    # The killed node comes back, catches up and agrees.
    first.start()
    cluster.wait_brokers(cluster.nodes)
    brokers, topics = cluster.wait_same_metadata(cluster.nodes)
    assert {before, during} <= {name for name, _, _ in topics}

    # And it is a voter again: without the new controller, the quorum needs its vote.
    second = cluster.node(elected)
    second.kill9()
    killed_at = time.monotonic()
    left = [n for n in cluster.nodes if n is not second]
    after = unique("after")
    took = create_within(first, after, killed_at, CREATE_AGAIN_WITHIN_S)
    assert took <= CREATE_AGAIN_WITHIN_S
    cluster.wait_brokers(left, FENCED_WITHIN_S)
    brokers, topics = cluster.wait_same_metadata(left)
    assert {before, during, after} <= {name for name, _, _ in topics}


# Refusals: each leaves the running cluster as it was and the disk it was given untouched.


def disk_state(root: Path) -> dict[str, tuple[int, int, str] | None]:
    """Every directory and file under `root`: files by size, mtime and SHA-256."""
    state: dict[str, tuple[int, int, str] | None] = {}
    for path in sorted(root.rglob("*")):
        if path.is_dir():
            state[str(path.relative_to(root))] = None
        else:
            stat = path.stat()
            state[str(path.relative_to(root))] = (
                stat.st_size,
                stat.st_mtime_ns,
                hashlib.sha256(path.read_bytes()).hexdigest(),
            )
    return state


def refused(command: list[str]) -> str:
    """Runs a node that must refuse to start: its stderr, once it exited non-zero by itself."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=REFUSAL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"still running after {REFUSAL_TIMEOUT_S}s, not refused: {command}") from e
    assert result.returncode != 0, f"exited 0, not refused:\n{result.stderr[-2000:]}"
    assert result.returncode > 0, f"killed by signal {-result.returncode}, not refused:\n{result.stderr[-2000:]}"
    assert "panicked" not in result.stderr, result.stderr
    return result.stderr


def assert_cluster_unchanged(cluster: Cluster, brokers: list[ClusterNode]) -> None:
    cluster.wait_brokers(brokers)
    cluster.wait_same_metadata(cluster.running())


@pytest.mark.spindle_only("refusing a node: Kafka's checks and messages differ")
def test_a_second_node_with_a_running_nodes_id_is_refused(cluster, request, tmp_path: Path) -> None:
    # A broker-only node 4 runs; another node 4 (its own ports and data directory) must not take its place.
    port, cluster_port = free_port(), free_port()
    four = ClusterNode(
        name="node4",
        port=port,
        data_dir=tmp_path / "node4",
        log_path=tmp_path / "node4.log",
        node_id=4,
        cluster_port=cluster_port,
        voters=cluster.voters,
    )
    record_broker_use(request, four)
    try:
        four.start()
        cluster.wait_brokers([*cluster.nodes, four])
        duplicate_dir = tmp_path / "duplicate"
        duplicate_dir.mkdir()

        stderr = refused(spindle_node_command(4, free_port(), free_port(), cluster.voters, duplicate_dir))

        assert re.search(r"node (id )?4\b", stderr) and re.search("already|duplicate", stderr), stderr
        assert list(duplicate_dir.iterdir()) == [], "the refused node wrote to its data directory"
        assert four.alive()
        assert_cluster_unchanged(cluster, [*cluster.nodes, four])
        four.stop_clean()
        cluster.wait_brokers(cluster.nodes, FENCED_WITHIN_S)
    finally:
        four.ensure_stopped()


@pytest.mark.spindle_only("refusing a node: Kafka's checks and messages differ")
def test_a_node_whose_voters_disagree_is_refused_and_its_data_dir_left_as_it_was(cluster) -> None:
    three = cluster.node(3)
    three.stop_clean()
    before = disk_state(three.data_dir)
    voters = f"{cluster.voters},4@127.0.0.1:{free_port()}"

    stderr = refused(spindle_node_command(3, three.port, three.cluster_port, voters, three.data_dir))

    assert "voter" in stderr.lower(), stderr
    assert disk_state(three.data_dir) == before
    three.start()
    assert_cluster_unchanged(cluster, cluster.nodes)


@pytest.mark.spindle_only("refusing a node: Kafka's checks and messages differ")
def test_another_nodes_data_dir_is_refused_and_left_as_it_was(cluster) -> None:
    two = cluster.node(2)
    two.stop_clean()
    before = disk_state(two.data_dir)

    stderr = refused(spindle_node_command(4, free_port(), free_port(), cluster.voters, two.data_dir))

    assert "belongs to node 2" in stderr, stderr
    assert disk_state(two.data_dir) == before
    two.start()
    assert_cluster_unchanged(cluster, cluster.nodes)


@pytest.mark.spindle_only("refusing a node: Kafka's checks and messages differ")
def test_a_data_dir_of_another_cluster_is_refused_and_left_as_it_was(cluster, broker_factory, unique) -> None:
    # A single node (a quorum of one) with a topic of its own: its directory is another cluster's.
    # Node 5: no other test's node had that id, so only the directory can be the reason.
    single = broker_factory(node_id=5)
    clients.create_topic(single.bootstrap, unique("topic"), 1)
    single.stop_clean()
    before = disk_state(single.data_dir)

    stderr = refused(spindle_node_command(5, free_port(), free_port(), cluster.voters, single.data_dir))

    assert "belongs to cluster" in stderr, stderr
    assert disk_state(single.data_dir) == before
    assert_cluster_unchanged(cluster, cluster.nodes)
