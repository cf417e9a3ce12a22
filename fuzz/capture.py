#!/usr/bin/env python3
"""Captures real clients' traffic and a real broker's files as seeds for the fuzz targets.

    fuzz/capture.py record DIR -- pytest args...   runs end-to-end tests through a capturing proxy
    fuzz/capture.py corpus DIR                     turns what was captured into fuzz/corpus/*

`record` runs pytest with SPINDLE_BIN set to this script: each broker the tests start is the
real `target/release/spindle`, on a port of its own, advertising the port the test chose, where
a proxy listens that saves every byte clients send. When the broker stops, its metadata file and
the start of its segment files are saved too.

`corpus` cuts the streams into frames (seeds of `request`), the segment files into batches
(`batch`; those of the consumer offsets log also `group_records`) and takes the metadata file
without its CRC (`metadata`). `scripts/fuzz --minimise` then keeps only the seeds that add
coverage.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The broker behind the proxy: `cargo build --release --bins` first, or SPINDLE_CAPTURE_BIN.
SPINDLE = Path(os.environ.get("SPINDLE_CAPTURE_BIN", REPO / "target" / "release" / "spindle"))
# Only the start of each segment file is kept: seeds are small.
SEGMENT_BYTES_KEPT = 256 << 10


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pump(src: socket.socket, dst: socket.socket, record) -> None:
    try:
        while data := src.recv(65536):
            if record is not None:
                record.write(data)
                record.flush()
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def proxy(listen_port: int, broker_port: int, out: Path) -> None:
    server = socket.create_server(("127.0.0.1", listen_port), reuse_port=False)
    n = 0
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection(("127.0.0.1", broker_port), timeout=5)
            upstream.settimeout(None)
        except OSError:
            client.close()  # the broker is not up yet: the client retries
            continue
        n += 1
        record = open(out / f"conn-{n:05}.bin", "wb")
        threading.Thread(target=pump, args=(client, upstream, record), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, None), daemon=True).start()


def serve_through_proxy(args: list[str]) -> int:
    """Stands in for `spindle serve ARGS`: the same broker, behind a capturing proxy."""
    out = Path(os.environ["SPINDLE_CAPTURE_DIR"]) / f"broker-{os.getpid()}"
    out.mkdir(parents=True)
    listen = args[args.index("--listen") + 1]
    data_dir = Path(args[args.index("--data-dir") + 1])
    port = int(listen.rsplit(":", 1)[1])
    broker_port = free_port()
    args = list(args)
    args[args.index("--listen") + 1] = f"127.0.0.1:{broker_port}"
    if "--advertise" not in args:
        args += ["--advertise", listen]
    child = subprocess.Popen([str(SPINDLE), "serve", *args])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _: child.send_signal(s))
    threading.Thread(target=proxy, args=(port, broker_port, out), daemon=True).start()
    rc = child.wait()
    save_files(data_dir, out / "files")
    return rc


def save_files(data_dir: Path, out: Path) -> None:
    for path in data_dir.rglob("*"):
        if path.suffix not in (".log", ".fb") or not path.is_file():
            continue
        dest = out / path.relative_to(data_dir)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "rb") as f:
            dest.write_bytes(f.read(SEGMENT_BYTES_KEPT))


def frames(stream: bytes):
    while len(stream) >= 4:
        size = int.from_bytes(stream[:4], "big", signed=True)
        if size < 0 or len(stream) < 4 + size:
            return
        yield stream[: 4 + size]
        stream = stream[4 + size :]


def batches(segment: bytes):
    while len(segment) >= 61:
        size = 12 + int.from_bytes(segment[8:12], "big", signed=True)
        if size < 61 or len(segment) < size:
            return
        yield segment[:size]
        segment = segment[size:]


def make_corpus(captured: Path) -> None:
    corpus = REPO / "fuzz" / "corpus"
    seeds: dict[str, dict[str, bytes]] = {t: {} for t in ("request", "batch", "group_records", "metadata")}

    def add(target: str, data: bytes) -> None:
        seeds[target][hashlib.sha1(data).hexdigest()] = data

    for conn in sorted(captured.rglob("conn-*.bin")):
        for frame in frames(conn.read_bytes()):
            # The request target's first byte is the socket read size: 256 bytes a read.
            add("request", b"\xff" + frame)
    for path in sorted(captured.rglob("*.log")):
        offsets_log = "__consumer_offsets" in str(path)
        for batch in batches(path.read_bytes()):
            # The batch target's eight bytes of parameters: no limit, CRCs as they are, offset 0.
            add("batch", bytes(8) + batch)
            if offsets_log:
                add("group_records", batch)
    for path in sorted(captured.rglob("metadata.fb")):
        add("metadata", path.read_bytes()[:-4])
    for target, found in seeds.items():
        d = corpus / target
        d.mkdir(parents=True, exist_ok=True)
        for name, data in found.items():
            (d / name).write_bytes(data)
        print(f"{target}: {len(found)} seeds")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        return serve_through_proxy(sys.argv[2:])
    if os.environ.get("SPINDLE_CAPTURE_DIR"):
        # Standing in for the binary, but not as a broker: the admin commands of the CLI.
        os.execv(SPINDLE, [str(SPINDLE), *sys.argv[1:]])
    if len(sys.argv) >= 3 and sys.argv[1] == "record":
        captured = Path(sys.argv[2]).resolve()
        captured.mkdir(parents=True, exist_ok=True)
        pytest_args = sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else []
        env = dict(os.environ, SPINDLE_BIN=str(Path(__file__).resolve()), SPINDLE_CAPTURE_DIR=str(captured))
        return subprocess.call([sys.executable, "-m", "pytest", *pytest_args], cwd=REPO, env=env)
    if len(sys.argv) == 3 and sys.argv[1] == "corpus":
        make_corpus(Path(sys.argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
