"""The Apache Kafka Java client (kafka-clients 4.x, tests/java) against the broker.

Each scenario is a run of tests/java's Main against the shared broker; the Java side asserts
what it read back (records, offsets, settings, group state) and fails on the first difference.
"""

from __future__ import annotations

import pytest

import jvm
import kafka_wire
from conftest import Broker

API_DELETE_RECORDS = 21


def run_scenario(broker: Broker, unique, scenario: str, arg: str | None = None) -> str:
    """Runs one scenario; returns its stdout, which ends with its PASS line."""
    args = [scenario, broker.bootstrap, unique("java")] + ([arg] if arg else [])
    result = jvm.run_java(jvm.java_client_tests_classpath(), "spindle.javatest.Main", *args)
    if result.returncode != 0:
        pytest.fail(f"Java scenario {scenario} {arg or ''} exited {result.returncode}:\n"
                    f"{result.stdout[-3000:]}\n{result.stderr[-8000:]}")
    lines = result.stdout.strip().splitlines()
    assert lines and lines[-1] == f"PASS {scenario}" + (f" {arg}" if arg else ""), result.stdout
    return result.stdout


def test_java_producer_defaults_idempotent_acks_all(broker: Broker, unique) -> None:
    run_scenario(broker, unique, "produce-defaults")


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_java_producer_codec(broker: Broker, unique, codec: str) -> None:
    run_scenario(broker, unique, "produce-codec", codec)


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_java_consumer_group_assignor(broker: Broker, unique, assignor: str) -> None:
    run_scenario(broker, unique, "group-assignor", assignor)


def test_java_consumer_manual_assign_seek_offsets_for_times_commit(broker: Broker, unique) -> None:
    run_scenario(broker, unique, "manual-assign")


def test_java_consumer_resumes_at_its_commit_after_a_restart(broker: Broker, unique) -> None:
    run_scenario(broker, unique, "commit-restart")


def test_java_admin_topics(broker: Broker, unique) -> None:
    run_scenario(broker, unique, "admin-topics")


def test_java_admin_describe_cluster_and_list_offsets(broker: Broker, unique) -> None:
    run_scenario(broker, unique, "admin-cluster-offsets")


def test_java_admin_describe_and_alter_configs(broker: Broker, unique) -> None:
    run_scenario(broker, unique, "admin-configs")


def test_java_admin_consumer_groups(broker: Broker, unique) -> None:
    run_scenario(broker, unique, "admin-groups")


def test_java_admin_delete_records_or_a_clear_error(broker: Broker, unique) -> None:
    out = run_scenario(broker, unique, "admin-delete-records")
    with kafka_wire.Connection(broker.host, broker.port) as conn:
        supported = API_DELETE_RECORDS in conn.api_versions()
    # The client must do what the broker's ApiVersions promise: delete, or refuse by name.
    expected = "DELETE_RECORDS deleted" if supported else "DELETE_RECORDS unsupported: "
    assert expected in out, out
