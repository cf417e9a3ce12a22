//! Settings of brokers and groups changed at run time (IncrementalAlterConfigs, AlterConfigs),
//! kept in the metadata (`ClusterMetadata::resource_configs`, changed by `Command::SetResourceConfigs`) so they survive a restart.
//!
//! Dynamic broker settings are the defaults of topic settings under their broker names
//! (`log.retention.ms`); cluster-wide ones (resource name "") and this broker's (its id) reach
//! every topic that does not set its own at the next metadata version, without a restart.
//! Group settings are Kafka 4.0's `GroupConfig` (KIP-848 and share groups): kept, checked and
//! described as Kafka does; the classic group protocol this broker serves does not read them.

use std::collections::BTreeMap;

use model::{ClusterMetadata, NodeId};

pub use model::ConfigResource;

use crate::topic_config::{self, ConfigSource, ConfigType, Described, Inherited};

/// Kafka's config resource types.
pub const TOPIC: i8 = 2;
pub const BROKER: i8 = ConfigResource::BROKER;
pub const GROUP: i8 = ConfigResource::GROUP;

/// Checks one setting of `resource`'s kind; the error is an INVALID_CONFIG message.
pub fn check(resource: &ConfigResource, name: &str, value: &str) -> Result<(), String> {
    match resource {
        ConfigResource::Broker(_) => match broker_only_key(name) {
            Some(key) => check_broker_only(key, value),
            None => topic_config::check_broker_setting(name, value),
        },
        ConfigResource::Group(_) => check_group_setting(name, value),
    }
}

pub fn check_name(resource: &ConfigResource, name: &str) -> Result<(), String> {
    match resource {
        ConfigResource::Broker(_) if broker_only_key(name).is_some() => Ok(()),
        ConfigResource::Broker(_) => topic_config::check_broker_setting_name(name),
        ConfigResource::Group(_) => group_key(name).map(|_| ()),
    }
}

/// Checks a whole set of settings together (group settings bound each other).
pub fn check_set(
    resource: &ConfigResource,
    settings: &BTreeMap<String, String>,
) -> Result<(), String> {
    match resource {
        ConfigResource::Broker(_) => Ok(()),
        ConfigResource::Group(_) => check_group_set(settings),
    }
}

/// What topics inherit from the dynamic broker settings of `metadata` on broker `node_id`.
pub fn inherited(metadata: &ClusterMetadata, node_id: NodeId) -> Inherited {
    let empty = BTreeMap::new();
    let of = |name: String| {
        metadata
            .resource_configs
            .get(&ConfigResource::Broker(name))
            .unwrap_or(&empty)
    };
    topic_config::inherited(of(String::new()), of(node_id.to_string()))
}

// ---- broker settings Kafka changes at run time for parts Spindle does not have ----

/// Kafka's dynamic broker settings of its thread pools and SASL logins: Spindle has neither (a
/// shard per core; no SASL), so they are kept and described, without effect, for the tools and
/// scripts that set them (librdkafka's test 0081 sets sasl.kerberos.min.time.before.relogin and
/// background.threads).
struct BrokerOnlyKey {
    name: &'static str,
    kind: ConfigType,
    default: &'static str,
    min: i64,
}

const BROKER_ONLY_KEYS: &[BrokerOnlyKey] = &[
    BrokerOnlyKey {
        name: "background.threads",
        kind: ConfigType::Int,
        default: "10",
        min: 1,
    },
    BrokerOnlyKey {
        name: "log.cleaner.threads",
        kind: ConfigType::Int,
        default: "1",
        min: 0,
    },
    BrokerOnlyKey {
        name: "num.io.threads",
        kind: ConfigType::Int,
        default: "8",
        min: 1,
    },
    BrokerOnlyKey {
        name: "num.network.threads",
        kind: ConfigType::Int,
        default: "3",
        min: 1,
    },
    BrokerOnlyKey {
        name: "num.recovery.threads.per.data.dir",
        kind: ConfigType::Int,
        default: "2",
        min: 1,
    },
    BrokerOnlyKey {
        name: "num.replica.fetchers",
        kind: ConfigType::Int,
        default: "1",
        min: 1,
    },
    BrokerOnlyKey {
        name: "sasl.kerberos.min.time.before.relogin",
        kind: ConfigType::Long,
        default: "60000",
        min: 0,
    },
];

fn broker_only_key(name: &str) -> Option<&'static BrokerOnlyKey> {
    BROKER_ONLY_KEYS.iter().find(|k| k.name == name)
}

fn check_broker_only(key: &BrokerOnlyKey, value: &str) -> Result<(), String> {
    let fits = match key.kind {
        ConfigType::Int => value.parse::<i32>().is_ok_and(|v| i64::from(v) >= key.min),
        _ => value.parse::<i64>().is_ok_and(|v| v >= key.min),
    };
    if fits {
        Ok(())
    } else {
        Err(format!(
            "invalid value {value} for {}: must be a whole number of at least {}",
            key.name, key.min
        ))
    }
}

/// The settings of [`BROKER_ONLY_KEYS`] on broker `node_id`: its own, else the cluster-wide
/// ones, else Kafka's defaults.
pub fn describe_broker_only(metadata: &ClusterMetadata, node_id: NodeId) -> Vec<Described> {
    let of = |name: String| metadata.resource_configs.get(&ConfigResource::Broker(name));
    let (own, cluster) = (of(node_id.to_string()), of(String::new()));
    BROKER_ONLY_KEYS
        .iter()
        .map(|k| {
            let (value, source) = match (
                own.and_then(|s| s.get(k.name)),
                cluster.and_then(|s| s.get(k.name)),
            ) {
                (Some(v), _) => (v.clone(), ConfigSource::DynamicBroker),
                (None, Some(v)) => (v.clone(), ConfigSource::DynamicDefaultBroker),
                (None, None) => (k.default.to_owned(), ConfigSource::Default),
            };
            Described {
                name: k.name,
                value,
                source,
                kind: k.kind,
            }
        })
        .collect()
}

// ---- group settings (Kafka 4.0's GroupConfig and GroupCoordinatorConfig defaults) ----

struct GroupKey {
    name: &'static str,
    kind: ConfigType,
    default: &'static str,
    /// Allowed range (for ints), from the broker's group.*.min/max settings' defaults.
    range: Option<(i64, i64)>,
    /// Allowed values (for strings).
    values: &'static [&'static str],
}

const GROUP_KEYS: &[GroupKey] = &[
    GroupKey {
        name: "consumer.heartbeat.interval.ms",
        kind: ConfigType::Int,
        default: "5000",
        range: Some((5_000, 15_000)),
        values: &[],
    },
    GroupKey {
        name: "consumer.session.timeout.ms",
        kind: ConfigType::Int,
        default: "45000",
        range: Some((45_000, 60_000)),
        values: &[],
    },
    GroupKey {
        name: "share.auto.offset.reset",
        kind: ConfigType::String,
        default: "latest",
        range: None,
        values: &["latest", "earliest"],
    },
    GroupKey {
        name: "share.heartbeat.interval.ms",
        kind: ConfigType::Int,
        default: "5000",
        range: Some((5_000, 15_000)),
        values: &[],
    },
    GroupKey {
        name: "share.record.lock.duration.ms",
        kind: ConfigType::Int,
        default: "30000",
        range: Some((15_000, 60_000)),
        values: &[],
    },
    GroupKey {
        name: "share.session.timeout.ms",
        kind: ConfigType::Int,
        default: "45000",
        range: Some((45_000, 60_000)),
        values: &[],
    },
];

fn group_key(name: &str) -> Result<&'static GroupKey, String> {
    GROUP_KEYS
        .iter()
        .find(|k| k.name == name)
        .ok_or_else(|| format!("unknown group config {name}"))
}

fn check_group_setting(name: &str, value: &str) -> Result<(), String> {
    let key = group_key(name)?;
    let fits = match key.range {
        Some((min, max)) => value.parse::<i64>().is_ok_and(|v| (min..=max).contains(&v)),
        None => key.values.contains(&value),
    };
    if fits {
        return Ok(());
    }
    let allowed = match key.range {
        Some((min, max)) => format!("a whole number from {min} to {max}"),
        None => key.values.join(" or "),
    };
    Err(format!(
        "invalid value {value} for {name}: must be {allowed}"
    ))
}

/// Kafka's cross checks: a session outlasts the heartbeat interval.
fn check_group_set(settings: &BTreeMap<String, String>) -> Result<(), String> {
    let int = |name: &str| -> i64 {
        settings
            .get(name)
            .map(String::as_str)
            .or_else(|| group_key(name).ok().map(|k| k.default))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    for kind in ["consumer", "share"] {
        let session = format!("{kind}.session.timeout.ms");
        let heartbeat = format!("{kind}.heartbeat.interval.ms");
        if int(&session) <= int(&heartbeat) {
            return Err(format!("{session} must be greater than {heartbeat}"));
        }
    }
    Ok(())
}

/// Every setting of a group with its value and source (GROUP_CONFIG where set, else DEFAULT).
pub fn describe_group(settings: Option<&BTreeMap<String, String>>) -> Vec<Described> {
    GROUP_KEYS
        .iter()
        .map(|k| match settings.and_then(|s| s.get(k.name)) {
            Some(v) => Described {
                name: k.name,
                value: v.clone(),
                source: ConfigSource::Group,
                kind: k.kind,
            },
            None => Described {
                name: k.name,
                value: k.default.to_owned(),
                source: ConfigSource::Default,
                kind: k.kind,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_settings_are_checked_as_kafka_checks_them() {
        let group = ConfigResource::Group("g".into());
        assert!(check(&group, "consumer.session.timeout.ms", "50000").is_ok());
        assert!(check(&group, "consumer.session.timeout.ms", "1000").is_err());
        assert!(check(&group, "share.auto.offset.reset", "earliest").is_ok());
        assert!(check(&group, "share.auto.offset.reset", "none").is_err());
        assert!(check_name(&group, "session.timeout.ms").is_err());
        let mut s = BTreeMap::new();
        assert!(check_set(&group, &s).is_ok());
        s.insert("consumer.heartbeat.interval.ms".into(), "15000".into());
        s.insert("consumer.session.timeout.ms".into(), "45000".into());
        assert!(check_set(&group, &s).is_ok());
        let described = describe_group(Some(&s));
        let row = |n: &str| described.iter().find(|d| d.name == n).unwrap().clone();
        assert_eq!(
            row("consumer.session.timeout.ms").source,
            ConfigSource::Group
        );
        assert_eq!(
            row("share.session.timeout.ms").source,
            ConfigSource::Default
        );
        assert_eq!(row("share.session.timeout.ms").value, "45000");
    }

    #[test]
    fn this_brokers_settings_win_over_cluster_wide_ones() {
        let mut m = ClusterMetadata::new("c".into());
        let mut cluster = BTreeMap::new();
        cluster.insert("log.retention.ms".to_string(), "1000".to_string());
        cluster.insert("log.segment.bytes".to_string(), "1048576".to_string());
        let mut own = BTreeMap::new();
        own.insert("log.retention.ms".to_string(), "2000".to_string());
        m.resource_configs
            .insert(ConfigResource::Broker(String::new()), cluster);
        m.resource_configs
            .insert(ConfigResource::Broker("3".into()), own);
        let inherited = inherited(&m, NodeId(3));
        assert_eq!(
            inherited.get("retention.ms"),
            Some(&("2000".to_string(), ConfigSource::DynamicBroker))
        );
        assert_eq!(
            inherited.get("segment.bytes"),
            Some(&("1048576".to_string(), ConfigSource::DynamicDefaultBroker))
        );
        assert_eq!(
            super::inherited(&m, NodeId(4))
                .get("retention.ms")
                .unwrap()
                .0,
            "1000"
        );
    }
}
