"""Just enough of Kafka's wire protocol to talk to a broker without a client library.

The harness uses it to tell when a broker is ready, and the tests use it where a client library
would hide what the broker did (garbage on the socket, the error code of one Metadata topic).
Only old, non-flexible request versions are spoken (every Kafka broker must still accept them),
except for the flexible request header v2 that probing an unknown ApiVersions version takes, and
DescribeCluster and DescribeQuorum, whose every version is flexible.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

from kafka.record.default_records import DefaultRecordBatchBuilder

API_PRODUCE = 0
API_FETCH = 1
API_METADATA = 3
API_CREATE_TOPICS = 19
API_API_VERSIONS = 18
API_DESCRIBE_QUORUM = 55
API_DESCRIBE_CLUSTER = 60
API_INIT_PRODUCER_ID = 22
API_ELECT_LEADERS = 43

ERROR_NONE = 0
ERROR_OFFSET_OUT_OF_RANGE = 1
ERROR_UNKNOWN_TOPIC_OR_PARTITION = 3
ERROR_NOT_LEADER_OR_FOLLOWER = 6
ERROR_NOT_ENOUGH_REPLICAS = 19
ERROR_TOPIC_ALREADY_EXISTS = 36
# ElectLeaders' answers: the preferred replica is fenced or out of the ISR; nothing to do.
ERROR_PREFERRED_LEADER_NOT_AVAILABLE = 80
ERROR_ELECTION_NOT_NEEDED = 84
ELECTION_PREFERRED = 0
# Retriable: the coordinator (for InitProducerId, Kafka's producer id block) is not ready yet.
ERROR_COORDINATOR_LOAD_IN_PROGRESS = 14
ERROR_COORDINATOR_NOT_AVAILABLE = 15
RETRIABLE_COORDINATOR_ERRORS = (ERROR_COORDINATOR_LOAD_IN_PROGRESS, ERROR_COORDINATOR_NOT_AVAILABLE)
# How long init_producer_id retries those, as a client would.
RETRY_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.1

# A response bigger than this is a broker bug; refusing it keeps a bad size from hanging a test.
RESPONSE_BYTES_MAX = 64 * 1024 * 1024


class WireError(Exception):
    """The broker closed the connection or sent a frame we cannot read."""


def string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def request_frame(
    api_key: int,
    api_version: int,
    correlation_id: int,
    body: bytes,
    client_id: str = "spindle-tests",
    header_version: int = 1,
) -> bytes:
    """A size-prefixed request with header v1 (the header of every non-flexible version), or v2
    (that of flexible versions: v1 and empty tagged fields)."""
    assert header_version in (1, 2), header_version
    header = struct.pack(">hhi", api_key, api_version, correlation_id) + string(client_id)
    if header_version == 2:
        header += b"\x00"  # no tagged fields
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


class Reader:
    """Reads big-endian Kafka primitives from one response body."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise WireError(f"response truncated: wanted {n} bytes at {self.pos} of {len(self.data)}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def string(self) -> str | None:
        n = self.int16()
        return None if n < 0 else self.take(n).decode()

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise WireError("varint longer than 5 bytes")

    def compact_string(self) -> str | None:
        n = self.uvarint() - 1
        return None if n < 0 else self.take(n).decode()

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())

    def array_len(self) -> int:
        n = self.int32()
        if n > len(self.data):
            raise WireError(f"array length {n} exceeds the response")
        return max(n, 0)


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class PartitionInfo:
    error_code: int
    partition: int
    leader: int
    leader_epoch: int  # -1 below Metadata v7, which first carries it
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicInfo:
    error_code: int
    name: str
    partitions: tuple[PartitionInfo, ...]

    @property
    def partition_count(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True)
class MetadataResponse:
    brokers: list[BrokerInfo]
    controller_id: int
    topics: list[TopicInfo]


class Connection:
    """One blocking TCP connection that sends requests and reads their responses in order."""

    def __init__(self, host: str, port: int, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.next_correlation_id = 1

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise WireError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def request(self, api_key: int, api_version: int, body: bytes, header_version: int = 1) -> Reader:
        """Sends one request and returns a reader positioned after the response header v0."""
        correlation_id = self.next_correlation_id
        self.next_correlation_id += 1
        self.send_raw(request_frame(api_key, api_version, correlation_id, body, header_version=header_version))
        size = struct.unpack(">i", self.recv_exact(4))[0]
        if size < 4 or size > RESPONSE_BYTES_MAX:
            raise WireError(f"bad response size {size}")
        reader = Reader(self.recv_exact(size))
        got = reader.int32()
        if got != correlation_id:
            raise WireError(f"correlation id {got}, expected {correlation_id}")
        return reader

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """ApiVersions v0: api key -> (min version, max version)."""
        reader = self.request(API_API_VERSIONS, 0, b"")
        error = reader.int16()
        if error != ERROR_NONE:
            raise WireError(f"ApiVersions v0 answered error {error}")
        versions = {}
        for _ in range(reader.array_len()):
            key, lo, hi = reader.int16(), reader.int16(), reader.int16()
            versions[key] = (lo, hi)
        return versions

    def init_producer_id(self) -> tuple[int, int]:
        """InitProducerId v1 for an idempotent (non-transactional) producer: (id, epoch).

        Retries the coordinator errors that clients retry: Kafka answers
        COORDINATOR_LOAD_IN_PROGRESS until its broker has a block of producer ids from the
        controller, which takes a moment after a start.
        """
        deadline = time.monotonic() + RETRY_TIMEOUT_S
        while True:
            reader = self.request(API_INIT_PRODUCER_ID, 1, string(None) + struct.pack(">i", 60_000))
            reader.int32()  # throttle_time_ms
            error = reader.int16()
            if error == ERROR_NONE:
                return reader.int64(), reader.int16()
            if error not in RETRIABLE_COORDINATOR_ERRORS or time.monotonic() > deadline:
                raise WireError(f"InitProducerId v1 answered error {error}")
            time.sleep(RETRY_BACKOFF_S)

    def metadata(
        self, topics: list[str] | None = None, allow_auto_topic_creation: bool = True, version: int = 4
    ) -> MetadataResponse:
        """Metadata v4, the first version that can ask the broker not to create topics, or v7,
        the first with each partition's leader epoch (both before the flexible versions)."""
        assert version in (4, 7), version
        if topics is None:
            body = struct.pack(">i", -1)
        else:
            body = struct.pack(">i", len(topics)) + b"".join(string(t) for t in topics)
        body += struct.pack(">b", 1 if allow_auto_topic_creation else 0)
        reader = self.request(API_METADATA, version, body)
        reader.int32()  # throttle_time_ms
        brokers = []
        for _ in range(reader.array_len()):
            node_id = reader.int32()
            host = reader.string() or ""
            port = reader.int32()
            reader.string()  # rack
            brokers.append(BrokerInfo(node_id, host, port))
        reader.string()  # cluster_id
        controller_id = reader.int32()
        topic_infos = []
        for _ in range(reader.array_len()):
            error_code = reader.int16()
            name = reader.string() or ""
            reader.int8()  # is_internal
            partitions = []
            for _ in range(reader.array_len()):
                partition_error = reader.int16()
                index = reader.int32()
                leader = reader.int32()
                leader_epoch = reader.int32() if version >= 7 else -1
                replicas = tuple(reader.int32() for _ in range(reader.array_len()))
                isr = tuple(reader.int32() for _ in range(reader.array_len()))
                if version >= 5:
                    for _ in range(reader.array_len()):  # offline_replicas
                        reader.int32()
                partitions.append(PartitionInfo(partition_error, index, leader, leader_epoch, replicas, isr))
            topic_infos.append(TopicInfo(error_code, name, tuple(partitions)))
        return MetadataResponse(brokers, controller_id, topic_infos)


@dataclass(frozen=True)
class ClusterDescription:
    controller_id: int
    brokers: list[BrokerInfo]


def describe_cluster(conn: Connection) -> ClusterDescription:
    """DescribeCluster v0 (flexible: request header v2, response header v1)."""
    reader = conn.request(API_DESCRIBE_CLUSTER, 0, b"\x00\x00", header_version=2)
    reader.skip_tagged_fields()  # of the response header
    reader.int32()  # throttle_time_ms
    error = reader.int16()
    message = reader.compact_string()
    if error != ERROR_NONE:
        raise WireError(f"DescribeCluster answered error {error}: {message}")
    reader.compact_string()  # cluster_id
    controller_id = reader.int32()
    brokers = []
    for _ in range(reader.uvarint() - 1):
        node_id = reader.int32()
        host = reader.compact_string() or ""
        port = reader.int32()
        reader.compact_string()  # rack
        reader.skip_tagged_fields()
        brokers.append(BrokerInfo(node_id, host, port))
    return ClusterDescription(controller_id, brokers)


def describe_quorum_leader(conn: Connection) -> int:
    """DescribeQuorum v0 of the metadata log (`__cluster_metadata` partition 0): its Raft leader."""
    body = b"\x02" + b"\x13__cluster_metadata" + b"\x02" + struct.pack(">i", 0) + b"\x00\x00\x00"
    reader = conn.request(API_DESCRIBE_QUORUM, 0, body, header_version=2)
    reader.skip_tagged_fields()  # of the response header
    error = reader.int16()
    if error != ERROR_NONE:
        raise WireError(f"DescribeQuorum answered error {error}")
    if reader.uvarint() != 2 or reader.compact_string() != "__cluster_metadata" or reader.uvarint() != 2:
        raise WireError("DescribeQuorum answered for another partition")
    reader.int32()  # partition_index
    error = reader.int16()
    if error != ERROR_NONE:
        raise WireError(f"DescribeQuorum answered partition error {error}")
    return reader.int32()


@dataclass(frozen=True)
class FetchedPartition:
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes


@dataclass(frozen=True)
class BatchHeader:
    """The fields of a v2 record batch header that tests look at."""

    base_offset: int
    crc: int
    attributes: int
    last_offset_delta: int
    producer_id: int
    record_count: int
    length: int  # the whole batch, header included

    @property
    def codec(self) -> int:
        """0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & 0x7


def record_batch(key: bytes | None, value: bytes | None) -> bytes:
    """A v2 batch of one uncompressed record, no producer id (built by kafka-python's builder)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 10,
    )
    builder.append(0, timestamp=int(time.time() * 1000), key=key, value=value, headers=[])
    return bytes(builder.build())


def produce(
    conn: Connection, topic: str, partition: int, records: bytes, acks: int = -1, timeout_ms: int = 30_000
) -> tuple[int, int]:
    """Produce v3 of one record set, acks=all unless told: (error code, base offset)."""
    answers = produce_partitions(conn, topic, {partition: records}, acks, timeout_ms)
    if list(answers) != [partition]:
        raise WireError(f"expected an answer for partition {partition}, got {list(answers)}")
    return answers[partition]


def produce_partitions(
    conn: Connection, topic: str, records: dict[int, bytes], acks: int = -1, timeout_ms: int = 30_000
) -> dict[int, tuple[int, int]]:
    """Produce v3 of a record set to each of several partitions of `topic` in one request, acks=all
    unless told (not 0: that has no response): partition -> (error code, base offset)."""
    assert acks != 0, "acks=0 has no response to read"
    body = string(None) + struct.pack(">hi", acks, timeout_ms)
    body += struct.pack(">i", 1) + string(topic) + struct.pack(">i", len(records))
    body += b"".join(struct.pack(">ii", partition, len(data)) + data for partition, data in records.items())
    reader = conn.request(API_PRODUCE, 3, body)
    answers = {}
    for _ in range(reader.array_len()):
        reader.string()
        for _ in range(reader.array_len()):
            partition, error, base_offset = reader.int32(), reader.int16(), reader.int64()
            reader.int64()  # log_append_time_ms
            answers[partition] = (error, base_offset)
    return answers


def create_topic(
    conn: Connection, topic: str, partitions: int, replication_factor: int, timeout_ms: int = 30_000
) -> tuple[int, str | None]:
    """CreateTopics v4 of one topic placed by the broker: (error code, error message)."""
    body = struct.pack(">i", 1) + string(topic) + struct.pack(">ih", partitions, replication_factor)
    body += struct.pack(">ii", 0, 0)  # no replica assignments, no configs
    body += struct.pack(">ib", timeout_ms, 0)  # timeout, validate_only false
    reader = conn.request(API_CREATE_TOPICS, 4, body)
    reader.int32()  # throttle_time_ms
    if reader.array_len() != 1:
        raise WireError("expected one topic")
    if reader.string() != topic:
        raise WireError("CreateTopics answered for another topic")
    error = reader.int16()
    return error, reader.string()


def elect_leaders(
    conn: Connection, partitions: dict[str, list[int]] | None, election_type: int = ELECTION_PREFERRED
) -> tuple[int, dict[tuple[str, int], int]]:
    """ElectLeaders v1 of `partitions` (None: every partition): the top-level error code and each
    partition's (topic, partition) -> error code."""
    body = struct.pack(">b", election_type)
    if partitions is None:
        body += struct.pack(">i", -1)
    else:
        body += struct.pack(">i", len(partitions))
        for topic, ids in partitions.items():
            body += string(topic) + struct.pack(">i", len(ids)) + b"".join(struct.pack(">i", i) for i in ids)
    body += struct.pack(">i", 30_000)  # timeout_ms
    reader = conn.request(API_ELECT_LEADERS, 1, body)
    reader.int32()  # throttle_time_ms
    error = reader.int16()
    results: dict[tuple[str, int], int] = {}
    for _ in range(reader.array_len()):
        topic = reader.string()
        for _ in range(reader.array_len()):
            partition = reader.int32()
            results[(topic or "", partition)] = reader.int16()
            reader.string()  # error_message
    return error, results


def fetch(conn: Connection, topic: str, partition: int, offset: int, max_bytes: int = 8 << 20) -> FetchedPartition:
    """Fetch v5 of one partition, no waiting: the batches exactly as the broker stores them."""
    body = struct.pack(">iiiib", -1, 0, 0, max_bytes, 0)
    body += struct.pack(">i", 1) + string(topic)
    body += struct.pack(">i", 1) + struct.pack(">iqqi", partition, offset, -1, max_bytes)
    reader = conn.request(API_FETCH, 5, body)
    reader.int32()  # throttle_time_ms
    if reader.array_len() != 1:
        raise WireError("expected one topic")
    reader.string()
    if reader.array_len() != 1:
        raise WireError("expected one partition")
    reader.int32()  # partition index
    error = reader.int16()
    high_watermark = reader.int64()
    reader.int64()  # last stable offset
    log_start_offset = reader.int64()
    for _ in range(reader.array_len()):  # aborted transactions
        reader.int64()
        reader.int64()
    n = reader.int32()
    records = b"" if n < 0 else reader.take(n)
    return FetchedPartition(error, high_watermark, log_start_offset, records)


def batch_headers(records: bytes) -> list[BatchHeader]:
    """The whole batches of a record set (a partial last one, as Fetch may end with, is left out)."""
    headers = []
    pos = 0
    while pos + 61 <= len(records):
        base_offset, batch_length = struct.unpack_from(">qi", records, pos)
        end = pos + 12 + batch_length
        if end > len(records):
            break
        crc, attributes, last_offset_delta = struct.unpack_from(">Ihi", records, pos + 17)
        producer_id = struct.unpack_from(">q", records, pos + 43)[0]
        record_count = struct.unpack_from(">i", records, pos + 57)[0]
        headers.append(
            BatchHeader(base_offset, crc, attributes, last_offset_delta, producer_id, record_count, end - pos)
        )
        pos = end
    return headers


def wait_until_serving(host: str, port: int, deadline: float) -> MetadataResponse:
    """Polls until the broker accepts a connection and answers ApiVersions and Metadata."""
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with Connection(host, port, timeout_s=2.0) as conn:
                conn.api_versions()
                response = conn.metadata(None)
                if response.brokers:
                    return response
                last_error = WireError("Metadata listed no brokers")
        except (OSError, WireError) as e:
            last_error = e
        time.sleep(0.05)
    raise TimeoutError(f"broker at {host}:{port} not serving: {last_error}")
