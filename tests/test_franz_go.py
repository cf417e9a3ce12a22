"""franz-go's own integration tests (github.com/twmb/franz-go/pkg/kgo, the version
tests/franz-go/go.mod pins) against the broker, and our franz-go program (tests/franz-go).

The kgo test binary is built once (Go's build cache keeps it) and run once with KGO_SEEDS
pointing at the shared broker; each of its top-level tests is then a pytest test here, so each
result is listed. franz-go skips on its own what the broker does not advertise (KIP-848 groups,
share groups) and what needs SASL; we skip only what needs transactions (tests/README.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import clients
from conftest import BROKER_KIND, Broker

FRANZ_DIR = Path(__file__).resolve().parent / "franz-go"
KGO_PACKAGE = "github.com/twmb/franz-go/pkg/kgo"
BUILD_TIMEOUT_S = 900
RUN_TIMEOUT_S = 900

# Every kgo test that talks to a broker (the rest are unit tests of the client, checked as one).
PASS = [
    "TestAddRemovePartitions",
    "TestClient_Produce",
    "TestClient_ProduceLargeMessages",
    "TestConsumeMaxDecompressBatchBytes",
    "TestConsumeTopicRetrieval",
    "TestConsumeTopicRetrieval_Many",
    "TestDirectPartitionPurge",
    "TestGroupETL",
    "TestGroupSimple",
    "TestIssue1034",
    "TestIssue325",
    "TestIssue337",
    "TestIssue434",
    "TestIssue523",
    "TestIssue648",
    "TestIssue769",
    "TestIssue810",
    "TestIssue831",
    "TestIssue865",
    "TestIssueFetchLargerThanBrokerMaxReadBytes",
    "TestIssueProduceSyncManualPartitionNegativeDoesNotPanic",
    "TestPauseIssue489",
    "TestPauseIssueOct2023",
    "TestPing",
    "TestPooling",
    "TestUnknownGroupOffsetFetchPinned",
]
# Tests franz-go itself skips against this broker, and why: they must keep skipping (if one
# starts to run, the broker advertises something new and the test belongs in PASS).
SELF_SKIPPED = {
    "Test848RegexBrokerResolves": "KIP-848 consumer groups (ConsumerGroupHeartbeat) are not implemented",
    "TestShareGroup": "share groups (KIP-932) are not implemented",
    "TestShareGroupETL": "share groups (KIP-932) are not implemented",
    "TestShareGroupAckOnClose": "share groups (KIP-932) are not implemented",
    "TestShareGroupOffsetsAdmin": "share groups (KIP-932) are not implemented",
    "TestConsumeRegexShareSkipsInternal": "share groups (KIP-932) are not implemented",
    "TestSCRAMAuth": "needs a SASL/SCRAM listener (KGO_TEST_SCRAM_SEEDS)",
    "TestSCRAMAuthBadCredentials": "needs a SASL/SCRAM listener (KGO_TEST_SCRAM_SEEDS)",
    "TestOAuthAuth": "needs a SASL/OAUTHBEARER listener (KGO_TEST_OAUTH_SEEDS)",
    # Kafka 4.0 advertises Produce from v0 too (librdkafka needs it, net/src/versions.rs).
    "TestIssueProduceBrokerTooOldFailsRecords": "the broker advertises Produce v0-v2, as Kafka 4.0 does",
}
# Tests we do not run, and why (tests/README.md lists them too).
NOT_RUN = {
    "TestTxnEtl": "needs transactions, which Spindle does not implement",
    "TestConsumeRegex": "needs __consumer_offsets listed in Metadata as an internal topic; Spindle hides its"
    " offsets log from every API",
}
ENV = {
    "KGO_TEST_RF": "1",  # one broker
    "KGO_TEST_RECORDS": "20000",  # TestGroupETL's records (500,000 by default)
    "KGO_LOG_LEVEL": "none",
}


@dataclass
class KgoRun:
    results: dict[str, str] = field(default_factory=dict)  # top-level test -> pass/fail/skip
    output: dict[str, list[str]] = field(default_factory=dict)  # test (and subtests) -> its lines


def go() -> str:
    path = shutil.which("go")
    assert path is not None, "go is not installed (scripts/install-test-deps installs it)"
    return path


def module_dir() -> Path:
    """franz-go's source in the module cache, at the version go.mod pins (`go test` runs there)."""
    out = subprocess.run(
        [go(), "list", "-m", "-f", "{{.Dir}}", "github.com/twmb/franz-go"],
        cwd=FRANZ_DIR, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=True,
    ).stdout.strip()  # fmt: skip
    return Path(out)


@pytest.fixture(scope="session")
def kgo_run(shared_broker_process: Broker, tmp_path_factory: pytest.TempPathFactory) -> KgoRun:
    binary = tmp_path_factory.mktemp("kgo") / "kgo.test"
    built = subprocess.run(
        [go(), "test", "-c", "-o", str(binary), KGO_PACKAGE],
        cwd=FRANZ_DIR, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert built.returncode == 0, f"go test -c {KGO_PACKAGE} failed:\n{built.stderr[-4000:]}"
    skip = "^(" + "|".join(sorted(NOT_RUN)) + ")$"
    env = dict(os.environ, KGO_SEEDS=shared_broker_process.bootstrap, **ENV)
    ran = subprocess.run(
        [go(), "tool", "test2json", "-t", str(binary), "-test.v=test2json", f"-test.skip={skip}",
         f"-test.timeout={RUN_TIMEOUT_S - 30}s"],
        cwd=module_dir() / "pkg" / "kgo", env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
        check=False,
    )  # fmt: skip
    run = KgoRun()
    for line in ran.stdout.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        test = event.get("Test")
        if test is None:
            continue
        if event["Action"] == "output":
            run.output.setdefault(test.split("/")[0], []).append(event["Output"])
        elif event["Action"] in ("pass", "fail", "skip") and "/" not in test:
            run.results[test] = event["Action"]
    assert run.results, f"the kgo tests reported nothing (exit {ran.returncode}):\n{ran.stdout[-3000:]}{ran.stderr[-3000:]}"
    return run


def outcome(run: KgoRun, test: str) -> str:
    return run.results.get(test, "did not finish")


def log_of(run: KgoRun, test: str) -> str:
    return "".join(run.output.get(test, []))[-6000:]


@pytest.mark.timeout(BUILD_TIMEOUT_S + RUN_TIMEOUT_S)
@pytest.mark.parametrize("test", PASS)
def test_kgo(broker: Broker, kgo_run: KgoRun, test: str) -> None:
    assert outcome(kgo_run, test) == "pass", f"{test}: {outcome(kgo_run, test)}\n{log_of(kgo_run, test)}"


@pytest.mark.timeout(BUILD_TIMEOUT_S + RUN_TIMEOUT_S)
@pytest.mark.parametrize("test", sorted(SELF_SKIPPED))
def test_kgo_skips_by_itself(broker: Broker, kgo_run: KgoRun, test: str) -> None:
    if BROKER_KIND != "spindle":
        pytest.skip(f"{test} is about what spindle lacks: {SELF_SKIPPED[test]}")
    assert outcome(kgo_run, test) == "skip", f"{test} no longer skips: {outcome(kgo_run, test)}\n{log_of(kgo_run, test)}"
    pytest.skip(f"franz-go skips {test}: {SELF_SKIPPED[test]}")


@pytest.mark.parametrize("test", sorted(NOT_RUN))
def test_kgo_not_run(test: str) -> None:
    pytest.skip(f"{test}: {NOT_RUN[test]}")


@pytest.mark.timeout(BUILD_TIMEOUT_S + RUN_TIMEOUT_S)
def test_kgo_unit_tests(broker: Broker, kgo_run: KgoRun) -> None:
    """The rest of the package: the client's own unit tests, which must pass here too."""
    named = set(PASS) | set(SELF_SKIPPED) | set(NOT_RUN)
    others = {t: r for t, r in kgo_run.results.items() if t not in named}
    assert len(others) > 50, f"only {len(others)} unit tests ran"
    failed = sorted(t for t, r in others.items() if r != "pass")
    assert not failed, "\n".join(f"{t}: {others[t]}\n{log_of(kgo_run, t)}" for t in failed)


@pytest.fixture(scope="session")
def franzgo_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = tmp_path_factory.mktemp("franzgo") / "franzgo"
    built = subprocess.run(
        [go(), "build", "-o", str(binary), "."],
        cwd=FRANZ_DIR, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert built.returncode == 0, f"go build of tests/franz-go failed:\n{built.stderr[-4000:]}"
    return binary


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_franzgo_codec_produce_then_group_commit_and_resume(
    broker: Broker, unique, franzgo_program: Path, codec: str
) -> None:
    topic, group, records = unique("topic"), unique("group"), 3000
    ran = subprocess.run(
        [str(franzgo_program), "-brokers", broker.bootstrap, "-topic", topic, "-group", group, "-codec", codec,
         "-records", str(records)],
        capture_output=True, text=True, timeout=150, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, f"franzgo exited {ran.returncode}:\n{ran.stderr[-4000:]}"
    report = json.loads(ran.stdout)
    assert 0 < report["first_member"] < records
    produced = {(r["partition"], r["offset"], r["key"].encode(), r["value"].encode()) for r in report["produced"]}
    assert len(produced) == records
    # Another client finds every record where franz-go was told it is.
    read = clients.read_all(broker.bootstrap, topic)
    assert {(r.partition, r.offset, r.key, r.value) for rs in read.values() for r in rs} == produced
