"""Apache Kafka's own command-line tools against the broker, run from Kafka's jars
(`scripts/kafka classpath`) as `kafka-topics.sh` and friends would run them.

Each test parses what the tool printed and checks it against what a second client
(confluent-kafka) sees. A JVM start costs seconds on this machine: each test runs few tools.
"""

from __future__ import annotations

import re

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

import clients
import jvm
from conftest import Broker

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"


def tool(main_class: str, *args: str, input: str | None = None) -> str:
    """Runs one of Kafka's tools; fails the test unless it exits 0; returns its stdout."""
    result = jvm.run_java(jvm.kafka_tools_classpath(), main_class, *args, input=input)
    if result.returncode != 0:
        pytest.fail(
            f"{main_class.rsplit('.', 1)[-1]} {' '.join(args)} exited {result.returncode}:\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
        )
    return result.stdout


def table(out: str, header_start: str) -> list[dict[str, str]]:
    """The rows of a whitespace-aligned table whose header line starts with `header_start`."""
    lines = [line for line in out.splitlines() if line.strip()]
    at = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    names = lines[at].split()
    rows = [dict(zip(names, line.split(), strict=True)) for line in lines[at + 1 :]]
    assert rows, f"an empty table:\n{out}"
    return rows


def test_kafka_topics_create_list_describe_alter_delete(broker: Broker, unique) -> None:
    topic = unique("topic")
    bs = ["--bootstrap-server", broker.bootstrap]

    out = tool(TOPICS, *bs, "--create", "--topic", topic, "--partitions", "3", "--config", "retention.ms=3600000")
    assert out.strip() == f"Created topic {topic}."
    assert topic in tool(TOPICS, *bs, "--list").split()

    described = tool(TOPICS, *bs, "--describe", "--topic", topic)
    summary, *partitions = [line.strip() for line in described.splitlines() if line.strip()]
    fields = dict(re.findall(r"(\w+): (\S+)", summary))
    assert fields["Topic"] == topic and fields["PartitionCount"] == "3" and fields["ReplicationFactor"] == "1"
    # Kafka also lists broker settings that differ from its defaults (min.insync.replicas=1 here).
    assert "retention.ms=3600000" in fields["Configs"].split(","), summary
    rows = [dict(re.findall(r"(\w+): (\S+)", line)) for line in partitions]
    assert [r["Partition"] for r in rows] == ["0", "1", "2"]
    assert all(r["Leader"] == r["Replicas"] == r["Isr"] for r in rows), described

    tool(TOPICS, *bs, "--alter", "--topic", topic, "--partitions", "5")
    summary = tool(TOPICS, *bs, "--describe", "--topic", topic).splitlines()[0]
    assert "PartitionCount: 5" in summary, summary
    assert clients.partitions_of(broker.bootstrap, topic) == [0, 1, 2, 3, 4]

    tool(TOPICS, *bs, "--delete", "--topic", topic)
    assert topic not in tool(TOPICS, *bs, "--list").split()


def test_console_producer_then_console_consumer_from_beginning(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 2)
    lines = [f"key{i}:value {i}" for i in range(50)]

    out = tool(
        CONSOLE_PRODUCER,
        "--bootstrap-server", broker.bootstrap, "--topic", topic,
        "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
        input="\n".join(lines) + "\n",
    )  # fmt: skip
    assert out.strip() == "", out
    read = clients.read_all(broker.bootstrap, topic)
    by_key = {r.key: r for rs in read.values() for r in rs}
    assert {k: r.value for k, r in by_key.items()} == {f"key{i}".encode(): f"value {i}".encode() for i in range(50)}

    out = tool(
        CONSOLE_CONSUMER,
        "--bootstrap-server", broker.bootstrap, "--topic", topic, "--from-beginning", "--max-messages", "50",
        "--timeout-ms", "60000", "--formatter-property", "print.key=true",
        "--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true",
    )  # fmt: skip
    consumed = [line.split("\t") for line in out.splitlines() if line.startswith("Partition:")]
    assert len(consumed) == 50, out
    # Each line: Partition:P, Offset:O, key, value: exactly where confluent-kafka found them.
    got = {(int(p.removeprefix("Partition:")), int(o.removeprefix("Offset:")), k, v) for p, o, k, v in consumed}
    assert got == {(r.partition, r.offset, r.key.decode(), r.value.decode()) for r in by_key.values()}


def test_consumer_groups_describe_with_lag_and_reset_offsets(broker: Broker, unique) -> None:
    topic, group = unique("topic"), unique("group")
    clients.create_topic(broker.bootstrap, topic, 2)
    prod = clients.producer(broker.bootstrap)
    for p in (0, 1):
        clients.produce_acked(prod, topic, [(None, b"v%d" % i) for i in range(15)], partition=p)
    committer = clients.assigned_consumer(broker.bootstrap, **{"group.id": group})
    try:
        committer.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 11)], asynchronous=False)
    finally:
        committer.close()

    out = tool(CONSUMER_GROUPS, "--bootstrap-server", broker.bootstrap, "--describe", "--group", group)
    rows = {int(r["PARTITION"]): r for r in table(out, "GROUP")}
    assert {p: (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for p, r in rows.items()} == {
        0: ("4", "15", "11"),
        1: ("11", "15", "4"),
    }, out
    assert all(r["GROUP"] == group and r["TOPIC"] == topic and r["CONSUMER-ID"] == "-" for r in rows.values())

    out = tool(
        CONSUMER_GROUPS,
        "--bootstrap-server", broker.bootstrap, "--reset-offsets", "--group", group, "--topic", topic,
        "--to-offset", "2", "--execute",
    )  # fmt: skip
    assert {int(r["PARTITION"]): r["NEW-OFFSET"] for r in table(out, "GROUP")} == {0: "2", 1: "2"}, out
    checker = clients.assigned_consumer(broker.bootstrap, **{"group.id": group})
    try:
        committed = checker.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
    finally:
        checker.close()
    assert [c.offset for c in committed] == [2, 2]


def test_kafka_configs_describe_and_alter_a_topic(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1, {"retention.ms": "86400000"})
    entity = ["--bootstrap-server", broker.bootstrap, "--entity-type", "topics", "--entity-name", topic]

    out = tool(CONFIGS, *entity, "--alter", "--add-config", "retention.ms=1234567,retention.bytes=99999")
    assert out.strip() == f"Completed updating config for topic {topic}.", out
    tool(CONFIGS, *entity, "--alter", "--delete-config", "retention.bytes")

    out = tool(CONFIGS, *entity, "--describe")
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    assert lines[0] == f"Dynamic configs for topic {topic} are:", out
    assert dict(re.match(r"([\w.]+)=(\S*) ", line).groups() for line in lines[1:]) == {"retention.ms": "1234567"}

    resource = ConfigResource(ResourceType.TOPIC, topic)
    admin = clients.admin(broker.bootstrap)  # outlives its futures: destroying it fails them
    described = admin.describe_configs([resource])[resource].result(timeout=30)
    assert described["retention.ms"].value == "1234567"
    assert described["retention.bytes"].value == "-1"


def test_producer_perf_test_then_consumer_perf_test(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 2)
    records, size = 20_000, 100

    out = tool(
        PRODUCER_PERF,
        "--bootstrap-server", broker.bootstrap, "--topic", topic, "--num-records", str(records),
        "--record-size", str(size), "--throughput", "-1", "--command-property", "acks=all",
    )  # fmt: skip
    final = re.search(r"^(\d+) records sent, ([\d.]+) records/sec .* ([\d.]+) ms avg latency", out, re.MULTILINE)
    assert final, out
    assert int(final.group(1)) == records and float(final.group(2)) > 0, out
    ends = clients.watermarks(broker.bootstrap, topic, [0, 1])
    assert sum(high for _, high in ends.values()) == records

    out = tool(
        CONSUMER_PERF,
        "--bootstrap-server", broker.bootstrap, "--topic", topic, "--num-records", str(records),
        "--timeout", "60000",
    )  # fmt: skip
    header, data = [line for line in out.splitlines() if line.strip()][-2:]
    row = dict(zip([h.strip() for h in header.split(",")], [d.strip() for d in data.split(",")], strict=True))
    assert int(row["data.consumed.in.nMsg"]) == records, out
    assert float(row["data.consumed.in.MB"]) == pytest.approx(records * size / (1 << 20), abs=1e-3), out
