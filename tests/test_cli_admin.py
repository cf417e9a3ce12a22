"""The `spindle` admin command line (topic, produce, consume, group) end to end against the broker.

Each test runs the CLI binary (SPINDLE_BIN) as a child process, the way people and scripts use it,
and checks its output against what the broker holds, read back with confluent-kafka where an
independent view matters (where keys land, what was committed).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
from confluent_kafka import Consumer, TopicPartition

import clients
from conftest import SPINDLE_BIN, Broker, free_port
from group_member import Member, poll_until

RUN_TIMEOUT_S = 60.0
# How long a command may take to give up on a broker that never answers (its timeouts are set
# lower below): it must fail, not hang.
GIVE_UP_S = 15.0
# How long a group member may take to join, rebalance or leave.
GROUP_SETTLE_S = 45.0


def spindle(
    broker: Broker | None,
    *args: str,
    stdin: bytes | None = None,
    timeout_s: float = RUN_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """Runs the CLI to completion; the broker comes from SPINDLE_BROKERS, as a user's shell has it."""
    env = dict(os.environ)
    env.pop("RUST_LOG", None)
    if broker is not None:
        env["SPINDLE_BROKERS"] = broker.bootstrap
    result = subprocess.run(
        [str(SPINDLE_BIN), *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )
    return subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")
    )


def ok(broker: Broker | None, *args: str, stdin: bytes | None = None) -> str:
    """Runs the CLI and returns its stdout; any failure fails the test with what it said."""
    result = spindle(broker, *args, stdin=stdin)
    assert result.returncode == 0, f"spindle {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    return result.stdout


def ok_json(broker: Broker | None, *args: str) -> object:
    return json.loads(ok(broker, *args, "--output", "json"))


def fails(broker: Broker | None, *args: str, code: int = 1, stdin: bytes | None = None) -> str:
    """Runs the CLI expecting an error; returns the error line, checked to be a single
    `error: ...` line with no panic, backtrace or Debug dump."""
    result = spindle(broker, *args, stdin=stdin)
    assert result.returncode == code, (
        f"spindle {' '.join(args)} exited {result.returncode}, expected {code}:\n{result.stdout}\n{result.stderr}"
    )
    assert "panicked" not in result.stderr and "RUST_BACKTRACE" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    if code == 2:
        # Usage errors are clap's: the first line says what is wrong, a hint follows.
        assert lines and lines[0].startswith("error:"), result.stderr
        return lines[0]
    assert len(lines) == 1 and lines[0].startswith("error: "), f"want one error line, got:\n{result.stderr}"
    assert not any(debug in lines[0] for debug in ("Kafka {", "Error {", "Some(", 'code: ')), lines[0]
    return lines[0]


def table(text: str) -> list[dict[str, str]]:
    """Parses an aligned table (columns split on runs of two or more spaces) into rows by header."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0].split()
    return [dict(zip(header, line.split(), strict=True)) for line in lines[1:]]


def create_topic(broker: Broker, topic: str, partitions: int) -> None:
    ok(broker, "topic", "create", topic, "--partitions", str(partitions))
    # Against Kafka, `topic create` returns (every leader in Metadata) a moment before those
    # leaders serve: an acks=0 record sent then would be dropped.
    clients.wait_for_partitions(broker.bootstrap, topic, partitions)


def produce_lines(broker: Broker, topic: str, lines: Sequence[str], *args: str) -> subprocess.CompletedProcess[str]:
    result = spindle(broker, "produce", topic, *args, stdin="".join(f"{line}\n" for line in lines).encode())
    assert result.returncode == 0, result.stderr
    return result


def consume(broker: Broker, topic: str, *args: str) -> list[str]:
    return ok(broker, "consume", topic, *args).splitlines()


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (Utils.murmur2), as a signed 32-bit int."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    n = len(data) // 4
    for i in range(n):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = data[4 * n :]
    if tail:
        for i, byte in enumerate(tail):
            h ^= byte << (8 * i)
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def test_murmur2_here_matches_the_java_client() -> None:
    # UtilsTest.testMurmur2 in Apache Kafka: the partition checks below lean on this function.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"abc") == 479470107


# --- topics -------------------------------------------------------------------------------------


def test_topic_create_list_describe_alter_grow_delete(broker: Broker, unique) -> None:
    topic = unique("topic")

    created = ok_json(broker, "topic", "create", topic, "-p", "3", "-r", "1", "-c", "retention.ms=3600000")
    assert created == [{"topic": topic, "status": "created"}]

    listed = {t["NAME"]: t for t in table(ok(broker, "topic", "list"))}
    assert listed[topic]["PARTITIONS"] == "3" and listed[topic]["REPLICAS"] == "1"
    assert {"name": topic, "partitions": 3, "replication_factor": 1} in ok_json(broker, "topic", "list")

    produce_lines(broker, topic, [f"v{i}" for i in range(30)], "--partition", "1")
    described = ok_json(broker, "topic", "describe", topic)
    assert described["name"] == topic
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    for p in described["partitions"]:
        assert p["leader"] >= 0 and p["replicas"] == [p["leader"]] and p["isr"] == [p["leader"]], p
        want_end = 30 if p["partition"] == 1 else 0
        assert (p["log_start_offset"], p["log_end_offset"]) == (0, want_end), p
    configs = {c["name"]: c for c in described["configs"]}
    assert configs["retention.ms"]["value"] == "3600000" and configs["retention.ms"]["source"] == "topic"
    assert configs["cleanup.policy"]["value"] == "delete"

    text = ok(broker, "topic", "describe", topic)
    assert text.startswith(f"NAME        {topic}\n"), text
    partitions_table = text.split("\n\n")[1]
    assert [row["LOG-END-OFFSET"] for row in table(partitions_table)] == ["0", "30", "0"]

    ok(broker, "topic", "alter-config", topic, "--set", "retention.ms=7200000", "--set", "segment.bytes=16777216")
    configs = {c["name"]: c["value"] for c in ok_json(broker, "topic", "describe", topic)["configs"]}
    assert (configs["retention.ms"], configs["segment.bytes"]) == ("7200000", "16777216")
    ok(broker, "topic", "alter-config", topic, "--delete", "retention.ms")
    configs = {c["name"]: c for c in ok_json(broker, "topic", "describe", topic)["configs"]}
    assert configs["retention.ms"]["source"] != "topic", "a deleted config is back to its default"

    assert ok(broker, "topic", "add-partitions", topic, "--to", "5") == f"topic '{topic}' now has 5 partitions\n"
    assert len(ok_json(broker, "topic", "describe", topic)["partitions"]) == 5

    assert table(ok(broker, "topic", "delete", topic)) == [{"TOPIC": topic, "STATUS": "deleted"}]
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while topic in {t["name"] for t in ok_json(broker, "topic", "list")}:
        assert time.monotonic() < deadline, f"{topic} still listed after delete"
        time.sleep(0.1)


def test_topic_errors_are_one_line_and_exit_non_zero(broker: Broker, unique) -> None:
    missing = unique("missing")
    for args in (
        ("topic", "describe", missing),
        ("topic", "delete", missing),
        ("topic", "alter-config", missing, "--set", "retention.ms=1"),
        ("topic", "add-partitions", missing, "--to", "3"),
        ("consume", missing, "--max-messages", "1"),
    ):
        assert fails(broker, *args) == f"error: topic '{missing}' not found", args
    assert fails(broker, "produce", missing, stdin=b"x\n") == f"error: topic '{missing}' not found"

    topic = unique("topic")
    create_topic(broker, topic, 2)
    assert fails(broker, "topic", "create", topic) == f"error: topic '{topic}' already exists"
    assert "already has 2 partitions" in fails(broker, "topic", "add-partitions", topic, "--to", "2", code=2)
    assert fails(broker, "consume", topic, "--partition", "7", "-n", "1") == (
        f"error: topic '{topic}' has no partition 7 (it has 2)"
    )
    assert fails(broker, "produce", topic, "--partition", "2", stdin=b"x\n") == (
        f"error: topic '{topic}' has no partition 2 (it has 2)"
    )
    # Bad arguments are usage errors, exit 2, as clap reports them.
    assert "--partitions" in fails(broker, "topic", "create", unique("zero"), "--partitions", "0", code=2)
    assert "offset must be earliest, latest" in fails(broker, "consume", topic, "--offset", "soon", code=2)
    assert "unknown placeholder %x" in fails(broker, "consume", topic, "--format", "%x", code=2)
    assert "KEY=VALUE" in fails(broker, "topic", "create", unique("t"), "--config", "novalue", code=2)


def test_an_unreachable_broker_is_named_with_what_to_check() -> None:
    port = free_port()  # nothing listens there
    started = time.monotonic()
    line = fails(None, "topic", "list", "--bootstrap-server", f"127.0.0.1:{port}")
    assert line.startswith(f"error: broker unreachable at 127.0.0.1:{port}: is `spindle serve` running?"), line
    assert time.monotonic() - started < GIVE_UP_S


def test_a_broker_that_never_answers_times_out() -> None:
    # Accepts connections (the backlog does) and never says a word.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        addr = "127.0.0.1:%d" % silent.getsockname()[1]
        started = time.monotonic()
        line = fails(None, "group", "list", "--bootstrap-server", addr, "--request-timeout-ms", "1000")
        took = time.monotonic() - started
    assert "timed out after 1000 ms" in line and addr in line, line
    assert took < GIVE_UP_S, f"gave up after {took:.1f}s"


# --- produce and consume ------------------------------------------------------------------------


def test_a_thousand_keyed_lines_come_back_where_java_clients_put_their_keys(broker: Broker, unique) -> None:
    topic = unique("topic")
    partitions = 3
    create_topic(broker, topic, partitions)
    lines = [f"key-{i % 37}:value-{i}" for i in range(1000)]

    produced = produce_lines(broker, topic, lines, "--key-separator", ":", "--verbose", "--output", "json")
    placed = [json.loads(line) for line in produced.stdout.splitlines()[:-1]]
    summary = json.loads(produced.stdout.splitlines()[-1])
    assert summary == {"topic": topic, "records": 1000, "failed": 0, "partitions": [0, 1, 2]}
    assert sorted(p["line"] for p in placed) == list(range(1, 1001))

    out = consume(broker, topic, "--from-beginning", "--max-messages", "1000", "--format", r"%k %p %o %v\n")
    assert len(out) == 1000
    seen: dict[str, set[int]] = defaultdict(set)
    by_partition: dict[int, list[int]] = defaultdict(list)
    values = set()
    for line in out:
        key, partition, offset, value = line.split(" ")
        seen[key].add(int(partition))
        by_partition[int(partition)].append(int(offset))
        values.add(value)
        # The key hash decides, as in Java clients and librdkafka's murmur2_random.
        assert int(partition) == java_partition(key.encode(), partitions), line
    assert values == {f"value-{i}" for i in range(1000)}
    assert all(len(ps) == 1 for ps in seen.values()), "a key landed on two partitions"
    for partition, offsets in by_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), f"partition {partition} offsets have gaps"
    # --verbose told the truth: line n is at the partition and offset it said.
    where = {(p["partition"], p["offset"]): p["line"] for p in placed}
    for line in out:
        key, partition, offset, value = line.split(" ")
        assert lines[where[(int(partition), int(offset))] - 1] == f"{key}:{value}"

    # And a Java-compatible client puts the same keys in the same places.
    prod = clients.producer(broker.bootstrap, partitioner="murmur2_random")
    acked = clients.produce_acked(prod, topic, [(k.encode(), b"check") for k in seen])
    assert {r.key.decode(): {r.partition} for r in acked if r.key} == dict(seen)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_headers_partition_and_compression_reach_the_consumer(broker: Broker, unique, codec: str) -> None:
    topic = unique("topic")
    create_topic(broker, topic, 2)
    lines = [f"line {i} " + "x" * (i % 50) for i in range(200)]
    produced = produce_lines(
        broker, topic, lines, "--partition", "1", "--header", "src=cli", "--header", "n=1", "-z", codec, "--acks", "1"
    )
    assert f"produced 200 records to topic '{topic}' (partitions: 1)" in produced.stderr

    out = consume(broker, topic, "-p", "1", "-o", "earliest", "-n", "200", "-f", r"%p|%h|%v\n")
    assert out == [f"1|src=cli,n=1|{line}" for line in lines]
    assert clients.watermarks(broker.bootstrap, topic, [0, 1]) == {0: (0, 0), 1: (0, 200)}


def test_acks_zero_and_unkeyed_records(broker: Broker, unique) -> None:
    topic = unique("topic")
    create_topic(broker, topic, 3)
    produced = produce_lines(broker, topic, [f"u{i}" for i in range(300)], "--acks", "0", "--verbose")
    assert "(acks=0: no offset)" in produced.stdout
    # Unacknowledged: wait until the broker has them all.
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while sum(high for _, high in clients.watermarks(broker.bootstrap, topic, [0, 1, 2]).values()) < 300:
        assert time.monotonic() < deadline, "acks=0 records never all arrived"
        time.sleep(0.1)
    out = consume(broker, topic, "--from-beginning", "-n", "300")
    assert sorted(out) == sorted(f"u{i}" for i in range(300))


def test_consumed_records_of_a_log_append_time_topic_show_the_brokers_time(broker: Broker, unique) -> None:
    topic = unique("topic")
    ok(broker, "topic", "create", topic, "--partitions", "1", "--config", "message.timestamp.type=LogAppendTime")
    start_ms = int(time.time() * 1000)
    # Producer timestamps from 2001: the broker's append time replaces them.
    clients.produce_acked(
        clients.producer(broker.bootstrap), topic, [(None, b"v%d" % i) for i in range(5)], timestamp_ms=1_000_000_000_000
    )
    end_ms = int(time.time() * 1000)
    out = consume(broker, topic, "--from-beginning", "-n", "5", "--format", r"%T %v\n")
    assert [line.split()[1] for line in out] == [f"v{i}" for i in range(5)]
    for line in out:
        assert start_ms - 1000 <= int(line.split()[0]) <= end_ms + 1000, line


def test_overlong_lines_fail_alone_and_the_summary_counts_them(broker: Broker, unique) -> None:
    topic = unique("topic")
    create_topic(broker, topic, 1)
    result = spindle(broker, "produce", topic, "--line-bytes-max", "10", stdin=b"short\n" + b"x" * 50 + b"\nfine\n")

    assert result.returncode == 1
    assert "error: line 2 is longer than --line-bytes-max (10 bytes): not produced" in result.stderr
    assert f"produced 2 records to topic '{topic}' (partitions: 0); 1 failed" in result.stderr
    assert result.stderr.strip().endswith("error: 1 of 3 records were not produced"), result.stderr
    assert consume(broker, topic, "--from-beginning", "-n", "2") == ["short", "fine"]


def test_offsets_count_back_from_the_end_and_json_keeps_nulls(broker: Broker, unique) -> None:
    topic = unique("topic")
    create_topic(broker, topic, 2)
    for partition in (0, 1):
        produce_lines(broker, topic, [f"p{partition}-{i}" for i in range(10)], "--partition", str(partition))

    last = consume(broker, topic, "--offset", "-3", "-n", "6", "-f", r"%p %o\n")
    assert sorted(last) == ["0 7", "0 8", "0 9", "1 7", "1 8", "1 9"]
    assert consume(broker, topic, "-p", "1", "--offset", "4", "-n", "2") == ["p1-4", "p1-5"]

    records = [json.loads(line) for line in consume(broker, topic, "-p", "0", "-o", "9", "-n", "1", "--output", "json")]
    assert len(records) == 1
    record = records[0]
    assert {k: record[k] for k in ("topic", "partition", "offset", "key", "value", "headers")} == {
        "topic": topic,
        "partition": 0,
        "offset": 9,
        "key": None,
        "value": "p0-9",
        "headers": [],
    }
    assert abs(record["timestamp"] - time.time() * 1000) < 600_000


@contextmanager
def running(broker: Broker, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """A CLI process left running (a following consumer); killed if the test did not end it."""
    env = dict(os.environ, SPINDLE_BROKERS=broker.bootstrap)
    env.pop("RUST_LOG", None)
    proc = subprocess.Popen(
        [str(SPINDLE_BIN), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class LineReader:
    """Lines of a running process's stdout, read without blocking past a deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.stdout = proc.stdout
        self.buffer = b""
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.stdout, selectors.EVENT_READ)

    def read(self, count: int, timeout_s: float) -> list[str]:
        deadline = time.monotonic() + timeout_s
        while self.buffer.count(b"\n") < count:
            left = deadline - time.monotonic()
            assert left > 0, f"wanted {count} lines, have {self.buffer!r}"
            if self.selector.select(left):
                chunk = os.read(self.stdout.fileno(), 65536)
                assert chunk, f"stdout closed after {self.buffer!r}"
                self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n", count)
        return [line.decode() for line in lines]


def interrupt(proc: subprocess.Popen[bytes]) -> tuple[int, str]:
    """Ctrl-C: the process must exit by itself, quickly; returns its exit code and stderr."""
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=GIVE_UP_S)
    assert proc.stderr is not None
    return code, proc.stderr.read().decode(errors="replace")


def test_a_following_consumer_prints_new_records_and_exits_0_on_ctrl_c(broker: Broker, unique) -> None:
    topic = unique("topic")
    create_topic(broker, topic, 2)
    produce_lines(broker, topic, ["old"])
    with running(broker, "consume", topic, "-f", r"%v\n") as proc:
        reader = LineReader(proc)
        # It starts at the end: wait until it is there, then produce.
        deadline = time.monotonic() + RUN_TIMEOUT_S
        got: list[str] = []
        while not got:
            assert time.monotonic() < deadline, "the consumer never printed a new record"
            produce_lines(broker, topic, ["new"])
            got = reader.read(1, 5.0) if _has_line(reader, 2.0) else []
        assert got == ["new"]
        code, stderr = interrupt(proc)
    assert code == 0, stderr
    assert stderr == "", stderr


def _has_line(reader: LineReader, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while b"\n" not in reader.buffer and time.monotonic() < deadline:
        if reader.selector.select(max(0.0, deadline - time.monotonic())):
            chunk = os.read(reader.stdout.fileno(), 65536)
            if not chunk:
                break
            reader.buffer += chunk
    return b"\n" in reader.buffer


# --- groups -------------------------------------------------------------------------------------


def describe_group(broker: Broker, group: str) -> dict:
    described = ok_json(broker, "group", "describe", group)
    assert isinstance(described, dict)
    return described


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as confluent-kafka reads them (-1001 for none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def test_group_lag_reset_and_consume_again(broker: Broker, unique) -> None:
    topic, group = unique("topic"), unique("group")
    create_topic(broker, topic, 2)
    produce_lines(broker, topic, [f"k{i % 10}={i}" for i in range(1000)], "-K", "=")

    # Offsets at the start, before anyone consumes: the lag is everything.
    reset = ok_json(broker, "group", "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert reset["partitions"] == [
        {"partition": 0, "old_offset": None, "new_offset": 0},
        {"partition": 1, "old_offset": None, "new_offset": 0},
    ]
    before = describe_group(broker, group)
    assert before["total_lag"] == 1000 and before["members"] == []
    assert sum(p["log_end_offset"] for p in before["partitions"]) == 1000

    first = consume(broker, topic, "--group", group, "--max-messages", "400", "-f", r"%p %o\n")
    assert len(first) == 400
    middle = describe_group(broker, group)
    assert middle["total_lag"] == 600, middle
    assert middle["members"] == [], "the consumer left the group on its way out"
    assert committed(broker.bootstrap, group, topic, 2) == {
        p["partition"]: p["committed_offset"] for p in middle["partitions"]
    }

    rest = consume(broker, topic, "--group", group, "--max-messages", "600", "-f", r"%p %o\n")
    assert len(rest) == 600
    assert not set(first) & set(rest), "records consumed twice across the two runs"
    after = describe_group(broker, group)
    assert after["total_lag"] == 0 and all(p["lag"] == 0 for p in after["partitions"]), after
    text = ok(broker, "group", "describe", group)
    assert "TOTAL-LAG  0\n" in text and "CURRENT-OFFSET" in text, text

    assert {row["GROUP"]: row["TYPE"] for row in table(ok(broker, "group", "list"))}.get(group) == "consumer"

    # Back to the start: everything again.
    again = ok(broker, "group", "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert [row["NEW-OFFSET"] for row in table(again)] == ["0", "0"]
    assert describe_group(broker, group)["total_lag"] == 1000
    replay = consume(broker, topic, "--group", group, "--max-messages", "1000", "-f", r"%p %o\n")
    assert sorted(replay) == sorted(first + rest)


def test_reset_to_latest_offset_and_time(broker: Broker, unique) -> None:
    topic, group = unique("topic"), unique("group")
    create_topic(broker, topic, 1)
    produce_lines(broker, topic, [f"a{i}" for i in range(5)])
    time.sleep(0.05)
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    produce_lines(broker, topic, [f"b{i}" for i in range(5)])

    def reset_to(*args: str) -> int:
        result = ok_json(broker, "group", "reset-offsets", group, "--topic", topic, *args)
        [partition] = result["partitions"]
        return partition["new_offset"]

    assert reset_to("--to-latest") == 10
    assert reset_to("--to-offset", "3") == 3
    assert reset_to("--to-offset", "99") == 10, "brought inside the log"
    assert reset_to("--to-time", str(middle_ms)) == 5
    assert consume(broker, topic, "-g", group, "-n", "5") == [f"b{i}" for i in range(5)]
    dry = ok(broker, "group", "reset-offsets", group, "--topic", topic, "--to-earliest", "--dry-run")
    assert "dry run" in dry and committed(broker.bootstrap, group, topic, 1) == {0: 10}


def wait_for_members(broker: Broker, group: str, count: int) -> dict:
    deadline = time.monotonic() + GROUP_SETTLE_S
    while True:
        described = describe_group(broker, group) if group_exists(broker, group) else {}
        if described.get("state") == "Stable" and len(described.get("members", [])) == count:
            return described
        assert time.monotonic() < deadline, f"group never had {count} stable members: {described}"
        time.sleep(0.2)


def group_exists(broker: Broker, group: str) -> bool:
    return spindle(broker, "group", "describe", group, "--output", "json").returncode == 0


def test_groups_with_members_refuse_resets_and_deletion(broker: Broker, unique) -> None:
    topic, group = unique("topic"), unique("group")
    create_topic(broker, topic, 2)
    with running(broker, "consume", topic, "--group", group) as proc:
        described = wait_for_members(broker, group, 1)
        [member] = described["members"]
        assert member["client_id"] == "spindle-cli"
        assert member["assignment"] == {topic: [0, 1]}
        assert "range" in described["protocol"]

        not_empty = f"error: group '{group}' is not empty: stop its consumers first"
        assert fails(broker, "group", "reset-offsets", group, "--topic", topic, "--to-earliest") == not_empty
        assert fails(broker, "group", "delete", group) == not_empty

        code, stderr = interrupt(proc)
        assert code == 0, stderr
    # It left: no waiting for a session timeout.
    after = describe_group(broker, group)
    assert after["members"] == [] and after["state"] == "Empty", after

    ok(broker, "group", "delete", group)
    assert group not in {g["group"] for g in ok_json(broker, "group", "list")}
    assert fails(broker, "group", "describe", group) == f"error: group '{group}' not found"
    assert fails(broker, "group", "delete", group) == f"error: group '{group}' not found"


def test_two_cli_consumers_and_a_java_compatible_one_share_a_group(broker: Broker, unique) -> None:
    topic, group = unique("topic"), unique("group")
    create_topic(broker, topic, 6)
    with (
        running(broker, "consume", topic, "-g", group, "--from-beginning", "-f", r"%p %o\n") as first,
        running(broker, "consume", topic, "-g", group, "--from-beginning", "--assignor", "roundrobin",
                "-f", r"%p %o\n") as second,
    ):
        wait_for_members(broker, group, 2)
        # A librdkafka member joins too: the group rebalances, everyone rejoins, the partitions
        # are split three ways whoever leads.
        member = Member(broker.bootstrap, group, topic, session_timeout_ms=10_000)
        try:
            poll_until([member], lambda: member.assigned is not None and len(member.assigned) == 2,
                       GROUP_SETTLE_S, "the librdkafka member gets two partitions")
            described = wait_for_members(broker, group, 3)
            owned = Counter(p for m in described["members"] for p in m["assignment"].get(topic, []))
            assert owned == Counter(range(6)), described

            produce_lines(broker, topic, [f"k{i}:v{i}" for i in range(600)], "-K", ":")
            cli_lines: list[str] = []
            readers = [LineReader(first), LineReader(second)]
            deadline = time.monotonic() + GROUP_SETTLE_S
            while len(cli_lines) + len(member.records) < 600:
                assert time.monotonic() < deadline, f"have {len(cli_lines)} + {len(member.records)} of 600"
                member.poll(0.1)
                for reader in readers:
                    if _has_line(reader, 0.05):
                        cli_lines.extend(reader.read(reader.buffer.count(b"\n"), 1.0))
            positions = Counter(cli_lines) + Counter(f"{r.partition} {r.offset}" for r in member.records)
            assert len(positions) == 600 and set(positions.values()) == {1}, "a record went to two members"
        finally:
            member.close()
        for proc in (first, second):
            code, stderr = interrupt(proc)
            assert code == 0, stderr


def test_cluster_describe_lists_the_brokers_and_the_controller(broker: Broker) -> None:
    described = ok_json(broker, "cluster", "describe")

    [node] = described["brokers"]
    assert (node["host"], node["port"], node["controller"]) == ("127.0.0.1", broker.port, True)
    assert described["controller"] == node["node"]
    assert described["cluster_id"]
    text = ok(broker, "cluster", "describe")
    assert f"CONTROLLER  {node['node']}\n" in text and "127.0.0.1" in text, text


def test_cluster_elect_leaders_on_one_node_has_nothing_to_move(broker: Broker, unique) -> None:
    topic = unique("topic")
    create_topic(broker, topic, 2)

    # Every partition has its only replica as leader: named ones answer "not needed", and an
    # election of every partition lists none of them.
    assert ok_json(broker, "cluster", "elect-leaders", "--topic", topic) == [
        {"topic": topic, "partition": p, "result": "not needed", "message": None} for p in (0, 1)
    ]
    assert topic not in {e["topic"] for e in ok_json(broker, "cluster", "elect-leaders")}
    text = ok(broker, "cluster", "elect-leaders", "--topic", topic, "--partition", "1")
    assert text.split() == ["TOPIC", "PARTITION", "RESULT", "MESSAGE", topic, "1", "not", "needed", "-"], text

    assert fails(broker, "cluster", "elect-leaders", "--topic", unique("missing")).startswith("error: topic '")
    error = fails(broker, "cluster", "elect-leaders", "--topic", topic, "--partition", "7")
    assert error == "error: the election failed for 1 of 1 partitions", error
