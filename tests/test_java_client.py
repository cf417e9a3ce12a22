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


# Each scenario of tests/java (spindle.javatest.Main) with its argument; the pytest id names both.
SCENARIOS = [
    ("produce-defaults", None),  # idempotent, acks=all, no transactions
    *[("produce-codec", codec) for codec in ("gzip", "snappy", "lz4", "zstd")],
    ("group-assignor", "range"),
    ("group-assignor", "cooperative-sticky"),
    ("manual-assign", None),  # seek, offsetsForTimes, commitSync, a new consumer at the commit
    ("commit-restart", None),  # a group member commits; the next one resumes there
    ("admin-topics", None),
    ("admin-cluster-offsets", None),
    ("admin-configs", None),
    ("admin-groups", None),
]


@pytest.mark.parametrize(
    ("scenario", "arg"), SCENARIOS, ids=[f"{s}-{a}" if a else s for s, a in SCENARIOS]
)
def test_java_client(broker: Broker, unique, scenario: str, arg: str | None) -> None:
    run_scenario(broker, unique, scenario, arg)


def test_java_admin_delete_records_or_a_clear_error(broker: Broker, unique) -> None:
    out = run_scenario(broker, unique, "admin-delete-records")
    with kafka_wire.Connection(broker.host, broker.port) as conn:
        supported = API_DELETE_RECORDS in conn.api_versions()
    # The client must do what the broker's ApiVersions promise: delete, or refuse by name.
    expected = "DELETE_RECORDS deleted" if supported else "DELETE_RECORDS unsupported: "
    assert expected in out, out
