"""kcat, on Debian's librdkafka 2.0.2 and on the current librdkafka, lists, produces and consumes."""

from __future__ import annotations

import json

import clients
from conftest import Broker, Kcat


def version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def test_kcat_runs_an_old_and_a_current_librdkafka(kcat_debian: Kcat, kcat_current: Kcat) -> None:
    # 2.2.0 is where librdkafka learnt to parse tagged fields a broker leaves out.
    assert version(kcat_debian.librdkafka_version) < (2, 2, 0)
    assert version(kcat_current.librdkafka_version) >= (2, 2, 0)


def test_kcat_lists_the_broker_and_topics(broker: Broker, kcat: Kcat, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 3)

    result = kcat.run("-b", broker.bootstrap, "-L", "-J")

    assert result.returncode == 0, result.stderr.decode()
    meta = json.loads(result.stdout)
    assert [b["name"] for b in meta["brokers"]] == [broker.bootstrap]
    node_id = meta["brokers"][0]["id"]
    topics = {t["topic"]: t for t in meta["topics"]}
    assert topic in topics, f"{topic} not in {sorted(topics)}"
    partitions = topics[topic]["partitions"]
    assert sorted(p["partition"] for p in partitions) == [0, 1, 2]
    assert all(p["leader"] == node_id for p in partitions)


def test_kcat_produces_100_lines_and_reads_them_back(broker: Broker, kcat: Kcat, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1)
    lines = [f"key{i}:line number {i} from {kcat.label}" for i in range(100)]

    produced = kcat.run(
        "-b",
        broker.bootstrap,
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-K",
        ":",
        "-X",
        "acks=all",
        input=("\n".join(lines) + "\n").encode(),
    )
    assert produced.returncode == 0, produced.stderr.decode()

    consumed = kcat.run("-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%p|%o|%k|%s\\n")
    assert consumed.returncode == 0, consumed.stderr.decode()
    got = consumed.stdout.decode().splitlines()
    want = [f"0|{i}|key{i}|line number {i} from {kcat.label}" for i in range(100)]
    assert got == want
    assert clients.watermarks(broker.bootstrap, topic, [0]) == {0: (0, 100)}
