"""Settings changed at run time: IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT) and the
legacy AlterConfigs on topics, dynamic broker defaults (cluster-wide and per broker, applied to
topics without a restart and kept across one) and group settings, as Kafka 4.0 has them."""

from __future__ import annotations

import struct
import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka.admin import KafkaAdminClient

import clients
import kafka_wire
from conftest import Broker

TOPIC = ConfigResource.Type.TOPIC
BROKER = ConfigResource.Type.BROKER
GROUP = ConfigResource.Type.GROUP


def describe(bootstrap: str, kind, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(kind, name)
    admin = clients.admin(bootstrap)
    return admin.describe_configs([resource])[resource].result(timeout=clients.REQUEST_TIMEOUT_S)


def incremental(bootstrap: str, kind, name: str, *ops: tuple[str, AlterConfigOpType, str | None]) -> None:
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, op, v in ops]
    resource = ConfigResource(kind, name, incremental_configs=entries)
    admin = clients.admin(bootstrap)
    admin.incremental_alter_configs([resource])[resource].result(timeout=clients.REQUEST_TIMEOUT_S)


def refused(bootstrap: str, kind, name: str, *ops) -> KafkaError:
    with pytest.raises(KafkaException) as raised:
        incremental(bootstrap, kind, name, *ops)
    return raised.value.args[0]


def test_append_and_subtract_apply_to_list_settings_only(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1)
    assert describe(broker.bootstrap, TOPIC, topic)["cleanup.policy"].is_default

    # APPEND to the inherited value: "delete" is there once. (Where the list ends as it was
    # inherited, Kafka 4.4 still reports the default as its source, Spindle the topic: not
    # asserted.)
    incremental(broker.bootstrap, TOPIC, topic, ("cleanup.policy", AlterConfigOpType.APPEND, "delete"))
    assert describe(broker.bootstrap, TOPIC, topic)["cleanup.policy"].value == "delete"
    # SUBTRACT of a value not in the list leaves it.
    incremental(broker.bootstrap, TOPIC, topic, ("cleanup.policy", AlterConfigOpType.SUBTRACT, "compact"))
    assert describe(broker.bootstrap, TOPIC, topic)["cleanup.policy"].value == "delete"
    # APPEND on a setting that is not a list.
    error = refused(broker.bootstrap, TOPIC, topic, ("retention.ms", AlterConfigOpType.APPEND, "1000"))
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "list" in error.str().lower()  # spindle: "not a list"; Kafka: "its type is not LIST"
    assert describe(broker.bootstrap, TOPIC, topic)["cleanup.policy"].value == "delete"


def test_legacy_alter_configs_replaces_the_whole_set(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1, {"retention.ms": "3600000", "segment.bytes": "16777216"})
    resource = ConfigResource(TOPIC, topic, set_config={"retention.ms": "7200000"})
    admin = clients.admin(broker.bootstrap)
    admin.alter_configs([resource])[resource].result(timeout=clients.REQUEST_TIMEOUT_S)
    configs = describe(broker.bootstrap, TOPIC, topic)
    assert configs["retention.ms"].value == "7200000"
    assert not configs["retention.ms"].is_default
    assert configs["segment.bytes"].is_default, "a setting left out went back to its default"
    assert configs["segment.bytes"].value == "1073741824"

    # kafka-python's, forced to the legacy API (it sends the other set settings along).
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        resource = KpConfigResource(KpConfigResourceType.TOPIC, topic, configs={"segment.bytes": "8388608"})
        kp.alter_configs([resource], incremental=False)
    finally:
        kp.close()
    configs = describe(broker.bootstrap, TOPIC, topic)
    assert configs["segment.bytes"].value == "8388608"
    assert not configs["segment.bytes"].is_default


# Kafka 4.4's topic settings, as its DescribeConfigs lists them for a new topic.
KAFKA_TOPIC_SETTINGS = set(
    """cleanup.policy compression.gzip.level compression.lz4.level compression.type
    compression.zstd.level delete.retention.ms errors.deadletterqueue.group.enable
    file.delete.delay.ms flush.messages flush.ms follower.replication.throttled.replicas
    index.interval.bytes leader.replication.throttled.replicas local.retention.bytes
    local.retention.ms max.compaction.lag.ms max.decompressed.message.bytes max.message.bytes
    message.timestamp.after.max.ms message.timestamp.before.max.ms message.timestamp.type
    min.cleanable.dirty.ratio min.compaction.lag.ms min.insync.replicas preallocate
    remote.copy.lag.bytes remote.copy.lag.ms remote.log.copy.disable remote.log.delete.on.disable
    remote.storage.enable retention.bytes retention.ms segment.bytes segment.index.bytes
    segment.jitter.ms segment.ms unclean.leader.election.enable""".split()
)


def test_every_kafka_topic_setting_is_described_and_compaction_settings_are_kept(broker: Broker, unique) -> None:
    """librdkafka's 0081 sets delete.retention.ms at creation and max.compaction.lag.ms through
    the legacy AlterConfigs: settings that matter only to compaction are kept and described as
    Kafka does, though Spindle refuses compaction itself."""
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1, {"compression.type": "lz4", "delete.retention.ms": "900"})
    configs = describe(broker.bootstrap, TOPIC, topic)
    assert set(configs) == KAFKA_TOPIC_SETTINGS
    assert (configs["delete.retention.ms"].value, configs["delete.retention.ms"].is_default) == ("900", False)
    defaults = {
        "min.compaction.lag.ms": "0",
        "max.compaction.lag.ms": "9223372036854775807",
        "min.cleanable.dirty.ratio": "0.5",
        "segment.index.bytes": "10485760",
        "segment.jitter.ms": "0",
        "file.delete.delay.ms": "60000",
        "unclean.leader.election.enable": "false",
        "remote.storage.enable": "false",
        "leader.replication.throttled.replicas": "",
        "compression.zstd.level": "3",
    }
    assert {n: configs[n].value for n in defaults} == defaults
    assert all(configs[n].is_default for n in defaults)

    # The legacy AlterConfigs replaces the set: delete.retention.ms goes back to its default.
    resource = ConfigResource(
        TOPIC, topic, set_config={"compression.type": "lz4", "max.compaction.lag.ms": "3600000"}
    )
    admin = clients.admin(broker.bootstrap)
    admin.alter_configs([resource])[resource].result(timeout=clients.REQUEST_TIMEOUT_S)
    incremental(broker.bootstrap, TOPIC, topic, ("min.cleanable.dirty.ratio", AlterConfigOpType.SET, "0.1"))
    configs = describe(broker.bootstrap, TOPIC, topic)
    assert configs["max.compaction.lag.ms"].value == "3600000"
    assert configs["min.cleanable.dirty.ratio"].value == "0.1"
    assert (configs["delete.retention.ms"].value, configs["delete.retention.ms"].is_default) == ("86400000", True)

    # kafka-python sees the same.
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        answer = kp.describe_configs([KpConfigResource(KpConfigResourceType.TOPIC, topic)], config_filter="all")
        [by_name] = answer.values()
        kp_configs = by_name[topic]
    finally:
        kp.close()
    assert kp_configs["max.compaction.lag.ms"]["value"] == "3600000"
    assert kp_configs["min.cleanable.dirty.ratio"]["config_type"] == "DOUBLE"
    assert set(kp_configs) == KAFKA_TOPIC_SETTINGS

    # Out-of-range values and unknown names are refused, and change nothing.
    for name, value in [
        ("min.cleanable.dirty.ratio", "1.5"),
        ("max.compaction.lag.ms", "0"),
        ("dummy.doesntexist", "1"),
        ("remote.storage.enable", "true"),  # Kafka: tiered storage is off in the broker
    ]:
        error = refused(broker.bootstrap, TOPIC, topic, (name, AlterConfigOpType.SET, value))
        assert error.code() == KafkaError.INVALID_CONFIG, (name, error)
    assert describe(broker.bootstrap, TOPIC, topic)["min.cleanable.dirty.ratio"].value == "0.1"


def test_thread_and_sasl_broker_settings_are_kept_as_kafka_keeps_them(own_broker: Broker) -> None:
    """librdkafka's 0081 sets sasl.kerberos.min.time.before.relogin on a broker with the legacy
    AlterConfigs and background.threads with IncrementalAlterConfigs: Kafka applies them at run
    time; Spindle has no such thread pools or SASL, and keeps and describes them."""
    admin = clients.admin(own_broker.bootstrap)
    [node] = [str(b) for b in admin.list_topics(timeout=clients.REQUEST_TIMEOUT_S).brokers]
    resource = ConfigResource(BROKER, node, set_config={"sasl.kerberos.min.time.before.relogin": "58000"})
    admin.alter_configs([resource])[resource].result(timeout=clients.REQUEST_TIMEOUT_S)
    incremental(own_broker.bootstrap, BROKER, node, ("background.threads", AlterConfigOpType.SET, "9"))
    dynamic = ConfigSource.DYNAMIC_BROKER_CONFIG.value
    for name, value in [("sasl.kerberos.min.time.before.relogin", "58000"), ("background.threads", "9")]:
        assert broker_setting(own_broker.bootstrap, node, name, (value, dynamic)) == (value, dynamic)

    error = refused(own_broker.bootstrap, BROKER, node, ("background.threads", AlterConfigOpType.SET, "0"))
    # Kafka refuses a broker setting's value with INVALID_REQUEST, Spindle with INVALID_CONFIG
    # (as for topics): the client reports both as the request's error.
    assert error.code() in (KafkaError.INVALID_CONFIG, KafkaError.INVALID_REQUEST)
    incremental(own_broker.bootstrap, BROKER, node, ("background.threads", AlterConfigOpType.DELETE, None))
    default = ("10", ConfigSource.DEFAULT_CONFIG.value)
    assert broker_setting(own_broker.bootstrap, node, "background.threads", default) == default


def broker_setting(bootstrap: str, node: str, name: str, want: tuple[str, int], timeout_s: float = 10.0) -> tuple[str, int]:
    """A broker setting's (value, source), read until it is `want` or the time is up: Kafka
    applies a change to its broker a moment after answering (Spindle before)."""
    deadline = time.monotonic() + timeout_s
    while True:
        entry = describe(bootstrap, BROKER, node)[name]
        if (entry.value, entry.source) == want or time.monotonic() > deadline:
            return (entry.value, entry.source)
        time.sleep(0.2)


@pytest.mark.spindle_only("compaction is refused until Spindle has it; Kafka compacts")
def test_compaction_stays_refused_when_appended(broker: Broker, unique) -> None:
    topic = unique("topic")
    clients.create_topic(broker.bootstrap, topic, 1)
    error = refused(broker.bootstrap, TOPIC, topic, ("cleanup.policy", AlterConfigOpType.APPEND, "compact"))
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "compaction is not supported" in error.str()
    assert describe(broker.bootstrap, TOPIC, topic)["cleanup.policy"].value == "delete"


def test_group_settings_are_described_and_changed(broker: Broker, unique) -> None:
    group = unique("group")
    configs = describe(broker.bootstrap, GROUP, group)
    # Kafka 4.0's group settings and their defaults (later Kafkas list more).
    kafka_4_0 = {
        "consumer.session.timeout.ms": "45000",
        "consumer.heartbeat.interval.ms": "5000",
        "share.session.timeout.ms": "45000",
        "share.heartbeat.interval.ms": "5000",
        "share.record.lock.duration.ms": "30000",
        "share.auto.offset.reset": "latest",
    }
    assert {n: configs[n].value for n in kafka_4_0 if n in configs} == kafka_4_0
    assert all(configs[n].source == ConfigSource.DEFAULT_CONFIG.value for n in kafka_4_0)

    incremental(broker.bootstrap, GROUP, group, ("consumer.session.timeout.ms", AlterConfigOpType.SET, "50000"))
    entry = describe(broker.bootstrap, GROUP, group)["consumer.session.timeout.ms"]
    assert (entry.value, entry.source) == ("50000", ConfigSource.GROUP_CONFIG.value)

    error = refused(broker.bootstrap, GROUP, group, ("consumer.session.timeout.ms", AlterConfigOpType.SET, "10"))
    assert error.code() == KafkaError.INVALID_CONFIG
    error = refused(broker.bootstrap, GROUP, group, ("session.timeout.ms", AlterConfigOpType.SET, "50000"))
    assert error.code() == KafkaError.INVALID_CONFIG

    incremental(broker.bootstrap, GROUP, group, ("consumer.session.timeout.ms", AlterConfigOpType.DELETE, None))
    assert describe(broker.bootstrap, GROUP, group)["consumer.session.timeout.ms"].is_default


def settled_low_watermark(broker: Broker, topic: str, timeout_s: float = 30.0) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        low, _ = clients.watermarks(broker.bootstrap, topic, [0])[0]
        if low > 0:
            return low
        time.sleep(0.1)
    return 0


@pytest.mark.spindle_only("spindle's retention check interval")
def test_dynamic_broker_defaults_reach_topics_at_once_and_survive_a_restart(broker_factory, unique) -> None:
    broker: Broker = broker_factory(extra_args=("--retention-check-interval-ms", "200"))
    node = "0"
    plain, own = unique("plain"), unique("own")
    clients.create_topic(broker.bootstrap, plain, 1)
    clients.create_topic(broker.bootstrap, own, 1, {"retention.ms": "86400000"})

    # confluent-kafka and kafka-python refuse the empty resource name of the cluster-wide
    # defaults (the Java client takes it): raw IncrementalAlterConfigs for those.
    assert wire_alter_broker(broker, "log.retention.ms", "3600000") == (0, None)
    incremental(broker.bootstrap, BROKER, node, ("log.retention.bytes", AlterConfigOpType.SET, "200000"))
    incremental(broker.bootstrap, BROKER, node, ("log.segment.bytes", AlterConfigOpType.SET, "65536"))

    def check_described() -> None:
        entry = describe(broker.bootstrap, TOPIC, plain)["retention.ms"]
        assert (entry.value, entry.source) == ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        entry = describe(broker.bootstrap, TOPIC, plain)["retention.bytes"]
        assert (entry.value, entry.source) == ("200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        entry = describe(broker.bootstrap, TOPIC, own)["retention.ms"]
        assert (entry.value, entry.source) == ("86400000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
        assert wire_describe_cluster_defaults(broker) == {"log.retention.ms": ("3600000", 3)}
        this = describe(broker.bootstrap, BROKER, node)
        assert this["log.retention.bytes"].value == "200000"
        assert this["log.retention.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert this["log.retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value

    check_described()
    # Applied to the log without a restart: small segments, and retention by size deletes some.
    values = [(None, b"%06d" % i + b"x" * 994) for i in range(1_000)]
    clients.produce_acked(clients.producer(broker.bootstrap, **{"batch.size": 16384}), plain, values, partition=0)
    assert settled_low_watermark(broker, plain) > 0, "the dynamic retention.bytes never applied"

    broker.restart_after_sigterm()
    check_described()

    # Another broker's settings are not this one's to change (clients send them to that broker:
    # raw, to this one).
    assert wire_alter_broker(broker, "log.retention.ms", "1", resource="7")[0] == INVALID_REQUEST
    # Only defaults of topic settings change at run time.
    error = refused(broker.bootstrap, BROKER, node, ("num.partitions", AlterConfigOpType.SET, "3"))
    assert error.code() == KafkaError.INVALID_CONFIG
    assert wire_alter_broker(broker, "log.retention.ms", None) == (0, None)
    assert wire_describe_cluster_defaults(broker) == {}
    assert describe(broker.bootstrap, TOPIC, plain)["retention.ms"].value == "604800000"


API_DESCRIBE_CONFIGS = 32
API_INCREMENTAL_ALTER_CONFIGS = 44
BROKER_TYPE = 4
INVALID_REQUEST = 42


def wire_alter_broker(
    broker: Broker, name: str, value: str | None, resource: str = ""
) -> tuple[int, str | None]:
    """IncrementalAlterConfigs v0 of one broker setting (by default the cluster-wide one): SET,
    or DELETE when value is None. Returns (error code, message)."""
    op = 0 if value is not None else 1
    body = struct.pack(">i", 1) + struct.pack(">b", BROKER_TYPE) + kafka_wire.string(resource)
    body += struct.pack(">i", 1) + kafka_wire.string(name) + struct.pack(">b", op) + kafka_wire.string(value)
    body += struct.pack(">b", 0)  # validate only
    with kafka_wire.Connection(broker.host, broker.port) as conn:
        reader = conn.request(API_INCREMENTAL_ALTER_CONFIGS, 0, body)
        reader.int32()  # throttle
        assert reader.array_len() == 1
        return reader.int16(), reader.string()


def wire_describe_cluster_defaults(broker: Broker) -> dict[str, tuple[str | None, int]]:
    """DescribeConfigs v1 of the cluster-wide broker defaults: name -> (value, source)."""
    body = struct.pack(">i", 1) + struct.pack(">b", BROKER_TYPE) + kafka_wire.string("")
    body += struct.pack(">i", -1) + struct.pack(">b", 0)  # every key, no synonyms
    with kafka_wire.Connection(broker.host, broker.port) as conn:
        reader = conn.request(API_DESCRIBE_CONFIGS, 1, body)
        reader.int32()  # throttle
        assert reader.array_len() == 1
        assert reader.int16() == 0
        reader.string()  # message
        reader.int8()
        reader.string()
        out = {}
        for _ in range(reader.array_len()):
            name, value = reader.string(), reader.string()
            reader.int8()  # read only
            source = reader.int8()
            reader.int8()  # sensitive
            for _ in range(reader.array_len()):  # synonyms
                reader.string()
                reader.string()
                reader.int8()
            out[name] = (value, source)
        return out
