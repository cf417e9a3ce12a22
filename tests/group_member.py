"""Consumer-group membership shared by the group tests, plus a member that runs as its own process.

Run as `python3 group_member.py BOOTSTRAP GROUP TOPIC SESSION_TIMEOUT_MS`, it joins the group,
prints its assignment as one JSON line each time it changes, and polls until it is killed: a
member that dies without leaving, for tests that SIGKILL it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from confluent_kafka import Consumer, KafkaException, TopicPartition

import clients
from clients import Record

HEARTBEAT_INTERVAL_MS = 500


class Member:
    """One confluent-kafka group consumer with what it was assigned and what it consumed."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, session_timeout_ms: int = 6000, **config: object
    ) -> None:
        self.topic = topic
        # None while revoked (mid-rebalance), else the partitions of the current generation.
        self.assigned: set[int] | None = None
        self.assignments = 0
        self.revocations = 0
        self.records: list[Record] = []
        self.on_change: Callable[[Member], None] | None = None
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
                **config,
            }
        )
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned = {tp.partition for tp in partitions}
        self.assignments += 1
        if self.on_change:
            self.on_change(self)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned = None
        self.revocations += 1
        if self.on_change:
            self.on_change(self)

    def poll(self, timeout_s: float = 0.05) -> None:
        for msg in self.consumer.consume(num_messages=5_000, timeout=timeout_s):
            if msg.error() is not None:
                raise KafkaException(msg.error())
            self.records.append(clients.record_of(msg))

    def close(self) -> None:
        self.consumer.close()


def poll_until(members: Sequence[Member], done: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Polls every member in turn until done() holds; returns the seconds it took."""
    start = time.monotonic()
    while not done():
        elapsed = time.monotonic() - start
        assert elapsed < timeout_s, f"{what}: not after {timeout_s}s; assignments {[m.assigned for m in members]}"
        for m in members:
            m.poll()
    return time.monotonic() - start


class HasAssignment(Protocol):
    @property
    def assigned(self) -> set[int] | None: ...


def balanced(members: Sequence[HasAssignment], partitions: int, sizes: Sequence[int]) -> Callable[[], bool]:
    """True once every member holds an assignment, they are disjoint and cover every partition,
    and their sizes (sorted) are the given ones."""

    def check() -> bool:
        assigned = [m.assigned for m in members]
        if any(a is None for a in assigned):
            return False
        sets = [a for a in assigned if a is not None]
        union = set().union(*sets)
        return (
            sum(len(a) for a in sets) == len(union) == partitions
            and union == set(range(partitions))
            and sorted(len(a) for a in sets) == sorted(sizes)
        )

    return check


def main(argv: list[str]) -> None:
    bootstrap, group, topic, session_timeout_ms = argv
    member = Member(bootstrap, group, topic, int(session_timeout_ms))

    def report(m: Member) -> None:
        print(json.dumps({"assigned": None if m.assigned is None else sorted(m.assigned)}), flush=True)

    member.on_change = report
    while True:
        member.poll(0.1)


if __name__ == "__main__":
    main(sys.argv[1:])
