"""Fixtures that run a real broker process for the end-to-end tests.

By default the broker is `target/release/spindle serve` with `--cores $SPINDLE_TEST_CORES`
(default 2). With SPINDLE_TEST_BROKER=noida the same tests run against noida-db, a reference
Kafka-compatible broker from PyPI, which is how the tests themselves are checked. Tests marked
`spindle_only` need something only spindle has (a command-line flag) and are skipped in noida mode
only; tests marked `noida_lacks` check a guarantee noida-db does not give (durability of
acknowledged writes across kill -9) and count as expected failures in noida mode only.

With SPINDLE_TEST_BROKER=kafka they run against Apache Kafka 4, started by `scripts/kafka run`
(one KRaft node in combined mode, settings as spindle's defaults; `scripts/kafka install` puts it in
a cache outside the repository). Kafka is the reference: `spindle_only` tests are skipped, and
`kafka_differs` tests check a deliberate, documented difference from Kafka (tests/README.md lists
them) and must fail on Kafka (strict expected failures in kafka mode only).

Each broker writes its stdout and stderr to a log file; when a test fails, the tail of the log of
every broker it used is attached to the failure report.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

import kafka_wire

REPO_ROOT = Path(__file__).resolve().parent.parent
KAFKA_SCRIPT = REPO_ROOT / "scripts" / "kafka"
BROKER_KIND = os.environ.get("SPINDLE_TEST_BROKER", "spindle")
SPINDLE_BIN = Path(os.environ.get("SPINDLE_BIN", REPO_ROOT / "target" / "release" / "spindle"))
TEST_CORES = int(os.environ.get("SPINDLE_TEST_CORES", "2"))

# A JVM needs longer to start than spindle does, more so on a loaded machine.
START_TIMEOUT_S = 120.0 if BROKER_KIND == "kafka" else 30.0
STOP_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 200

if BROKER_KIND not in ("spindle", "noida", "kafka"):
    raise pytest.UsageError(f"SPINDLE_TEST_BROKER must be 'spindle', 'noida' or 'kafka', not {BROKER_KIND!r}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "spindle_only(reason): needs a spindle feature; skipped when SPINDLE_TEST_BROKER is noida or kafka",
    )
    config.addinivalue_line(
        "markers",
        "noida_lacks(reason): checks a guarantee noida-db does not give; expected to fail an assertion"
        " when SPINDLE_TEST_BROKER=noida",
    )
    config.addinivalue_line(
        "markers",
        "kafka_differs(reason): checks where spindle deliberately differs from Apache Kafka (listed in"
        " tests/README.md); a strict expected failure when SPINDLE_TEST_BROKER=kafka",
    )


def pytest_report_header(config: pytest.Config) -> str:
    if BROKER_KIND == "noida":
        return "broker: noida-db (reference broker; spindle_only tests are skipped)"
    if BROKER_KIND == "kafka":
        return "broker: Apache Kafka via scripts/kafka (reference broker; spindle_only tests are skipped)"
    return f"broker: {SPINDLE_BIN} --cores {TEST_CORES}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if BROKER_KIND == "spindle":
        return
    for item in items:
        marker = item.get_closest_marker("spindle_only")
        if marker is not None:
            reason = marker.args[0] if marker.args else "needs spindle"
            item.add_marker(pytest.mark.skip(reason=f"{BROKER_KIND} mode: {reason}"))
        marker = item.get_closest_marker("kafka_differs")
        if marker is not None and BROKER_KIND == "kafka":
            # Strict: once Kafka passes it, the difference is gone and the marker must go too.
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
            assert reason, f"{item.nodeid}: kafka_differs needs a reason"
            item.add_marker(pytest.mark.xfail(reason=f"kafka mode: {reason}", strict=True))
        marker = item.get_closest_marker("noida_lacks")
        if marker is not None and BROKER_KIND == "noida":
            # Runs anyway, to show the test catches the missing guarantee; only a failed
            # assertion counts as the expected failure, any other error is still a test bug.
            reason = marker.args[0] if marker.args else "noida-db lacks this"
            item.add_marker(pytest.mark.xfail(reason=f"noida mode: {reason}", raises=AssertionError, strict=False))


# Each shard's journal is allocated whole (256 MiB by default): pytest keeps the temporary
# directories of its last three runs, and with the default the brokers' data there took 24 GB a
# run. Tests that care about its size give their own.
TEST_JOURNAL_BYTES = 16 << 20


def journal_args(extra_args: tuple[str, ...]) -> list[str]:
    """`--journal-bytes` for a test broker, unless `extra_args` sets it."""
    return [] if "--journal-bytes" in extra_args else ["--journal-bytes", str(TEST_JOURNAL_BYTES)]


@dataclass(frozen=True)
class BrokerOptions:
    """Spindle flags beyond the ones every broker gets. None leaves spindle's default."""

    auto_create_topics: bool | None = None
    default_partitions: int | None = None
    advertise_host: str | None = None  # advertised as advertise_host:<the broker's port>
    node_id: int | None = None
    extra_args: tuple[str, ...] = ()  # any other spindle flags, as given

    def spindle_args(self, port: int) -> list[str]:
        args = journal_args(self.extra_args)
        if self.auto_create_topics is not None:
            args += ["--auto-create-topics", "true" if self.auto_create_topics else "false"]
        if self.default_partitions is not None:
            args += ["--default-partitions", str(self.default_partitions)]
        if self.advertise_host is not None:
            args += ["--advertise", f"{self.advertise_host}:{port}"]
        if self.node_id is not None:
            args += ["--node-id", str(self.node_id)]
        return args + list(self.extra_args)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_exit_code(sig: signal.Signals) -> int:
    """What a broker exits with after shutting down cleanly on `sig`.

    Spindle and noida-db exit 0; a JVM (Apache Kafka) exits 128 + the signal once its shutdown
    hooks, which shut Kafka down, have run.
    """
    return 128 + sig if BROKER_KIND == "kafka" else 0


def noida_binary() -> Path:
    # The `noida-db` console script is a Python wrapper that runs this binary as a child: signals
    # sent to the wrapper would not reach the broker, so the harness runs the binary itself.
    return Path(str(files("noida_db").joinpath("noida-db")))


@dataclass
class Broker:
    """One broker process on a fixed port and data directory, which survive restarts."""

    name: str
    port: int
    data_dir: Path
    log_path: Path
    options: BrokerOptions = field(default_factory=BrokerOptions)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        if BROKER_KIND != "spindle" and self.options != BrokerOptions():
            raise AssertionError("broker options need spindle: mark the test spindle_only")
        if BROKER_KIND == "kafka":
            # `run` formats the storage on first use and exec's the JVM: signals reach Kafka itself.
            return [str(KAFKA_SCRIPT), "run", "--port", str(self.port), "--dir", str(self.data_dir)]
        if BROKER_KIND == "noida":
            return [
                str(noida_binary()),
                "start",
                "--only",
                "kafka",
                "--kafka-port",
                str(self.port),
                "--host",
                self.host,
                "--data-dir",
                str(self.data_dir),
            ]
        if not SPINDLE_BIN.is_file():
            raise AssertionError(f"{SPINDLE_BIN} does not exist: run `cargo build --release --bins` first")
        return [
            str(SPINDLE_BIN),
            "serve",
            "--listen",
            self.bootstrap,
            "--data-dir",
            str(self.data_dir),
            "--cores",
            str(TEST_CORES),
            *self.options.spindle_args(self.port),
        ]

    def start(self) -> None:
        self.spawn()
        self.wait_serving()

    def spawn(self) -> None:
        """Starts the process without waiting for it to serve (a cluster's nodes start together)."""
        assert self.process is None or self.process.poll() is not None, "broker already running"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(self.command())}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
            )

    def wait_serving(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if not self.alive():
                raise AssertionError(f"broker exited with {self.returncode()} while starting")
            try:
                kafka_wire.wait_until_serving(self.host, self.port, min(deadline, time.monotonic() + 1.0))
                return
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self) -> int:
        """SIGTERM, then wait for a clean exit; returns the exit code (the caller asserts it)."""
        assert self.process is not None and self.alive(), "broker not running"
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"broker did not exit within {STOP_TIMEOUT_S}s of SIGTERM") from None

    def stop_clean(self) -> None:
        code = self.stop()
        expected = clean_exit_code(signal.SIGTERM)
        assert code == expected, f"broker exited with {code} after SIGTERM, expected {expected}"

    def kill9(self) -> None:
        assert self.process is not None and self.alive(), "broker not running"
        self.process.kill()
        code = self.process.wait()
        assert code == -signal.SIGKILL, f"broker exited with {code} before SIGKILL landed"

    def restart_after_sigterm(self) -> None:
        self.stop_clean()
        self.start()

    def restart_after_kill9(self) -> None:
        self.kill9()
        self.start()

    def ensure_stopped(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.kill()
            self.process.wait()

    def remove_data(self) -> None:
        """Deletes a stopped Kafka's data directory (spindle's stays for a failed test's post-mortem)."""
        assert not self.alive(), "broker still running"
        if BROKER_KIND == "kafka":
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


BROKERS_KEY = pytest.StashKey[list[Broker]]()


def record_broker_use(request: pytest.FixtureRequest, broker: Broker) -> None:
    request.node.stash.setdefault(BROKERS_KEY, []).append(broker)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report = yield
    if report.failed:
        for broker in item.stash.get(BROKERS_KEY, []):
            report.sections.append((f"broker {broker.name} log, last lines ({broker.log_path})", broker.log_tail()))
    return report


def new_broker(tmp: Path, name: str, options: BrokerOptions) -> Broker:
    return Broker(name=name, port=free_port(), data_dir=tmp / "data", log_path=tmp / "broker.log", options=options)


@pytest.fixture(scope="session")
def shared_broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    broker = new_broker(tmp_path_factory.mktemp("shared-broker"), "shared", BrokerOptions())
    broker.start()
    yield broker
    if broker.alive():
        broker.stop_clean()
    broker.remove_data()


@pytest.fixture
def broker(request: pytest.FixtureRequest, shared_broker_process: Broker) -> Iterator[Broker]:
    """The broker most tests share; each test uses its own topics and groups.

    A test that takes it down fails in teardown, and the next test gets a fresh start, so one
    crash shows up where it happened instead of failing every test after it.
    """
    if not shared_broker_process.alive():
        shared_broker_process.start()
    record_broker_use(request, shared_broker_process)
    yield shared_broker_process
    assert shared_broker_process.alive(), (
        f"the shared broker died during this test (exit code {shared_broker_process.returncode()})"
    )


@pytest.fixture
def broker_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """Starts brokers of the test's own, for tests that stop, kill or configure one."""
    started: list[Broker] = []

    def start(**options: Any) -> Broker:
        broker = new_broker(tmp_path / f"broker{len(started)}", f"own#{len(started)}", BrokerOptions(**options))
        started.append(broker)
        record_broker_use(request, broker)
        broker.start()
        return broker

    yield start
    # Every test that owns a broker also checks its clean shutdown.
    try:
        for broker in started:
            if broker.alive():
                broker.stop_clean()
    finally:
        for broker in started:
            broker.ensure_stopped()
            broker.remove_data()


@pytest.fixture
def own_broker(broker_factory: Callable[..., Broker]) -> Broker:
    return broker_factory()


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Names for topics and groups that no other test (or earlier run on the broker) uses."""
    base = request.node.name.split("[")[0].removeprefix("test_").replace("_", "-")[:40]

    def make(kind: str) -> str:
        return f"{base}-{kind}-{uuid.uuid4().hex[:8]}"

    return make


# kcat: Debian's build links Debian's librdkafka 2.0.2. The same kcat also runs on the current
# librdkafka that the confluent-kafka wheel bundles: librdkafka keeps its C ABI backwards
# compatible and the bundled library exports the same unversioned symbols under another SONAME,
# so a symlink named librdkafka.so.1 on LD_LIBRARY_PATH makes the dynamic loader pick it.


@dataclass(frozen=True)
class Kcat:
    label: str
    env: dict[str, str]
    librdkafka_version: str

    def run(
        self, *args: str, input: bytes | None = None, timeout_s: float = 30.0
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            ["kcat", *args], input=input, env=self.env, capture_output=True, timeout=timeout_s, check=False
        )


def kcat_librdkafka_version(env: dict[str, str]) -> str:
    out = subprocess.run(["kcat", "-V"], env=env, capture_output=True, text=True, timeout=10, check=True).stdout
    found = re.search(r"librdkafka (\d+\.\d+\.\d+)", out)
    assert found, f"kcat -V named no librdkafka version:\n{out}"
    return found.group(1)


def bundled_librdkafka() -> Path:
    import confluent_kafka

    package_dir = Path(confluent_kafka.__file__).resolve().parent
    candidates = sorted(glob.glob(str(package_dir.parent / "confluent_kafka.libs" / "librdkafka*.so*")))
    assert len(candidates) == 1, f"expected one bundled librdkafka next to {package_dir}, found {candidates}"
    return Path(candidates[0])


@pytest.fixture(scope="session")
def kcat_debian() -> Kcat:
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    version = kcat_librdkafka_version(env)
    return Kcat("debian-librdkafka", env, version)


@pytest.fixture(scope="session")
def kcat_current(tmp_path_factory: pytest.TempPathFactory) -> Kcat:
    import confluent_kafka

    lib_dir = tmp_path_factory.mktemp("librdkafka-current")
    (lib_dir / "librdkafka.so.1").symlink_to(bundled_librdkafka())
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib_dir))
    version = kcat_librdkafka_version(env)
    wanted = confluent_kafka.libversion()[0]
    assert version == wanted, f"kcat runs librdkafka {version}, not the bundled {wanted}"
    return Kcat("current-librdkafka", env, version)


@pytest.fixture(params=["kcat_debian", "kcat_current"])
def kcat(request: pytest.FixtureRequest) -> Kcat:
    return request.getfixturevalue(request.param)
