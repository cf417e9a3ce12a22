//! Topic settings by their Kafka names (`retention.ms`, ...): which exist, what values they
//! take, how they become a [`LogConfig`], and how they are reported (DescribeConfigs).
//!
//! A topic keeps only the settings a user set explicitly; everything else follows the broker's
//! defaults, so changing a default reaches every topic that did not override it.

use std::collections::BTreeMap;

use storage::{LogConfig, TimestampType};

use crate::config::TopicDefaults;

/// Kafka's `ConfigType` numbers, for DescribeConfigs v3+.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    Int = 3,
    Long = 5,
    Double = 6,
    List = 7,
    String = 2,
}

/// Where a setting's value comes from: Kafka's DescribeConfigs `ConfigSource` numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    Topic = 1,
    /// Set at run time for this broker.
    DynamicBroker = 2,
    /// Set at run time for every broker (resource name "").
    DynamicDefaultBroker = 3,
    StaticBroker = 4,
    Default = 5,
    Group = 8,
}

/// The settings a topic takes from dynamic broker settings where it sets none of its own, by
/// topic name, each with where it comes from.
pub type Inherited = BTreeMap<&'static str, (String, ConfigSource)>;

/// A setting a topic may carry.
struct Key {
    name: &'static str,
    /// The broker setting that gives the default (Kafka's synonym: `retention.ms` is
    /// `log.retention.ms` on a broker); `None` for the few Kafka gives no broker default.
    broker_name: Option<&'static str>,
    kind: ConfigType,
    /// Checks a value; the message says what is wrong.
    check: fn(&str) -> Result<(), String>,
    /// The value it has when the topic does not set it.
    default: fn(&TopicDefaults) -> String,
    /// Puts a (checked) value into a log's settings; `None` for settings that only describe.
    apply: Option<fn(&mut LogConfig, &str)>,
}

const NEVER: i64 = i64::MAX;

fn long_at_least(min: i64) -> impl Fn(&str) -> Result<(), String> {
    move |v: &str| match v.parse::<i64>() {
        Ok(n) if n >= min => Ok(()),
        _ => Err(format!("must be a whole number of at least {min}")),
    }
}

fn long_between(min: i64, max: i64) -> impl Fn(&str) -> Result<(), String> {
    move |v: &str| match v.parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(()),
        _ => Err(format!("must be a whole number from {min} to {max}")),
    }
}

fn boolean(v: &str) -> Result<(), String> {
    match v {
        "true" | "false" => Ok(()),
        _ => Err("must be true or false".into()),
    }
}

/// A setting whose behaviour Spindle lacks takes only the value that describes what it does.
fn unsupported_unless(v: &str, only: &str, why: &str) -> Result<(), String> {
    if v == only {
        Ok(())
    } else if only.is_empty() {
        Err(format!("{why}: must be empty"))
    } else {
        Err(format!("{why}: must be {only}"))
    }
}

const NEVER_STR: &str = "9223372036854775807";
/// `recompress::UNCOMPRESSED_BATCH_MAX_BYTES`, as DescribeConfigs writes it.
const DECOMPRESSED_MAX: &str = "67108864";

fn optional_ms(v: Option<u64>) -> String {
    v.map_or(-1, |v| v.min(NEVER as u64) as i64).to_string()
}

fn never_if_none(v: Option<u64>) -> String {
    v.map_or(NEVER, |v| v.min(NEVER as u64) as i64).to_string()
}

/// Parsed value of a checked setting (checks guarantee it parses).
fn long(v: &str) -> i64 {
    v.parse().unwrap_or(NEVER)
}

/// -1 (or any negative) means "no limit" for retention settings.
fn limit(v: &str) -> Option<u64> {
    u64::try_from(long(v)).ok()
}

/// Long.MAX_VALUE means "never" for flush settings, as in Kafka.
fn unless_never(v: &str) -> Option<u64> {
    let n = long(v);
    (n != NEVER).then_some(n.max(0) as u64)
}

const KEYS: &[Key] = &[
    Key {
        name: "cleanup.policy",
        broker_name: Some("log.cleanup.policy"),
        kind: ConfigType::List,
        check: |v| match v {
            "delete" => Ok(()),
            "compact" | "compact,delete" | "delete,compact" => {
                Err("compaction is not supported yet: use cleanup.policy=delete".into())
            }
            _ => Err("must be delete".into()),
        },
        default: |_| "delete".into(),
        apply: None,
    },
    // The codec levels are kept and described; recompression uses each codec's default level.
    Key {
        name: "compression.gzip.level",
        broker_name: Some("compression.gzip.level"),
        kind: ConfigType::Int,
        check: |v| match v.parse::<i32>() {
            Ok(-1 | 1..=9) => Ok(()),
            _ => Err("must be -1 or from 1 to 9".into()),
        },
        default: |_| "-1".into(),
        apply: None,
    },
    Key {
        name: "compression.lz4.level",
        broker_name: Some("compression.lz4.level"),
        kind: ConfigType::Int,
        check: |v| long_between(1, 17)(v),
        default: |_| "9".into(),
        apply: None,
    },
    Key {
        name: "compression.type",
        broker_name: Some("compression.type"),
        kind: ConfigType::String,
        check: |v| match crate::recompress::TopicCompression::parse(v) {
            Some(_) => Ok(()),
            None => Err("must be producer, uncompressed, gzip, snappy, lz4 or zstd".into()),
        },
        default: |_| "producer".into(),
        apply: None,
    },
    Key {
        name: "compression.zstd.level",
        broker_name: Some("compression.zstd.level"),
        kind: ConfigType::Int,
        check: |v| long_between(-131_072, 22)(v),
        default: |_| "3".into(),
        apply: None,
    },
    // The compaction settings are kept and described, as Kafka does, though compaction is refused.
    Key {
        name: "delete.retention.ms",
        broker_name: Some("log.cleaner.delete.retention.ms"),
        kind: ConfigType::Long,
        check: |v| long_at_least(0)(v),
        default: |_| "86400000".into(),
        apply: None,
    },
    // Share groups' dead letter queue: kept and described; there are no share groups.
    Key {
        name: "errors.deadletterqueue.group.enable",
        broker_name: None,
        kind: ConfigType::Boolean,
        check: boolean,
        default: |_| "false".into(),
        apply: None,
    },
    // Kept and described; a deleted segment's files go at once.
    Key {
        name: "file.delete.delay.ms",
        broker_name: Some("log.segment.delete.delay.ms"),
        kind: ConfigType::Long,
        check: |v| long_at_least(0)(v),
        default: |_| "60000".into(),
        apply: None,
    },
    Key {
        name: "flush.messages",
        broker_name: Some("log.flush.interval.messages"),
        kind: ConfigType::Long,
        check: |v| long_at_least(1)(v),
        default: |d| never_if_none(d.log.flush_messages),
        apply: Some(|c, v| c.flush_messages = unless_never(v)),
    },
    Key {
        name: "flush.ms",
        broker_name: Some("log.flush.interval.ms"),
        kind: ConfigType::Long,
        check: |v| long_at_least(0)(v),
        default: |d| never_if_none(d.log.flush_ms),
        apply: Some(|c, v| c.flush_ms = unless_never(v)),
    },
    Key {
        name: "follower.replication.throttled.replicas",
        broker_name: None,
        kind: ConfigType::List,
        check: |v| unsupported_unless(v, "", "replication throttling is not supported"),
        default: |_| String::new(),
        apply: None,
    },
    Key {
        name: "index.interval.bytes",
        broker_name: Some("log.index.interval.bytes"),
        kind: ConfigType::Int,
        check: |v| long_at_least(0)(v).and_then(|_| fits_int(v)),
        default: |d| d.log.index_interval_bytes.to_string(),
        apply: Some(|c, v| c.index_interval_bytes = long(v).max(1) as u64),
    },
    Key {
        name: "leader.replication.throttled.replicas",
        broker_name: None,
        kind: ConfigType::List,
        check: |v| unsupported_unless(v, "", "replication throttling is not supported"),
        default: |_| String::new(),
        apply: None,
    },
    // Tiered storage's settings: kept and described; remote.storage.enable stays false.
    Key {
        name: "local.retention.bytes",
        broker_name: Some("log.local.retention.bytes"),
        kind: ConfigType::Long,
        check: |v| long_at_least(-2)(v),
        default: |_| "-2".into(),
        apply: None,
    },
    Key {
        name: "local.retention.ms",
        broker_name: Some("log.local.retention.ms"),
        kind: ConfigType::Long,
        check: |v| long_at_least(-2)(v),
        default: |_| "-2".into(),
        apply: None,
    },
    Key {
        name: "max.compaction.lag.ms",
        broker_name: Some("log.cleaner.max.compaction.lag.ms"),
        kind: ConfigType::Long,
        check: |v| long_at_least(1)(v),
        default: |_| NEVER.to_string(),
        apply: None,
    },
    Key {
        name: "max.decompressed.message.bytes",
        broker_name: Some("max.decompressed.message.bytes"),
        kind: ConfigType::Int,
        check: |v| {
            unsupported_unless(
                v,
                DECOMPRESSED_MAX,
                "the bound on a decompressed batch is fixed",
            )
        },
        default: |_| DECOMPRESSED_MAX.into(),
        apply: None,
    },
    Key {
        name: "max.message.bytes",
        broker_name: Some("message.max.bytes"),
        kind: ConfigType::Int,
        check: |v| long_at_least(0)(v).and_then(|_| fits_int(v)),
        default: |d| d.log.max_message_bytes.to_string(),
        apply: Some(|c, v| c.max_message_bytes = long(v) as usize),
    },
    // Timestamps are not bounded: described as unlimited (Kafka 4 bounds the future to 1 hour).
    Key {
        name: "message.timestamp.after.max.ms",
        broker_name: Some("log.message.timestamp.after.max.ms"),
        kind: ConfigType::Long,
        check: |v| unsupported_unless(v, NEVER_STR, "timestamps are not checked against the clock"),
        default: |_| NEVER.to_string(),
        apply: None,
    },
    Key {
        name: "message.timestamp.before.max.ms",
        broker_name: Some("log.message.timestamp.before.max.ms"),
        kind: ConfigType::Long,
        check: |v| unsupported_unless(v, NEVER_STR, "timestamps are not checked against the clock"),
        default: |_| NEVER.to_string(),
        apply: None,
    },
    Key {
        name: "message.timestamp.type",
        broker_name: Some("log.message.timestamp.type"),
        kind: ConfigType::String,
        check: |v| match v {
            "CreateTime" | "LogAppendTime" => Ok(()),
            _ => Err("must be CreateTime or LogAppendTime".into()),
        },
        default: |_| "CreateTime".into(),
        apply: Some(|c, v| {
            c.timestamp_type = match v {
                "LogAppendTime" => TimestampType::LogAppendTime,
                _ => TimestampType::CreateTime,
            }
        }),
    },
    Key {
        name: "min.cleanable.dirty.ratio",
        broker_name: Some("log.cleaner.min.cleanable.ratio"),
        kind: ConfigType::Double,
        check: |v| match v.parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(()),
            _ => Err("must be a number from 0 to 1".into()),
        },
        default: |_| "0.5".into(),
        apply: None,
    },
    Key {
        name: "min.compaction.lag.ms",
        broker_name: Some("log.cleaner.min.compaction.lag.ms"),
        kind: ConfigType::Long,
        check: |v| long_at_least(0)(v),
        default: |_| "0".into(),
        apply: None,
    },
    Key {
        name: "min.insync.replicas",
        broker_name: Some("min.insync.replicas"),
        kind: ConfigType::Int,
        check: |v| long_at_least(1)(v).and_then(|_| fits_int(v)),
        default: |_| "1".into(),
        apply: None,
    },
    // Kept and described; segments are always preallocated (storage::file).
    Key {
        name: "preallocate",
        broker_name: Some("log.preallocate"),
        kind: ConfigType::Boolean,
        check: boolean,
        default: |_| "false".into(),
        apply: None,
    },
    Key {
        name: "remote.copy.lag.bytes",
        broker_name: Some("log.remote.copy.lag.bytes"),
        kind: ConfigType::Long,
        check: |v| long_at_least(-1)(v),
        default: |_| "-1".into(),
        apply: None,
    },
    Key {
        name: "remote.copy.lag.ms",
        broker_name: Some("log.remote.copy.lag.ms"),
        kind: ConfigType::Long,
        check: |v| long_at_least(-1)(v),
        default: |_| "0".into(),
        apply: None,
    },
    Key {
        name: "remote.log.copy.disable",
        broker_name: None,
        kind: ConfigType::Boolean,
        check: boolean,
        default: |_| "false".into(),
        apply: None,
    },
    Key {
        name: "remote.log.delete.on.disable",
        broker_name: None,
        kind: ConfigType::Boolean,
        check: boolean,
        default: |_| "false".into(),
        apply: None,
    },
    Key {
        name: "remote.storage.enable",
        broker_name: None,
        kind: ConfigType::Boolean,
        check: |v| unsupported_unless(v, "false", "tiered storage is not supported"),
        default: |_| "false".into(),
        apply: None,
    },
    Key {
        name: "retention.bytes",
        broker_name: Some("log.retention.bytes"),
        kind: ConfigType::Long,
        check: |v| long_at_least(-1)(v),
        default: |d| optional_ms(d.log.retention_bytes),
        apply: Some(|c, v| c.retention_bytes = limit(v)),
    },
    Key {
        name: "retention.ms",
        broker_name: Some("log.retention.ms"),
        kind: ConfigType::Long,
        check: |v| long_at_least(-1)(v),
        default: |d| optional_ms(d.log.retention_ms),
        apply: Some(|c, v| c.retention_ms = limit(v)),
    },
    Key {
        name: "segment.bytes",
        broker_name: Some("log.segment.bytes"),
        kind: ConfigType::Int,
        check: |v| long_at_least(14)(v).and_then(|_| fits_int(v)),
        default: |d| d.log.segment_bytes_max.to_string(),
        apply: Some(|c, v| c.segment_bytes_max = long(v) as u64),
    },
    // Kept and described; an index grows with its segment.
    Key {
        name: "segment.index.bytes",
        broker_name: Some("log.index.size.max.bytes"),
        kind: ConfigType::Int,
        check: |v| long_at_least(4)(v).and_then(|_| fits_int(v)),
        default: |_| "10485760".into(),
        apply: None,
    },
    // Kept and described; segments roll at segment.ms exactly.
    Key {
        name: "segment.jitter.ms",
        broker_name: Some("log.roll.jitter.ms"),
        kind: ConfigType::Long,
        check: |v| long_at_least(0)(v),
        default: |_| "0".into(),
        apply: None,
    },
    Key {
        name: "segment.ms",
        broker_name: Some("log.roll.ms"),
        kind: ConfigType::Long,
        check: |v| long_at_least(1)(v),
        default: |d| d.log.segment_ms.to_string(),
        apply: Some(|c, v| c.segment_ms = long(v) as u64),
    },
    Key {
        name: "unclean.leader.election.enable",
        broker_name: Some("unclean.leader.election.enable"),
        kind: ConfigType::Boolean,
        check: boolean,
        default: |_| "false".into(),
        apply: None,
    },
];

fn fits_int(v: &str) -> Result<(), String> {
    v.parse::<i32>()
        .map(|_| ())
        .map_err(|_| "must fit in a 32-bit integer".into())
}

fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// Checks that a setting exists (to delete it). The error is the message for INVALID_CONFIG.
pub fn check_name(name: &str) -> Result<(), String> {
    key(name)
        .map(|_| ())
        .ok_or_else(|| format!("unknown topic config {name}"))
}

/// Checks one setting. The error is the message for Kafka's INVALID_CONFIG.
pub fn check(name: &str, value: &str) -> Result<(), String> {
    let key = key(name).ok_or_else(|| format!("unknown topic config {name}"))?;
    (key.check)(value).map_err(|why| format!("invalid value {value} for {name}: {why}"))
}

fn key_of_broker_setting(broker_name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.broker_name == Some(broker_name))
}

/// Checks a dynamic broker setting: the broker-wide default of a topic setting, under its broker
/// name (`log.retention.ms`). The error is the message for INVALID_CONFIG.
pub fn check_broker_setting(name: &str, value: &str) -> Result<(), String> {
    let key = key_of_broker_setting(name).ok_or_else(|| not_dynamic(name))?;
    (key.check)(value).map_err(|why| format!("invalid value {value} for {name}: {why}"))
}

/// Checks that a dynamic broker setting exists (to delete it).
pub fn check_broker_setting_name(name: &str) -> Result<(), String> {
    key_of_broker_setting(name)
        .map(|_| ())
        .ok_or_else(|| not_dynamic(name))
}

fn not_dynamic(name: &str) -> String {
    format!("{name} cannot be changed at run time (only the defaults of topic settings can)")
}

/// Whether a setting holds a comma-separated list (APPEND and SUBTRACT apply to it), by topic or
/// broker name.
pub fn is_list(name: &str) -> bool {
    key(name)
        .or_else(|| key_of_broker_setting(name))
        .is_some_and(|k| k.kind == ConfigType::List)
}

/// What topics inherit from dynamic broker settings (by broker name): the cluster-wide ones, and
/// this broker's over them.
pub fn inherited(
    cluster: &BTreeMap<String, String>,
    broker: &BTreeMap<String, String>,
) -> Inherited {
    let mut inherited = Inherited::new();
    for (settings, source) in [
        (cluster, ConfigSource::DynamicDefaultBroker),
        (broker, ConfigSource::DynamicBroker),
    ] {
        for (name, value) in settings {
            if let Some(k) = key_of_broker_setting(name) {
                inherited.insert(k.name, (value.clone(), source));
            }
        }
    }
    inherited
}

/// A topic's value of one setting: its own, else inherited, else the static default.
pub fn value_of(
    name: &str,
    overrides: &BTreeMap<String, String>,
    inherited: &Inherited,
    defaults: &TopicDefaults,
) -> Option<String> {
    let k = key(name)?;
    Some(describe_key(k, overrides, inherited, defaults).value)
}

/// A topic's `compression.type` (its own, inherited or the default).
pub fn compression(
    overrides: &BTreeMap<String, String>,
    inherited: &Inherited,
    defaults: &TopicDefaults,
) -> crate::recompress::TopicCompression {
    value_of("compression.type", overrides, inherited, defaults)
        .and_then(|v| crate::recompress::TopicCompression::parse(&v))
        .unwrap_or(crate::recompress::TopicCompression::Producer)
}

/// A topic's log settings: the defaults, then what it inherits, then its own settings.
pub fn log_config(
    overrides: &BTreeMap<String, String>,
    inherited: &Inherited,
    defaults: &TopicDefaults,
) -> LogConfig {
    let mut config = defaults.log.clone();
    let inherited = inherited.iter().map(|(name, (value, _))| (*name, value));
    let own = overrides.iter().map(|(name, value)| (name.as_str(), value));
    for (name, value) in inherited.chain(own) {
        if let Some(k) = key(name)
            && let Some(apply) = k.apply
            && (k.check)(value).is_ok()
        {
            apply(&mut config, value);
        }
    }
    config
}

/// One row of DescribeConfigs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub name: &'static str,
    pub value: String,
    pub source: ConfigSource,
    pub kind: ConfigType,
}

fn describe_key(
    k: &'static Key,
    overrides: &BTreeMap<String, String>,
    inherited: &Inherited,
    defaults: &TopicDefaults,
) -> Described {
    let (value, source) = match (overrides.get(k.name), inherited.get(k.name)) {
        (Some(v), _) => (v.clone(), ConfigSource::Topic),
        (None, Some((v, source))) => (v.clone(), *source),
        (None, None) => ((k.default)(defaults), ConfigSource::Default),
    };
    Described {
        name: k.name,
        value,
        source,
        kind: k.kind,
    }
}

/// Every setting of a topic with its value and where the value comes from.
pub fn describe(
    overrides: &BTreeMap<String, String>,
    inherited: &Inherited,
    defaults: &TopicDefaults,
) -> Vec<Described> {
    KEYS.iter()
        .map(|k| describe_key(k, overrides, inherited, defaults))
        .collect()
}

/// The broker's defaults for topic settings, under their broker names: set at run time for this
/// broker, else for every broker, else at start.
pub fn describe_broker_defaults(inherited: &Inherited, defaults: &TopicDefaults) -> Vec<Described> {
    KEYS.iter()
        .filter_map(|k| {
            let (value, source) = inherited
                .get(k.name)
                .cloned()
                .unwrap_or_else(|| ((k.default)(defaults), ConfigSource::StaticBroker));
            Some(Described {
                name: k.broker_name?,
                value,
                source,
                kind: k.kind,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> TopicDefaults {
        TopicDefaults {
            partitions: 1,
            log: LogConfig::default(),
        }
    }

    #[test]
    fn settings_apply_over_defaults() {
        let mut o = BTreeMap::new();
        o.insert("retention.ms".to_string(), "-1".to_string());
        o.insert("segment.bytes".to_string(), "1048576".to_string());
        o.insert("flush.messages".to_string(), "1".to_string());
        let c = log_config(&o, &Inherited::new(), &defaults());
        assert_eq!(c.retention_ms, None);
        assert_eq!(c.segment_bytes_max, 1 << 20);
        assert_eq!(c.flush_messages, Some(1));
        assert_eq!(c.max_message_bytes, LogConfig::default().max_message_bytes);
    }

    #[test]
    fn defaults_are_reported_as_kafka_writes_them() {
        let d = describe(&BTreeMap::new(), &Inherited::new(), &defaults());
        let get = |n: &str| d.iter().find(|x| x.name == n).unwrap().value.clone();
        assert_eq!(get("retention.ms"), "604800000");
        assert_eq!(get("retention.bytes"), "-1");
        assert_eq!(get("segment.bytes"), "1073741824");
        assert_eq!(get("cleanup.policy"), "delete");
        assert_eq!(get("flush.ms"), i64::MAX.to_string());
        assert!(d.iter().all(|x| x.source == ConfigSource::Default));
    }

    #[test]
    fn every_topic_setting_of_kafka_is_described_in_its_order() {
        // Kafka 4.4's DescribeConfigs of a new topic, by name.
        let kafka = "cleanup.policy compression.gzip.level compression.lz4.level compression.type \
            compression.zstd.level delete.retention.ms errors.deadletterqueue.group.enable \
            file.delete.delay.ms flush.messages flush.ms follower.replication.throttled.replicas \
            index.interval.bytes leader.replication.throttled.replicas local.retention.bytes \
            local.retention.ms max.compaction.lag.ms max.decompressed.message.bytes \
            max.message.bytes message.timestamp.after.max.ms message.timestamp.before.max.ms \
            message.timestamp.type min.cleanable.dirty.ratio min.compaction.lag.ms \
            min.insync.replicas preallocate remote.copy.lag.bytes remote.copy.lag.ms \
            remote.log.copy.disable remote.log.delete.on.disable remote.storage.enable \
            retention.bytes retention.ms segment.bytes segment.index.bytes segment.jitter.ms \
            segment.ms unclean.leader.election.enable";
        let d = describe(&BTreeMap::new(), &Inherited::new(), &defaults());
        let names: Vec<&str> = d.iter().map(|x| x.name).collect();
        assert_eq!(names, kafka.split_whitespace().collect::<Vec<_>>());
        let get = |n: &str| d.iter().find(|x| x.name == n).unwrap().value.clone();
        assert_eq!(get("delete.retention.ms"), "86400000");
        assert_eq!(get("max.compaction.lag.ms"), i64::MAX.to_string());
        assert_eq!(get("min.cleanable.dirty.ratio"), "0.5");
        assert_eq!(get("leader.replication.throttled.replicas"), "");
        assert_eq!(NEVER_STR, i64::MAX.to_string());
        assert_eq!(
            get("max.decompressed.message.bytes"),
            crate::recompress::UNCOMPRESSED_BATCH_MAX_BYTES.to_string()
        );
    }

    #[test]
    fn compaction_settings_are_kept_and_unsupported_behaviour_is_refused() {
        for (name, value) in [
            ("delete.retention.ms", "900"),
            ("max.compaction.lag.ms", "3600000"),
            ("min.compaction.lag.ms", "0"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("segment.jitter.ms", "100"),
            ("unclean.leader.election.enable", "true"),
            ("compression.zstd.level", "-5"),
        ] {
            assert_eq!(check(name, value), Ok(()), "{name}={value}");
        }
        for (name, value, why) in [
            ("min.cleanable.dirty.ratio", "1.5", "from 0 to 1"),
            ("max.compaction.lag.ms", "0", "at least 1"),
            ("compression.gzip.level", "10", "1 to 9"),
            ("remote.storage.enable", "true", "tiered storage"),
            ("leader.replication.throttled.replicas", "*", "throttling"),
            ("message.timestamp.after.max.ms", "3600000", "not checked"),
            ("preallocate", "yes", "true or false"),
        ] {
            let err = check(name, value).unwrap_err();
            assert!(err.contains(why), "{name}={value}: {err}");
        }
        // A kept setting changes nothing in the log.
        let mut o = BTreeMap::new();
        o.insert("delete.retention.ms".to_string(), "900".to_string());
        assert_eq!(
            log_config(&o, &Inherited::new(), &defaults()),
            defaults().log
        );
        // Its broker synonym is a dynamic default, described under the broker's name.
        assert_eq!(
            check_broker_setting("log.cleaner.delete.retention.ms", "1000"),
            Ok(())
        );
        let b = describe_broker_defaults(&Inherited::new(), &defaults());
        assert!(
            b.iter()
                .any(|x| x.name == "log.cleaner.min.cleanable.ratio" && x.value == "0.5")
        );
        assert!(!b.iter().any(|x| x.name == "remote.storage.enable"));
    }

    #[test]
    fn bad_settings_are_refused_with_a_reason() {
        assert!(check("retention.ms", "100").is_ok());
        assert!(
            check("retention.ms", "-2")
                .unwrap_err()
                .contains("retention.ms")
        );
        assert!(check("segment.bytes", "99999999999").is_err());
        assert!(
            check("cleanup.policy", "compact")
                .unwrap_err()
                .contains("compaction")
        );
        assert!(check("no.such.key", "1").unwrap_err().contains("unknown"));
    }
}
