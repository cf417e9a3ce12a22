"""A cluster of real broker processes on loopback for the end-to-end tests (issue 10).

Spindle's nodes are `spindle serve --node-id N --cluster-listen ... --controller-voters ...`, ids
1..N, the first `voters` of them in the controller quorum and the rest brokers only. In kafka mode
(SPINDLE_TEST_BROKER=kafka) they are Apache Kafka nodes prepared by `scripts/kafka
prepare-cluster` (the voters combined controller+broker nodes, the rest brokers only) and run by
`scripts/kafka run-node`, which exec's the JVM so that SIGTERM and SIGKILL reach Kafka itself.
Each node is a conftest `Broker`: its log, readiness wait, stop and kill -9 are the single
broker's.

Both get a 4 s broker session timeout and 500 ms heartbeats (Kafka's 9 s and 2 s would make the
tests that kill a node wait longer for nothing).
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import kafka_wire
import pytest

from conftest import (
    BROKER_KIND,
    KAFKA_SCRIPT,
    SPINDLE_BIN,
    START_TIMEOUT_S,
    Broker,
    clean_exit_code,
    free_port,
    journal_args,
    record_broker_use,
)

SESSION_TIMEOUT_MS = 4000
HEARTBEAT_INTERVAL_MS = 500
# Three nodes share a 2-core machine: one shard each.
SPINDLE_CORES = 1
KAFKA_HEAP = "384m"
# How long nodes may take to agree on a change once it is committed, and how often to look.
SETTLE_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.05

T = TypeVar("T")


@dataclass
class ClusterNode(Broker):
    """One node of a cluster; `data_dir` is its spindle data directory or its scripts/kafka node
    directory (config, storage)."""

    node_id: int = 0
    cluster_port: int = 0  # spindle's --cluster-listen port (Kafka's controller ports are scripts/kafka's)
    voters: str = ""  # spindle's --controller-voters
    extra_args: tuple[str, ...] = ()  # more spindle flags

    def command(self) -> list[str]:
        if BROKER_KIND == "kafka":
            return [str(KAFKA_SCRIPT), "run-node", "--dir", str(self.data_dir), "--heap", KAFKA_HEAP]
        assert BROKER_KIND == "spindle", "clusters run on spindle or Kafka"
        return spindle_node_command(
            self.node_id, self.port, self.cluster_port, self.voters, self.data_dir, *self.extra_args
        )

    def ended_badly(self) -> int | None:
        """The exit code if the node is down for any reason but SIGTERM or SIGKILL from a test."""
        code = self.returncode()
        if code is None or code in (clean_exit_code(signal.SIGTERM), -signal.SIGKILL):
            return None
        return code


def spindle_node_command(
    node_id: int, port: int, cluster_port: int, voters: str, data_dir: Path, *extra_args: str
) -> list[str]:
    """`spindle serve` as one node of a cluster, with the flags issue 10 gives it."""
    address = f"127.0.0.1:{port}"
    return [
        str(SPINDLE_BIN),
        "serve",
        "--node-id",
        str(node_id),
        "--listen",
        address,
        "--advertise",
        address,
        "--cluster-listen",
        f"127.0.0.1:{cluster_port}",
        "--controller-voters",
        voters,
        "--data-dir",
        str(data_dir),
        "--cores",
        str(SPINDLE_CORES),
        "--broker-session-timeout-ms",
        str(SESSION_TIMEOUT_MS),
        "--broker-heartbeat-interval-ms",
        str(HEARTBEAT_INTERVAL_MS),
        *journal_args(extra_args),
        *extra_args,
    ]


def eventually(what: str, check: Callable[[], T | None], timeout_s: float = SETTLE_TIMEOUT_S) -> T:
    """`check()` until it returns something other than None; fails naming `what` after the timeout."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            result = check()
            if result is not None:
                return result
        except (OSError, kafka_wire.WireError) as e:
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s}s (last error: {last})")
        time.sleep(POLL_INTERVAL_S)


# One node's answer to Metadata v7 of every topic: its brokers (id, host, port) and, per topic,
# its error and partitions (index, leader, leader epoch, replicas in order, ISR as a set).
MetadataView = tuple[tuple[tuple[int, str, int], ...], tuple[tuple[str, int, tuple[tuple, ...]], ...]]


def metadata(node: Broker, topics: list[str] | None = None) -> kafka_wire.MetadataResponse:
    with kafka_wire.Connection(node.host, node.port) as conn:
        return conn.metadata(topics, allow_auto_topic_creation=False, version=7)


def view_of(meta: kafka_wire.MetadataResponse) -> MetadataView:
    brokers = tuple(sorted((b.node_id, b.host, b.port) for b in meta.brokers))
    topics = tuple(
        sorted(
            (
                t.name,
                t.error_code,
                tuple(
                    sorted((p.partition, p.leader, p.leader_epoch, p.replicas, tuple(sorted(p.isr))) for p in t.partitions)
                ),
            )
            for t in meta.topics
        )
    )
    return brokers, topics


def digest(view: MetadataView) -> str:
    return hashlib.sha256(repr(view).encode()).hexdigest()[:16]


@dataclass
class Cluster:
    root: Path
    nodes: list[ClusterNode]
    voter_count: int

    @classmethod
    def create(
        cls,
        root: Path,
        node_count: int,
        voter_count: int = 3,
        extra_args: tuple[str, ...] = (),
        replica_lag_time_max_ms: int | None = None,
    ) -> Cluster:
        """`extra_args`: more spindle flags (spindle mode only). `replica_lag_time_max_ms`: how
        long a follower may lag before it leaves the ISR, on either broker (Kafka's
        replica.lag.time.max.ms, spindle's --replica-lag-time-max-ms)."""
        assert 1 <= voter_count <= node_count
        if replica_lag_time_max_ms is not None:
            extra_args = (*extra_args, "--replica-lag-time-max-ms", str(replica_lag_time_max_ms))
        ports = [free_port() for _ in range(node_count)]
        cluster_ports = [free_port() for _ in range(node_count)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{cluster_ports[i]}" for i in range(voter_count))
        nodes = [
            ClusterNode(
                name=f"node{i + 1}",
                port=ports[i],
                data_dir=root / f"node{i + 1}",
                log_path=root / f"node{i + 1}.log",
                node_id=i + 1,
                cluster_port=cluster_ports[i],
                voters=voters,
                extra_args=extra_args,
            )
            for i in range(node_count)
        ]
        if BROKER_KIND == "kafka":
            settings = [f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}"]
            settings += [f"broker.heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS}"]
            if replica_lag_time_max_ms is not None:
                settings += [f"replica.lag.time.max.ms={replica_lag_time_max_ms}"]
            command = [str(KAFKA_SCRIPT), "prepare-cluster", "--dir", str(root), "--voters", str(voter_count)]
            command += ["--ports", ",".join(map(str, ports))]
            for setting in settings:
                command += ["--set", setting]
            result = subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False)
            assert result.returncode == 0, f"scripts/kafka prepare-cluster failed:\n{result.stderr}"
        return cls(root, nodes, voter_count)

    @property
    def voters(self) -> str:
        """Spindle's --controller-voters of this cluster."""
        return self.nodes[0].voters

    def node(self, node_id: int) -> ClusterNode:
        [node] = [n for n in self.nodes if n.node_id == node_id]
        return node

    def running(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.alive()]

    def bootstrap(self, nodes: list[ClusterNode] | None = None) -> str:
        return ",".join(n.bootstrap for n in (nodes if nodes is not None else self.running()))

    def start(self) -> None:
        """Starts every node that is not running, together (no node of a quorum serves before a
        majority is up), and waits until every running node lists every running broker."""
        down = [n for n in self.nodes if not n.alive()]
        for node in down:
            node.spawn()
        for node in down:
            node.wait_serving()
        self.wait_brokers(self.running(), START_TIMEOUT_S)

    def stop(self) -> dict[int, int]:
        """SIGTERM to every running node at once (a quorum's last nodes would otherwise wait for
        the others); their exit codes."""
        running = self.running()
        for node in running:
            assert node.process is not None
            node.process.send_signal(signal.SIGTERM)
        codes = {}
        for node in running:
            assert node.process is not None
            try:
                codes[node.node_id] = node.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                node.ensure_stopped()
                codes[node.node_id] = -signal.SIGKILL
        return codes

    def ensure_stopped(self) -> None:
        for node in self.nodes:
            node.ensure_stopped()
            node.remove_data()

    def wait_brokers(self, brokers: list[ClusterNode], timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Until the Metadata of every running node of the cluster lists exactly these brokers,
        at their addresses."""
        want = tuple(sorted((b.node_id, b.host, b.port) for b in brokers))

        def agreed() -> bool | None:
            return all(view_of(metadata(n))[0] == want for n in self.running()) or None

        eventually(f"every running node lists brokers {[b.node_id for b in brokers]}", agreed, timeout_s)

    def views(self, nodes: list[ClusterNode] | None = None) -> dict[int, MetadataView]:
        return {n.node_id: view_of(metadata(n)) for n in (nodes if nodes is not None else self.running())}

    def wait_same_metadata(self, nodes: list[ClusterNode], timeout_s: float = SETTLE_TIMEOUT_S) -> MetadataView:
        """Until `nodes` answer Metadata identically (brokers, topics, leaders, epochs, replicas,
        ISR); that answer. Fails with each node's digest and answer."""
        last: dict[int, MetadataView] = {}

        def same() -> MetadataView | None:
            last.clear()
            last.update(self.views(nodes))
            first = next(iter(last.values()))
            return first if all(v == first for v in last.values()) else None

        try:
            return eventually("the nodes answer the same metadata", same, timeout_s)
        except AssertionError as e:
            details = "\n".join(f"node {i} digest {digest(v)}: {v}" for i, v in last.items())
            raise AssertionError(f"{e}\n{details}") from None


def shared_by_module(cluster: Cluster) -> Iterator[Cluster]:
    """For a module fixture: the cluster started; after the module's last test, the nodes still
    running (a test may leave one down) shut down cleanly, and every node is gone."""
    try:
        cluster.start()
        yield cluster
        codes = cluster.stop()
        assert codes and set(codes.values()) == {clean_exit_code(signal.SIGTERM)}, f"exit codes after SIGTERM: {codes}"
    finally:
        cluster.ensure_stopped()


def for_one_test(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[Cluster]:
    """For a test's fixture: the shared cluster with every node up (one an earlier test killed
    starts again) and listed by every node; the nodes' logs go into the test's failure report,
    and a node that exited by itself during the test fails it."""
    for node in cluster.nodes:
        record_broker_use(request, node)
    cluster.start()
    yield cluster
    died = {n.node_id: n.ended_badly() for n in cluster.nodes if n.ended_badly() is not None}
    assert not died, f"nodes exited on their own during the test (node: exit code): {died}"


def active_controller(via: Broker) -> int:
    """The active controller's node id, once `via` knows one."""
    return eventually(f"{via.name} names an active controller", lambda: controller_named_by(via))


def controller_named_by(node: Broker) -> int | None:
    """The active controller's node id as `node` tells it; None while it knows none.

    Spindle's DescribeCluster names it (issue 10). A Kafka broker's DescribeCluster names a
    random live broker instead (KRaft's controllers are not for clients to reach), so on Kafka
    this asks DescribeQuorum for the Raft leader of the metadata log.
    """
    if BROKER_KIND == "kafka":
        with kafka_wire.Connection(node.host, node.port) as conn:
            named = kafka_wire.describe_quorum_leader(conn)
    else:
        named = describe_cluster_controller(node)
    return named if named >= 0 else None


def describe_cluster_controller(node: Broker) -> int:
    """The controller id in the DescribeCluster answer of `node` (-1: none)."""
    with kafka_wire.Connection(node.host, node.port) as conn:
        return kafka_wire.describe_cluster(conn).controller_id
