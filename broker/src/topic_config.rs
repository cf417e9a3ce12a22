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
    /// `log.retention.ms` on a broker).
    broker_name: &'static str,
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
        broker_name: "log.cleanup.policy",
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
    Key {
        name: "compression.type",
        broker_name: "compression.type",
        kind: ConfigType::String,
        check: |v| match crate::recompress::TopicCompression::parse(v) {
            Some(_) => Ok(()),
            None => Err("must be producer, uncompressed, gzip, snappy, lz4 or zstd".into()),
        },
        default: |_| "producer".into(),
        apply: None,
    },
    Key {
        name: "flush.messages",
        broker_name: "log.flush.interval.messages",
        kind: ConfigType::Long,
        check: |v| long_at_least(1)(v),
        default: |d| never_if_none(d.log.flush_messages),
        apply: Some(|c, v| c.flush_messages = unless_never(v)),
    },
    Key {
        name: "flush.ms",
        broker_name: "log.flush.interval.ms",
        kind: ConfigType::Long,
        check: |v| long_at_least(0)(v),
        default: |d| never_if_none(d.log.flush_ms),
        apply: Some(|c, v| c.flush_ms = unless_never(v)),
    },
    Key {
        name: "index.interval.bytes",
        broker_name: "log.index.interval.bytes",
        kind: ConfigType::Int,
        check: |v| long_at_least(0)(v).and_then(|_| fits_int(v)),
        default: |d| d.log.index_interval_bytes.to_string(),
        apply: Some(|c, v| c.index_interval_bytes = long(v).max(1) as u64),
    },
    Key {
        name: "max.message.bytes",
        broker_name: "message.max.bytes",
        kind: ConfigType::Int,
        check: |v| long_at_least(0)(v).and_then(|_| fits_int(v)),
        default: |d| d.log.max_message_bytes.to_string(),
        apply: Some(|c, v| c.max_message_bytes = long(v) as usize),
    },
    Key {
        name: "message.timestamp.type",
        broker_name: "log.message.timestamp.type",
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
        name: "min.insync.replicas",
        broker_name: "min.insync.replicas",
        kind: ConfigType::Int,
        check: |v| long_at_least(1)(v).and_then(|_| fits_int(v)),
        default: |_| "1".into(),
        apply: None,
    },
    Key {
        name: "retention.bytes",
        broker_name: "log.retention.bytes",
        kind: ConfigType::Long,
        check: |v| long_at_least(-1)(v),
        default: |d| optional_ms(d.log.retention_bytes),
        apply: Some(|c, v| c.retention_bytes = limit(v)),
    },
    Key {
        name: "retention.ms",
        broker_name: "log.retention.ms",
        kind: ConfigType::Long,
        check: |v| long_at_least(-1)(v),
        default: |d| optional_ms(d.log.retention_ms),
        apply: Some(|c, v| c.retention_ms = limit(v)),
    },
    Key {
        name: "segment.bytes",
        broker_name: "log.segment.bytes",
        kind: ConfigType::Int,
        check: |v| long_at_least(14)(v).and_then(|_| fits_int(v)),
        default: |d| d.log.segment_bytes_max.to_string(),
        apply: Some(|c, v| c.segment_bytes_max = long(v) as u64),
    },
    Key {
        name: "segment.ms",
        broker_name: "log.roll.ms",
        kind: ConfigType::Long,
        check: |v| long_at_least(1)(v),
        default: |d| d.log.segment_ms.to_string(),
        apply: Some(|c, v| c.segment_ms = long(v) as u64),
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
    KEYS.iter().find(|k| k.broker_name == broker_name)
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
        .map(|k| {
            let (value, source) = inherited
                .get(k.name)
                .cloned()
                .unwrap_or_else(|| ((k.default)(defaults), ConfigSource::StaticBroker));
            Described {
                name: k.broker_name,
                value,
                source,
                kind: k.kind,
            }
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
