"""kafkajs 2.2.4 (tests/js/client.js) produces idempotently and consumes in a group."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import clients
from conftest import Broker

JS_DIR = Path(__file__).resolve().parent / "js"
RECORDS = 2_000
PARTITIONS = 3


def kafkajs(tmp_path: Path, *args: str) -> list[tuple[int, int, bytes, bytes]]:
    node = shutil.which("node")
    assert node is not None, "node is not installed"
    assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "kafkajs missing: run scripts/install-test-deps"
    out = tmp_path / f"kafkajs-{args[0]}.json"
    result = subprocess.run(
        [node, str(JS_DIR / "client.js"), *args, str(out)],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "KAFKAJS_NO_PARTITIONER_WARNING": "1"},
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"kafkajs {args[0]} exited {result.returncode}:\n{result.stderr[-4000:]}")
    return [(p, o, k.encode(), v.encode()) for p, o, k, v in json.loads(out.read_text())["records"]]


def test_kafkajs_idempotent_producer_then_librdkafka_reads(broker: Broker, unique, tmp_path: Path) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, PARTITIONS)

    produced = kafkajs(tmp_path, "produce", broker.bootstrap, topic, str(PARTITIONS), str(RECORDS))

    assert len(produced) == RECORDS
    read = clients.read_all(broker.bootstrap, topic)
    at = {(r.partition, r.offset): (r.key, r.value) for rs in read.values() for r in rs}
    assert at == {(p, o): (k, v) for p, o, k, v in produced}
    for p in range(PARTITIONS):
        assert sorted(o for (q, o) in at if q == p) == list(range(len(read[p])))


def test_kafkajs_group_consumer_reads_everything(broker: Broker, unique, tmp_path: Path) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, PARTITIONS)
    prod = clients.producer(broker.bootstrap)
    acked = clients.produce_acked(prod, topic, [(b"k%d" % i, b"v%d" % i) for i in range(RECORDS)])

    consumed = kafkajs(tmp_path, "consume-group", broker.bootstrap, topic, unique("group"), str(RECORDS))

    positions = [(p, o) for p, o, _, _ in consumed]
    assert len(positions) == len(set(positions)) == RECORDS, "a record was consumed twice"
    assert {(p, o): (k, v) for p, o, k, v in consumed} == {(r.partition, r.offset): (r.key, r.value) for r in acked}
