"""Consumer groups through the broker's group coordinator, with confluent-kafka consumers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

import clients
from conftest import Broker
from group_member import Member, balanced, poll_until

SESSION_TIMEOUT_MS = 6000
JOIN_TIMEOUT_S = 30.0
CONSUME_TIMEOUT_S = 60.0


def produce(broker: Broker, topic: str, count: int) -> list[clients.Record]:
    return clients.produce_acked(
        clients.producer(broker.bootstrap), topic, [(b"k%d" % i, b"v%d" % i) for i in range(count)]
    )


def consume_all(members: list[Member], acked: list[clients.Record]) -> None:
    """Polls until the members together hold every acknowledged record; each exactly once."""
    want = {(r.partition, r.offset): (r.key, r.value) for r in acked}
    poll_until(
        members,
        lambda: sum(len(m.records) for m in members) >= len(want),
        CONSUME_TIMEOUT_S,
        f"consume {len(want)} records",
    )
    got = Counter((r.partition, r.offset) for m in members for r in m.records)
    assert not [pos for pos, n in got.items() if n > 1], "a record was consumed twice"
    assert {(r.partition, r.offset): (r.key, r.value) for m in members for r in m.records} == want


def close_all(members: list[Member]) -> None:
    for m in members:
        m.close()


def test_three_consumers_split_six_partitions(broker: Broker, unique) -> None:
    topic, group = unique("topic"), unique("group")
    clients.create_topic(broker.bootstrap, topic, 6)
    members = [Member(broker.bootstrap, group, topic) for _ in range(3)]
    try:
        poll_until(members, balanced(members, 6, [2, 2, 2]), JOIN_TIMEOUT_S, "three members with two partitions each")

        acked = produce(broker, topic, 6_000)
        consume_all(members, acked)

        for m in members:
            assert m.assigned is not None
            assert {r.partition for r in m.records} <= m.assigned, "a member read a partition it was not assigned"
    finally:
        close_all(members)


def test_two_groups_each_get_every_record(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 3)
    acked = produce(broker, topic, 3_000)
    first = Member(broker.bootstrap, unique("group-a"), topic)
    second = Member(broker.bootstrap, unique("group-b"), topic)
    try:
        consume_all([first], acked)
        consume_all([second], acked)
    finally:
        close_all([first, second])


def test_four_consumers_on_two_partitions_leave_two_idle(broker: Broker, unique) -> None:
    topic, group = unique("topic"), unique("group")
    clients.create_topic(broker.bootstrap, topic, 2)
    members = [Member(broker.bootstrap, group, topic) for _ in range(4)]
    try:
        poll_until(members, balanced(members, 2, [0, 0, 1, 1]), JOIN_TIMEOUT_S, "two members with one partition each")
        acked = produce(broker, topic, 1_000)
        consume_all(members, acked)
        assert sorted(len({r.partition for r in m.records}) for m in members) == [0, 0, 1, 1]
    finally:
        close_all(members)


class MemberProcess:
    """A group member in a child process, so that it can die by SIGKILL without leaving."""

    def __init__(self, broker: Broker, group: str, topic: str) -> None:
        self.assigned: set[int] | None = None
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("group_member.py")),
                broker.bootstrap,
                group,
                topic,
                str(SESSION_TIMEOUT_MS),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            assigned = json.loads(line)["assigned"]
            self.assigned = None if assigned is None else set(assigned)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.reader.join(timeout=10)


@pytest.mark.noida_lacks("never expires a member whose heartbeats stopped")
def test_a_killed_consumer_loses_its_partitions_within_the_session_timeout(broker: Broker, unique) -> None:
    topic, group = unique("topic"), unique("group")
    clients.create_topic(broker.bootstrap, topic, 6)
    members = [Member(broker.bootstrap, group, topic) for _ in range(2)]
    doomed = MemberProcess(broker, group, topic)
    try:
        poll_until(
            members, balanced([*members, doomed], 6, [2, 2, 2]), JOIN_TIMEOUT_S, "three members, two partitions each"
        )

        doomed.kill()
        # The session timeout, plus time for the survivors' next heartbeat and their rejoin.
        took_s = poll_until(
            members, balanced(members, 6, [3, 3]), SESSION_TIMEOUT_MS / 1000 + 10, "survivors take over"
        )

        print(f"takeover after {took_s:.1f}s (session timeout {SESSION_TIMEOUT_MS} ms)")
        # The orphaned partitions are really being read again.
        acked = produce(broker, topic, 600)
        for m in members:
            m.records.clear()
        poll_until(
            members,
            lambda: (
                {(r.partition, r.offset) for m in members for r in m.records}
                >= {(r.partition, r.offset) for r in acked}
            ),
            CONSUME_TIMEOUT_S,
            "survivors read every partition",
        )
    finally:
        if doomed.process.poll() is None:
            doomed.kill()
        close_all(members)


def test_static_member_rejoins_without_a_rebalance(broker: Broker, unique) -> None:
    topic, group = unique("topic"), unique("group")
    clients.create_topic(broker.bootstrap, topic, 4)
    # The leader joins first and stays; the other member is the one that bounces.
    leader = Member(broker.bootstrap, group, topic, **{"group.instance.id": "leader"})
    poll_until([leader], balanced([leader], 4, [4]), JOIN_TIMEOUT_S, "the leader alone")
    bouncer = Member(broker.bootstrap, group, topic, **{"group.instance.id": "bouncer"})
    members = [leader, bouncer]
    try:
        poll_until(members, balanced(members, 4, [2, 2]), JOIN_TIMEOUT_S, "two static members, two partitions each")
        held = bouncer.assigned
        leader_changes = (leader.assignments, leader.revocations)

        # A static member's close sends no LeaveGroup: the broker keeps its place for the session.
        bouncer.close()
        bouncer = Member(broker.bootstrap, group, topic, **{"group.instance.id": "bouncer"})
        members = [leader, bouncer]
        poll_until(members, lambda: bouncer.assigned is not None, JOIN_TIMEOUT_S, "the static member back")

        assert bouncer.assigned == held
        assert (leader.assignments, leader.revocations) == leader_changes, "the rejoin rebalanced the group"
    finally:
        close_all(members)


@pytest.mark.parametrize(
    "restart",
    [
        "sigterm",
        pytest.param(
            "kill9", marks=pytest.mark.noida_lacks("acknowledges offset commits before saving them; kill -9 loses them")
        ),
    ],
)
def test_committed_offsets_survive_a_broker_restart(own_broker: Broker, unique, restart: str) -> None:
    topic, group = unique("topic"), unique("group")
    clients.create_topic(own_broker.bootstrap, topic, 2)
    produce(own_broker, topic, 1_000)
    commits = {0: 123, 1: 77}
    member = Member(own_broker.bootstrap, group, topic)
    try:
        poll_until([member], lambda: len(member.records) > 0, JOIN_TIMEOUT_S, "first records")
        member.consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in commits.items()], asynchronous=False)
    finally:
        member.close()

    if restart == "sigterm":
        own_broker.restart_after_sigterm()
    else:
        own_broker.restart_after_kill9()

    resumed = Member(own_broker.bootstrap, group, topic)
    try:
        committed = clients.committed(resumed.consumer, [TopicPartition(topic, p) for p in commits])
        assert {tp.partition: tp.offset for tp in committed} == commits
        poll_until(
            [resumed],
            lambda: {r.partition for r in resumed.records} == set(commits),
            CONSUME_TIMEOUT_S,
            "records from both partitions",
        )
        first = {}
        for r in resumed.records:
            first.setdefault(r.partition, r.offset)
        assert first == commits, "the new consumer did not resume at the committed offsets"
    finally:
        resumed.close()


def test_admin_lists_describes_and_deletes_groups(broker: Broker, unique) -> None:
    topic, group = unique("topic"), unique("group")
    clients.create_topic(broker.bootstrap, topic, 3)
    produce(broker, topic, 300)
    admin = clients.admin(broker.bootstrap)
    member = Member(broker.bootstrap, group, topic)
    try:
        poll_until([member], balanced([member], 3, [3]), JOIN_TIMEOUT_S, "the member joined")
        member.consumer.commit(offsets=[TopicPartition(topic, p, 10 + p) for p in range(3)], asynchronous=False)

        listed = admin.list_consumer_groups(request_timeout=clients.REQUEST_TIMEOUT_S).result()
        assert group in {g.group_id for g in listed.valid}

        [described] = admin.describe_consumer_groups([group], request_timeout=clients.REQUEST_TIMEOUT_S).values()
        description = described.result()
        assert description.group_id == group
        assert description.state == ConsumerGroupState.STABLE
        assert not description.is_simple_consumer_group
        [described_member] = description.members
        assert {tp.partition for tp in described_member.assignment.topic_partitions if tp.topic == topic} == {0, 1, 2}

        [offsets_future] = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(3)])],
            request_timeout=clients.REQUEST_TIMEOUT_S,
        ).values()
        offsets = offsets_future.result()
        assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {0: 10, 1: 11, 2: 12}

        # A group with a live member may not be deleted.
        [busy] = admin.delete_consumer_groups([group], request_timeout=clients.REQUEST_TIMEOUT_S).values()
        with pytest.raises(KafkaException) as raised:
            busy.result()
        assert raised.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        member.close()

    [deleted] = admin.delete_consumer_groups([group], request_timeout=clients.REQUEST_TIMEOUT_S).values()
    deleted.result()
    deadline = time.monotonic() + clients.REQUEST_TIMEOUT_S
    while group in {
        g.group_id for g in admin.list_consumer_groups(request_timeout=clients.REQUEST_TIMEOUT_S).result().valid
    }:
        assert time.monotonic() < deadline, "deleted group still listed"
        time.sleep(0.05)
    [after_offsets] = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(3)])],
        request_timeout=clients.REQUEST_TIMEOUT_S,
    ).values()
    assert all(tp.offset < 0 for tp in after_offsets.result().topic_partitions), "offsets outlived the group"
