"""spindle's command-line flags that a client can observe."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

import clients
import kafka_wire
from conftest import SPINDLE_BIN, Broker, free_port

pytestmark = pytest.mark.spindle_only("spindle's command line")


def test_advertised_address_is_what_metadata_reports(broker_factory, unique) -> None:
    broker: Broker = broker_factory(advertise_host="localhost")

    with kafka_wire.Connection(broker.host, broker.port) as conn:
        meta = conn.metadata(None)

    assert [(b.host, b.port) for b in meta.brokers] == [("localhost", broker.port)]
    # Clients follow the advertised address, so it must work too.
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1)
    [acked] = clients.produce_acked(clients.producer(f"localhost:{broker.port}"), topic, [(b"k", b"v")])
    assert acked.offset == 0


def test_node_id_is_the_broker_and_controller_id(broker_factory) -> None:
    broker: Broker = broker_factory(node_id=7)

    with kafka_wire.Connection(broker.host, broker.port) as conn:
        meta = conn.metadata(None)

    assert [b.node_id for b in meta.brokers] == [7]
    assert meta.controller_id == 7


def test_zero_cores_is_refused_with_a_clear_error(tmp_path) -> None:
    result = subprocess.run(
        [
            str(SPINDLE_BIN),
            "serve",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--data-dir",
            str(tmp_path),
            "--cores",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert result.returncode != 0
    assert "cores" in result.stderr


def test_a_relative_data_dir_works_as_the_default_does(tmp_path) -> None:
    # The README's command runs with the default ./data: relative to where it is started.
    port = free_port()
    process = subprocess.Popen(
        [str(SPINDLE_BIN), "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", "data"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with kafka_wire.Connection("127.0.0.1", port) as conn:
                    conn.metadata(None)
                break
            except OSError:
                assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
                assert time.monotonic() < deadline, "the broker did not start"
                time.sleep(0.1)
        topic = "relative"
        clients.create_topic(f"127.0.0.1:{port}", topic, 1)
        [acked] = clients.produce_acked(clients.producer(f"127.0.0.1:{port}"), topic, [(b"k", b"v")])
        assert acked.offset == 0
        assert (tmp_path / "data" / f"{topic}-0").is_dir()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_another_nodes_data_dir_is_refused_and_left_as_it_was(broker_factory, unique) -> None:
    broker: Broker = broker_factory(node_id=3)
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1)
    broker.stop_clean()
    metadata = broker.data_dir / "meta" / "metadata.fb"
    before = metadata.read_bytes()

    result = subprocess.run(
        [
            str(SPINDLE_BIN),
            "serve",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--data-dir",
            str(broker.data_dir),
            "--node-id",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert result.returncode != 0
    assert "belongs to node 3" in result.stderr and "--node-id 3" in result.stderr, result.stderr
    assert metadata.read_bytes() == before


def test_rack_and_node_id_show_in_cluster_describe(broker_factory) -> None:
    broker: Broker = broker_factory(node_id=5, extra_args=("--rack", "rack-b"))

    result = subprocess.run(
        [str(SPINDLE_BIN), "cluster", "describe", "-b", broker.bootstrap, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    described = json.loads(result.stdout)
    assert described["brokers"] == [
        {"node": 5, "host": "127.0.0.1", "port": broker.port, "rack": "rack-b", "fenced": False, "controller": True}
    ]
    # A node of its own is a quorum of one, and leads it.
    quorum = described["quorum"]
    assert quorum["leader"] == 5 and [v["node"] for v in quorum["voters"]] == [5], quorum
    assert quorum["voters"][0]["state"] == "leader", quorum


def test_a_second_broker_on_a_port_in_use_is_refused(broker_factory, unique, tmp_path) -> None:
    # The shards share their port (SO_REUSEPORT); without a check a second process made the same
    # way would bind beside the first and take some of its connections.
    broker: Broker = broker_factory()
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1)

    result = subprocess.run(
        [str(SPINDLE_BIN), "serve", "--listen", broker.bootstrap, "--data-dir", str(tmp_path / "other")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert result.returncode != 0
    assert f"listening on {broker.bootstrap}" in result.stderr and "in use" in result.stderr, result.stderr
    # Every new connection still reaches the first broker, which knows the topic.
    for _ in range(8):
        assert topic in clients.admin(broker.bootstrap).list_topics(timeout=10).topics
