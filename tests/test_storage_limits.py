"""The broker within its disk budgets (issue 13): the free-space guard on a small filesystem, and a
topic of thousands of partitions that takes writes to every one and reads them back within the disk
bound. Spindle only: both use spindle's storage flags, and the first mounts a filesystem."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer

import clients
from clients import Record
from conftest import TEST_CORES, Broker, BrokerOptions, free_port, record_broker_use

pytestmark = pytest.mark.spindle_only("spindle's storage flags")

IMAGE_BYTES = 160 << 20
MIN_FREE_BYTES = 24 << 20
RECORD_BYTES = 32 << 10


def du_bytes(path: Path) -> int:
    """Bytes allocated under `path`, as du counts them."""
    return sum(os.lstat(p).st_blocks * 512 for p in path.rglob("*"))


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 160 MiB ext4 filesystem, loop-mounted for this test (needs root), unmounted after."""
    if os.geteuid() != 0 or shutil.which("mkfs.ext4") is None:
        pytest.skip("mounting a filesystem needs root and mkfs.ext4")
    image, mount = tmp_path / "fs.img", tmp_path / "mnt"
    mount.mkdir()
    with open(image, "wb") as f:
        f.truncate(IMAGE_BYTES)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        image.unlink(missing_ok=True)


def send(prod: Producer, topic: str, values: list[bytes]) -> tuple[list[Record], list[KafkaError]]:
    acked: list[Record] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append(clients.record_of(msg))

    for v in values:
        prod.produce(topic, key=None, value=v, partition=0, on_delivery=on_delivery)
        prod.poll(0)
    assert prod.flush(30) == 0
    return acked, errors


def test_produces_are_refused_before_the_disk_fills_and_resume_once_space_is_back(
    request: pytest.FixtureRequest, small_fs: Path, tmp_path: Path
) -> None:
    data_dir = small_fs / "data"
    options = BrokerOptions(extra_args=("--min-free-bytes", str(MIN_FREE_BYTES), "--preallocate-bytes", str(4 << 20)))
    broker = Broker(name="small-fs", port=free_port(), data_dir=data_dir, log_path=tmp_path / "broker.log", options=options)
    record_broker_use(request, broker)
    broker.start()
    try:
        topic = "guarded"
        clients.create_topic(broker.bootstrap, topic, 1, config={"retention.ms": "-1"})
        # Ballast leaves about 48 MiB for the broker: the guard trips after some 24 MiB.
        ballast = small_fs / "ballast"
        with open(ballast, "wb") as f:
            f.write(b"\xa5" * max(0, free_bytes(small_fs) - (48 << 20)))
            os.fsync(f.fileno())
        prod = clients.producer(broker.bootstrap, retries=0, **{"enable.idempotence": False, "linger.ms": 1})
        acked: list[Record] = []
        refused: list[KafkaError] = []
        sent = 0
        while not refused:
            assert sent < 4096, "never refused: 128 MiB sent to a filesystem that has 48 MiB"
            values = [b"%08d" % (sent + i) + b"x" * (RECORD_BYTES - 8) for i in range(32)]
            ok, errors = send(prod, topic, values)
            sent += len(values)
            acked += ok
            refused += errors
        assert {e.code() for e in refused} == {KafkaError.KAFKA_STORAGE_ERROR}, refused[:3]
        left = free_bytes(small_fs)
        assert left > MIN_FREE_BYTES // 2, f"refused only once {left} bytes were left"
        # Still refused: nothing slips through while short of space.
        ok, errors = send(prod, topic, [b"late"])
        assert not ok and errors and errors[0].code() == KafkaError.KAFKA_STORAGE_ERROR
        guard_lines = [line for line in broker.log_tail(2000).splitlines() if "short of space" in line]
        assert len(guard_lines) == 1, guard_lines

        ballast.unlink()
        deadline = time.monotonic() + 10
        while True:
            ok, errors = send(prod, topic, [b"after"])
            if ok:
                break
            assert time.monotonic() < deadline, f"still refused 10 s after space was freed: {errors}"
            time.sleep(0.2)
        assert "free space is back" in broker.log_tail(2000)
        acked += ok

        read = clients.read_all(broker.bootstrap, topic)[0]
        at = {r.offset: r.value for r in read}
        lost = [a for a in acked if at.get(a.offset) != a.value]
        assert not lost, f"{len(lost)} of {len(acked)} acknowledged records lost or changed"
        assert [r.offset for r in read] == list(range(len(read)))
    finally:
        if broker.alive():
            broker.stop_clean()
        broker.ensure_stopped()


MANY_PARTITIONS = 5000


def test_a_topic_of_thousands_of_partitions_takes_writes_everywhere_within_the_disk_bound(broker_factory) -> None:
    preallocate = 64 << 20
    journal = 64 << 20
    broker = broker_factory(extra_args=("--preallocate-bytes", str(preallocate), "--journal-bytes", str(journal)))
    topic = "many"
    started = time.monotonic()
    clients.create_topic(broker.bootstrap, topic, MANY_PARTITIONS, config={"retention.ms": "-1"})
    created_s = time.monotonic() - started
    prod = clients.producer(broker.bootstrap, acks=1, **{"linger.ms": 20, "batch.size": 16384})
    records = [(b"k%d" % p, b"v%d-" % p + b"x" * 1000, p) for p in range(MANY_PARTITIONS)] * 2
    acked: list[Record] = []
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        (errors.append(str(err)) if err is not None else acked.append(clients.record_of(msg)))

    for key, value, p in records:
        while True:
            try:
                prod.produce(topic, key=key, value=value, partition=p, on_delivery=on_delivery)
                break
            except BufferError:
                prod.poll(0.05)
        prod.poll(0)
    assert prod.flush(60) == 0
    assert not errors, errors[:3]
    # Segment bytes are the records plus batch and record headers (100 bytes is generous); every
    # partition may hold its last page whole, its directory a block, and a page more for luck.
    # Each shard's journal is allocated whole.
    written = sum(len(k) + len(v) + 100 for k, v, _ in records)
    overhead = MANY_PARTITIONS * 3 * 4096 + (32 << 20) + TEST_CORES * journal
    assert du_bytes(broker.data_dir) <= written + overhead + TEST_CORES * preallocate

    # Idle partitions give back what they reserved ahead: the disk used converges to the bound.
    deadline = time.monotonic() + 15
    while du_bytes(broker.data_dir) > written + overhead:
        assert time.monotonic() < deadline, f"{du_bytes(broker.data_dir)} bytes allocated for {written} written"
        time.sleep(0.5)

    read = clients.read_partitions(broker.bootstrap, topic, range(MANY_PARTITIONS), timeout_s=120)
    got = {(r.partition, r.offset): r.value for rs in read.values() for r in rs}
    assert len(got) == len(acked) == 2 * MANY_PARTITIONS
    assert all(got[(a.partition, a.offset)] == a.value for a in acked)
    print(f"{MANY_PARTITIONS} partitions: created in {created_s:.1f} s, {time.monotonic() - started:.1f} s in all")

    admin = clients.admin(broker.bootstrap)
    admin.delete_topics([topic])[topic].result(timeout=60)
    deadline = time.monotonic() + 60
    while any(broker.data_dir.glob(f"{topic}-*")):
        assert time.monotonic() < deadline, "the topic's logs are still on disk a minute after its deletion"
        time.sleep(0.5)
