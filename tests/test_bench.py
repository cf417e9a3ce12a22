"""spindle-bench against a real broker: its report (text, JSON, HdrHistogram files) tells the truth
about what it produced, a real client reads exactly that back, and a stopped broker is a clear
failure."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import clients
from conftest import REPO_ROOT, Broker

BENCH_BIN = Path(os.environ.get("SPINDLE_BENCH_BIN", REPO_ROOT / "target" / "release" / "spindle-bench"))
RUN_TIMEOUT_S = 120.0
PERCENTILES = {"count", "mean", "p50", "p90", "p99", "p99_9", "p99_99", "max"}


def bench(broker: Broker | str, *args: str) -> subprocess.CompletedProcess[str]:
    if not BENCH_BIN.is_file():
        raise AssertionError(f"{BENCH_BIN} does not exist: run `cargo build --release --bins` first")
    bootstrap = broker if isinstance(broker, str) else broker.bootstrap
    return subprocess.run(
        [str(BENCH_BIN), "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip


def run_json(broker: Broker, tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "report.json"
    run = bench(broker, "--json", str(out), *args)
    assert run.returncode == 0, f"spindle-bench exited with {run.returncode}:\n{run.stdout}{run.stderr}"
    return json.loads(out.read_text())


def murmur2_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner for keyed records (Utils.murmur2, then toPositive)."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(key)) & mask
    whole = len(key) - len(key) % 4
    for i in range(0, whole, 4):
        k = (int.from_bytes(key[i : i + 4], "little") * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = key[whole:]
    if len(tail) >= 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h = ((h ^ tail[0]) * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


def test_a_short_run_reports_what_a_consumer_then_reads(broker: Broker, unique, tmp_path: Path) -> None:
    topic = unique("t")
    hgrm = tmp_path / "latency.hgrm"
    records, record_size, partitions = 3000, 100, 3
    report = run_json(
        broker, tmp_path,
        "--topic", topic, "--partitions", str(partitions), "--records", str(records),
        "--record-size", str(record_size), "--batch-size", "4096", "--producers", "2", "--consumers", "2",
        "--keys", "50", "--compression", "lz4", "--acks", "all", "--hgrm", str(hgrm),
    )  # fmt: skip

    produce, consume = report["produce"], report["consume"]
    assert report["errors"] == 0 and report["error_counts"] == {} and report["fatal"] is None
    assert report["config"]["topic"] == topic and report["config"]["partitions"] == partitions
    assert produce["records"] == records and consume["records"] == records
    # Keys are "k0".."k49" (2 or 3 bytes) before each value.
    assert records * (record_size + 2) < produce["payload_bytes"] <= records * (record_size + 3)
    assert consume["payload_bytes"] == produce["payload_bytes"]
    for flow, latency in ((produce, "ack_latency_ms"), (consume, "e2e_latency_ms")):
        assert flow["records_per_s"] > 0 and flow["mb_per_s"] > 0 and flow["mib_per_s"] > 0
        assert flow["seconds"] > 0
        assert set(flow[latency]) == PERCENTILES
        p = flow[latency]
        assert p["count"] == records
        assert 0 < p["p50"] <= p["p90"] <= p["p99"] <= p["p99_9"] <= p["p99_99"] <= p["max"]

    hgrm_text = hgrm.read_text()
    assert hgrm_text.splitlines()[0].split() == ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"]
    assert f"Total count    = {records:12d}]" in hgrm_text
    assert (tmp_path / "latency.e2e.hgrm").read_text().startswith(hgrm_text.splitlines()[0])

    # A real client finds exactly those records, each key in the partition Java's client picks.
    read = clients.read_all(broker.bootstrap, topic)
    got = [r for recs in read.values() for r in recs]
    assert len(got) == records
    assert {r.key for r in got} == {f"k{i}".encode() for i in range(50)}
    for r in got:
        assert r.key is not None and r.value is not None and len(r.value) == record_size
        assert r.partition == murmur2_partition(r.key, partitions), r


def test_a_fixed_rate_run_measures_after_the_warmup(broker: Broker, unique, tmp_path: Path) -> None:
    # 1000 records/s for 0.5 s of warmup and 2 s measured: records are due at k ms, and those
    # due from 500 ms on (2000 of them) count.
    report = run_json(
        broker, tmp_path,
        "--topic", unique("t"), "--partitions", "2", "--rate", "1000", "--warmup", "0.5", "--duration", "2",
        "--record-size", "64", "--consumers", "1", "--linger-ms", "2",
    )  # fmt: skip
    produce, consume = report["produce"], report["consume"]
    assert report["errors"] == 0
    assert produce["records"] == 2000
    assert 800 < produce["records_per_s"] < 1100
    assert produce["ack_latency_ms"]["count"] == 2000
    # The consumer starts at the end and reads all 2500 records; 2000 of them after the warmup.
    assert consume["e2e_latency_ms"]["count"] == 2000


def test_a_stopped_broker_is_a_clear_failure(own_broker: Broker, tmp_path: Path) -> None:
    own_broker.stop_clean()
    out = tmp_path / "report.json"
    run = bench(own_broker, "--topic", "never", "--duration", "1", "--json", str(out))
    assert run.returncode == 1, run
    assert f"broker unreachable at {own_broker.bootstrap}" in run.stderr
    assert not out.exists()


@pytest.mark.parametrize("args", [["--producers", "0", "--consumers", "0"], ["--rate", "0"], ["--acks", "2"]])
def test_nonsense_options_are_refused_before_connecting(args: list[str]) -> None:
    run = bench("127.0.0.1:1", *args)
    assert run.returncode == 1, run
    assert "unreachable" not in run.stderr, run.stderr
