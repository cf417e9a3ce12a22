//! `spindle serve`'s settings: flags, an optional TOML file whose keys the flags override, and
//! defaults, resolved once at start into a [`BrokerConfig`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use model::NodeId;
use serde::Deserialize;
use storage::{LogConfig, StorageConfig};

use crate::group::GroupConfig;

/// When a produce with acks=all is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    /// Once the records are fdatasync'd (group commit): they survive a power loss.
    Fsync,
    /// Once written, as Kafka does; syncs follow the topics' flush.ms / flush.messages.
    FlushPolicy,
}

/// Every setting, as a flag and as a key of the TOML file (the same name with underscores).
/// A flag given on the command line wins over the file, the file over the default.
#[derive(Debug, Default, Clone, clap::Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Address to listen on for Kafka clients [default: 127.0.0.1:9092].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// HOST:PORT given to clients in Metadata [default: the listen address].
    #[arg(long)]
    pub advertise: Option<String>,
    /// Where logs and metadata are kept [default: ./data].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Number of shards, one per core [default: the CPUs this process may run on].
    #[arg(long)]
    pub cores: Option<usize>,
    /// CPUs to pin the shards to, e.g. "0-3" or "1,3" [default: the CPUs this process may run on].
    #[arg(long)]
    pub cpuset: Option<String>,
    /// This broker's id in Metadata [default: 0].
    #[arg(long)]
    pub node_id: Option<i32>,
    /// When acks=all is acknowledged [default: fsync].
    #[arg(long, value_enum)]
    pub durability: Option<Durability>,
    /// Create topics that Metadata requests name but do not exist, as Kafka does [default: true].
    #[arg(long)]
    pub auto_create_topics: Option<bool>,
    /// Partitions of a topic created without a count [default: 1].
    #[arg(long)]
    pub default_partitions: Option<i32>,
    /// retention.ms of new topics; -1 keeps records forever [default: 604800000, 7 days].
    #[arg(long, allow_negative_numbers = true)]
    pub default_retention_ms: Option<i64>,
    /// retention.bytes of new topics, per partition; -1 is unlimited [default: -1].
    #[arg(long, allow_negative_numbers = true)]
    pub default_retention_bytes: Option<i64>,
    /// segment.bytes of new topics [default: 1073741824].
    #[arg(long)]
    pub default_segment_bytes: Option<u64>,
    /// segment.ms of new topics [default: 604800000].
    #[arg(long)]
    pub default_segment_ms: Option<u64>,
    /// flush.messages of new topics [default: none].
    #[arg(long)]
    pub default_flush_messages: Option<u64>,
    /// flush.ms of new topics [default: none].
    #[arg(long)]
    pub default_flush_ms: Option<u64>,
    /// max.message.bytes of new topics [default: 1048588].
    #[arg(long)]
    pub default_max_message_bytes: Option<usize>,
    /// The largest request accepted, socket.request.max.bytes [default: 104857600].
    #[arg(long)]
    pub request_max_bytes: Option<usize>,
    /// Memory for each shard's cache of recent batches [default: 268435456].
    #[arg(long)]
    pub cache_bytes: Option<usize>,
    /// Partitions of the consumer offsets log; fixed when the data directory is first used
    /// [default: 16].
    #[arg(long)]
    pub offsets_partitions: Option<i32>,
    /// group.initial.rebalance.delay.ms [default: 3000].
    #[arg(long)]
    pub group_initial_rebalance_delay_ms: Option<u64>,
    /// How often retention deletes old segments, log.retention.check.interval.ms [default: 30000].
    #[arg(long)]
    pub retention_check_interval_ms: Option<u64>,
    /// Replicas of a topic created without a replication factor [default: min(3, live brokers)].
    #[arg(long)]
    pub default_replication_factor: Option<i16>,
    /// This broker's rack, given to clients in Metadata and DescribeCluster (broker.rack).
    #[arg(long)]
    pub rack: Option<String>,
    /// Memory for requests being read and queued, divided among the shards; when a shard's
    /// share is spent it stops reading large requests [default: an eighth of the machine's
    /// memory].
    #[arg(long)]
    pub request_memory_bytes: Option<usize>,
    /// Memory for fetch responses read from disk and not yet sent, divided among the shards
    /// [default: an eighth of the machine's memory].
    #[arg(long)]
    pub fetch_memory_bytes: Option<usize>,
    /// How long a request may take to arrive once its first bytes have [default: 30000].
    #[arg(long)]
    pub request_read_timeout_ms: Option<u64>,
    /// Close connections that start no request for this long, connections.max.idle.ms
    /// [default: 600000].
    #[arg(long)]
    pub connections_max_idle_ms: Option<u64>,
    /// The node-to-node listener (controller and replication traffic), HOST:PORT. Needed with
    /// --controller-voters.
    #[arg(long)]
    pub cluster_listen: Option<SocketAddr>,
    /// The controller quorum: ID@HOST:PORT,... (each voter's node id and cluster listener). A
    /// node whose id is listed is a voter; one not listed is a broker only. Without it, the
    /// node is a cluster of one, its own quorum.
    #[arg(long)]
    pub controller_voters: Option<String>,
    /// A broker that sends the active controller no heartbeat for this long is fenced
    /// [default: 9000].
    #[arg(long)]
    pub broker_session_timeout_ms: Option<u64>,
    /// How often a broker sends the active controller a heartbeat [default: 2000].
    #[arg(long)]
    pub broker_heartbeat_interval_ms: Option<u64>,
    /// Shard k listens for replication from its peer shards on this port + k, on the host of
    /// --cluster-listen [default: a port the OS picks, registered with the controller].
    #[arg(long)]
    pub replication_listen_base_port: Option<u16>,
    /// A follower that has not caught up with its leader's end for this long leaves the ISR
    /// (Kafka's replica.lag.time.max.ms) [default: 30000].
    #[arg(long)]
    pub replica_lag_time_max_ms: Option<u64>,
    /// Memory for each shard's write buffers, shared by its partitions as they write
    /// [default: 67108864].
    #[arg(long)]
    pub write_buffer_bytes: Option<usize>,
    /// Disk space each shard's active segments may reserve ahead of their writes together
    /// [default: 268435456].
    #[arg(long)]
    pub preallocate_bytes: Option<u64>,
    /// Produces are refused while the data directory's filesystem has less free; 0 turns the
    /// guard off [default: 1 GiB or 2% of the filesystem, whichever is smaller].
    #[arg(long)]
    pub min_free_bytes: Option<u64>,
    /// Memory for each shard's loaded indexes of sealed segments (they load on first use)
    /// [default: 67108864].
    #[arg(long)]
    pub index_bytes: Option<usize>,
    /// Writes a partition may have on the device at once; more appends meanwhile share the
    /// next write [default: 4].
    #[arg(long)]
    pub writes_in_flight_max: Option<usize>,
    /// Writes of at most this many bytes (a partition's flush of a record or two) go through
    /// the page cache, as Kafka's all do, instead of straight to the device; 0: all direct
    /// [default: 65536].
    #[arg(long)]
    pub page_cache_write_max_bytes: Option<usize>,
    /// Each shard's journal, in the data directory: with direct IO, the small writes above are
    /// stored there (a copy into shared memory, no system call) and reach their segments later,
    /// in larger writes; 0: no journal, they go through the page cache [default: 268435456].
    #[arg(long)]
    pub journal_bytes: Option<u64>,
    /// How long a shard with nothing to do keeps polling for completions and requests before
    /// it sleeps: waking up costs more than the poll on a busy core [default: 0].
    #[arg(long)]
    pub idle_poll_us: Option<u64>,
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// A TOML file of settings (keys as the flags, with underscores); flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub settings: Settings,
}

/// A setting that cannot be used, said in words a user can act on.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("{0}")]
    Invalid(String),
}

/// The broker's resolved settings.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub listen: SocketAddr,
    pub advertise_host: String,
    pub advertise_port: i32,
    pub data_dir: PathBuf,
    /// The CPU each shard is pinned to; its length is the shard count.
    pub shard_cpus: Vec<Option<usize>>,
    pub node_id: NodeId,
    pub durability: Durability,
    pub auto_create_topics: bool,
    pub topic_defaults: TopicDefaults,
    pub request_max_bytes: usize,
    pub storage: StorageConfig,
    pub offsets_partitions: i32,
    pub group_initial_rebalance_delay: Duration,
    pub retention_check_interval: Duration,
    /// How long an idle shard polls before it sleeps.
    pub idle_poll: Duration,
    /// `None`: min(3, live brokers).
    pub default_replication_factor: Option<i16>,
    pub rack: Option<String>,
    pub memory: MemoryConfig,
    /// `None`: a cluster of one, this node its own quorum.
    pub cluster: Option<ClusterConfig>,
}

/// Each shard's memory budgets (the process's, divided by the shard count) and the timeouts
/// that keep a slow peer from holding them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryConfig {
    pub request_bytes_per_shard: usize,
    pub fetch_bytes_per_shard: usize,
    pub request_read_timeout: Duration,
    pub connections_max_idle: Duration,
}

/// How this node joins a cluster of more than itself (`--controller-voters`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The node-to-node listener.
    pub listen: SocketAddr,
    /// Every voter of the controller quorum and its cluster listener.
    pub voters: BTreeMap<NodeId, SocketAddr>,
    pub session_timeout_ms: u64,
    pub heartbeat_interval_ms: u64,
    /// Shard k's replication listener port is this + k; `None`: each picks one (port 0).
    pub replication_base_port: Option<u16>,
    pub replica_lag_time_max_ms: u64,
}

impl ClusterConfig {
    /// The voters as every node must spell them ("1@host:port,..." by id): nodes that disagree
    /// are not one cluster.
    pub fn voters_spelled(&self) -> String {
        self.voters
            .iter()
            .map(|(id, addr)| format!("{id}@{addr}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// `1@127.0.0.1:9093,2@...`: each voter's id and cluster listener, ids distinct.
fn parse_voters(list: &str) -> Result<BTreeMap<NodeId, SocketAddr>, String> {
    let mut voters = BTreeMap::new();
    for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (id, addr) = item
            .split_once('@')
            .ok_or_else(|| format!("{item:?}: expected ID@HOST:PORT"))?;
        let id: i32 = id
            .parse()
            .ok()
            .filter(|id| *id >= 0)
            .ok_or_else(|| format!("{item:?}: the node id must be a number, 0 or more"))?;
        let addr = std::net::ToSocketAddrs::to_socket_addrs(addr)
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| format!("{item:?}: {addr} is not a HOST:PORT that resolves"))?;
        if voters.insert(NodeId(id), addr).is_some() {
            return Err(format!("node {id} is listed twice"));
        }
    }
    if voters.is_empty() {
        return Err("no voters listed".into());
    }
    Ok(voters)
}

/// What a topic gets unless it says otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDefaults {
    pub partitions: i32,
    pub log: LogConfig,
}

impl BrokerConfig {
    /// The consumer group coordinators' settings.
    pub fn group_config(&self) -> GroupConfig {
        GroupConfig {
            initial_rebalance_delay_ms: self.group_initial_rebalance_delay.as_millis() as u64,
            ..GroupConfig::default()
        }
    }
}

impl ServeArgs {
    pub fn resolve(self) -> Result<BrokerConfig, ConfigError> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => Settings::default(),
        };
        self.settings.or(file).resolve()
    }
}

fn read_file(path: &Path) -> Result<Settings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.to_path_buf(),
        source: Box::new(source),
    })
}

macro_rules! or_each {
    ($a:expr, $b:expr; $($field:ident),* $(,)?) => {
        Settings { $($field: $a.$field.or($b.$field),)* }
    };
}

impl Settings {
    /// Each setting from `self` where given, else from `other`.
    fn or(self, other: Settings) -> Settings {
        or_each!(self, other;
            listen, advertise, data_dir, cores, cpuset, node_id, durability, auto_create_topics,
            default_partitions, default_retention_ms, default_retention_bytes,
            default_segment_bytes, default_segment_ms, default_flush_messages, default_flush_ms,
            default_max_message_bytes, request_max_bytes, cache_bytes, offsets_partitions,
            group_initial_rebalance_delay_ms, retention_check_interval_ms,
            default_replication_factor, rack,
            request_memory_bytes, fetch_memory_bytes, request_read_timeout_ms,
            connections_max_idle_ms, cluster_listen, controller_voters,
            broker_session_timeout_ms, broker_heartbeat_interval_ms, replica_lag_time_max_ms,
            replication_listen_base_port,
            write_buffer_bytes, preallocate_bytes, min_free_bytes, index_bytes,
            writes_in_flight_max, page_cache_write_max_bytes, journal_bytes, idle_poll_us,
        )
    }

    fn resolve(self) -> Result<BrokerConfig, ConfigError> {
        let invalid = |m: String| ConfigError::Invalid(m);
        let listen = self
            .listen
            .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9092)));
        let (advertise_host, advertise_port) = match &self.advertise {
            Some(a) => parse_host_port(a)
                .ok_or_else(|| invalid(format!("--advertise {a}: expected HOST:PORT")))?,
            None if listen.ip().is_unspecified() => {
                return Err(invalid(format!(
                    "--listen {listen} is every address: say which one clients reach with \
                     --advertise HOST:PORT"
                )));
            }
            None => (listen.ip().to_string(), i32::from(listen.port())),
        };
        let allowed = allowed_cpus();
        let cpus = match &self.cpuset {
            Some(list) => parse_cpu_list(list)
                .ok_or_else(|| invalid(format!("--cpuset {list}: expected e.g. 0-3,6")))?,
            None => allowed.clone(),
        };
        let cores = self.cores.unwrap_or(cpus.len().max(1));
        if cores == 0 {
            return Err(invalid("--cores must be at least 1".into()));
        }
        if cores > 256 {
            return Err(invalid(format!("--cores {cores}: at most 256 shards")));
        }
        // Pin shard i to the i-th CPU; with more shards than CPUs, leave them unpinned.
        let shard_cpus = if cores <= cpus.len() {
            cpus[..cores].iter().map(|&c| Some(c)).collect()
        } else {
            if self.cpuset.is_some() {
                return Err(invalid(format!(
                    "--cores {cores} needs as many CPUs, but --cpuset gives {}",
                    cpus.len()
                )));
            }
            tracing::warn!(
                cores,
                cpus = cpus.len(),
                "more shards than CPUs: shards are not pinned"
            );
            vec![None; cores]
        };
        let partitions = self.default_partitions.unwrap_or(1);
        if partitions < 1 {
            return Err(invalid("--default-partitions must be at least 1".into()));
        }
        let defaults = LogConfig::default();
        let log = LogConfig {
            retention_ms: match self.default_retention_ms {
                Some(ms) if ms < 0 => None,
                Some(ms) => Some(ms as u64),
                None => defaults.retention_ms,
            },
            retention_bytes: match self.default_retention_bytes {
                Some(b) if b < 0 => None,
                Some(b) => Some(b as u64),
                None => defaults.retention_bytes,
            },
            segment_bytes_max: self
                .default_segment_bytes
                .unwrap_or(defaults.segment_bytes_max),
            segment_ms: self.default_segment_ms.unwrap_or(defaults.segment_ms),
            flush_messages: self.default_flush_messages.or(defaults.flush_messages),
            flush_ms: self.default_flush_ms.or(defaults.flush_ms),
            max_message_bytes: self
                .default_max_message_bytes
                .unwrap_or(defaults.max_message_bytes),
            ..defaults
        };
        let offsets_partitions = self.offsets_partitions.unwrap_or(16);
        if !(1..=1000).contains(&offsets_partitions) {
            return Err(invalid("--offsets-partitions must be 1 to 1000".into()));
        }
        if self.default_replication_factor.is_some_and(|f| f < 1) {
            return Err(invalid(
                "--default-replication-factor must be at least 1".into(),
            ));
        }
        let storage_defaults = StorageConfig::default();
        let memory = self.memory(cores)?;
        let node_id = NodeId(self.node_id.unwrap_or(0));
        if node_id.0 < 0 {
            return Err(invalid(format!(
                "--node-id {}: must be 0 or more",
                node_id.0
            )));
        }
        let cluster = self.cluster(node_id, cores)?;
        Ok(BrokerConfig {
            listen,
            advertise_host,
            advertise_port,
            data_dir: self.data_dir.unwrap_or_else(|| PathBuf::from("data")),
            shard_cpus,
            node_id,
            durability: self.durability.unwrap_or(Durability::Fsync),
            auto_create_topics: self.auto_create_topics.unwrap_or(true),
            topic_defaults: TopicDefaults { partitions, log },
            request_max_bytes: self.request_max_bytes.unwrap_or(100 << 20),
            storage: StorageConfig {
                cache_bytes_max: self.cache_bytes.unwrap_or(storage_defaults.cache_bytes_max),
                write_buffer_bytes: self
                    .write_buffer_bytes
                    .unwrap_or(storage_defaults.write_buffer_bytes),
                preallocate_bytes: self
                    .preallocate_bytes
                    .unwrap_or(storage_defaults.preallocate_bytes),
                min_free_bytes: self.min_free_bytes.or(storage_defaults.min_free_bytes),
                index_bytes_max: self.index_bytes.unwrap_or(storage_defaults.index_bytes_max),
                writes_in_flight_max: self
                    .writes_in_flight_max
                    .unwrap_or(storage_defaults.writes_in_flight_max)
                    .max(1),
                page_cache_write_max_bytes: self
                    .page_cache_write_max_bytes
                    .unwrap_or(storage_defaults.page_cache_write_max_bytes),
                journal_bytes: self.journal_bytes.unwrap_or(storage_defaults.journal_bytes),
                ..storage_defaults
            },
            offsets_partitions,
            group_initial_rebalance_delay: Duration::from_millis(
                self.group_initial_rebalance_delay_ms.unwrap_or(3000),
            ),
            idle_poll: Duration::from_micros(self.idle_poll_us.unwrap_or(0)),
            retention_check_interval: Duration::from_millis(
                self.retention_check_interval_ms.unwrap_or(30_000).max(100),
            ),
            default_replication_factor: self.default_replication_factor,
            rack: self.rack.filter(|r| !r.is_empty()),
            memory,
            cluster,
        })
    }

    fn cluster(&self, node: NodeId, shards: usize) -> Result<Option<ClusterConfig>, ConfigError> {
        let invalid = |m: String| ConfigError::Invalid(m);
        let Some(list) = &self.controller_voters else {
            if self.cluster_listen.is_some() {
                return Err(invalid(
                    "--cluster-listen needs --controller-voters (the quorum to join)".into(),
                ));
            }
            if self.replication_listen_base_port.is_some() {
                return Err(invalid(
                    "--replication-listen-base-port needs --controller-voters (a node of its \
                     own replicates nothing)"
                        .into(),
                ));
            }
            return Ok(None);
        };
        if let Some(base) = self.replication_listen_base_port
            && (base == 0 || usize::from(base) + shards > usize::from(u16::MAX) + 1)
        {
            return Err(invalid(format!(
                "--replication-listen-base-port {base}: the ports of {shards} shards must be \
                 1 to 65535"
            )));
        }
        let voters =
            parse_voters(list).map_err(|e| invalid(format!("--controller-voters: {e}")))?;
        let listen = self.cluster_listen.ok_or_else(|| {
            invalid("--controller-voters needs --cluster-listen HOST:PORT".into())
        })?;
        if let Some(addr) = voters.get(&node)
            && *addr != listen
        {
            return Err(invalid(format!(
                "--controller-voters lists node {node} at {addr}, but --cluster-listen is {listen}"
            )));
        }
        let session_timeout_ms = self.broker_session_timeout_ms.unwrap_or(9000);
        let heartbeat_interval_ms = self.broker_heartbeat_interval_ms.unwrap_or(2000);
        if heartbeat_interval_ms == 0 || heartbeat_interval_ms >= session_timeout_ms {
            return Err(invalid(format!(
                "--broker-heartbeat-interval-ms {heartbeat_interval_ms} must be above 0 and below \
                 --broker-session-timeout-ms {session_timeout_ms}"
            )));
        }
        let replica_lag_time_max_ms = self.replica_lag_time_max_ms.unwrap_or(30_000);
        if replica_lag_time_max_ms == 0 {
            return Err(invalid("--replica-lag-time-max-ms must be above 0".into()));
        }
        Ok(Some(ClusterConfig {
            listen,
            voters,
            session_timeout_ms,
            heartbeat_interval_ms,
            replication_base_port: self.replication_listen_base_port,
            replica_lag_time_max_ms,
        }))
    }

    fn memory(&self, shards: usize) -> Result<MemoryConfig, ConfigError> {
        // An eighth of the machine each: with the batch cache and read-ahead (256 + 64 MiB a
        // shard) that leaves most of it to the page cache and the rest of the system.
        let share = || machine_memory_bytes() / 8;
        let per_shard = |flag: &str, total: Option<usize>| {
            let total = total.unwrap_or_else(share);
            let per_shard = total / shards;
            if per_shard < READ_BUDGET_MIN_BYTES {
                return Err(ConfigError::Invalid(format!(
                    "{flag} {total}: each of the {shards} shards needs at least \
                     {READ_BUDGET_MIN_BYTES} bytes"
                )));
            }
            Ok(per_shard)
        };
        let timeout = |flag: &str, ms: Option<u64>, default_ms: u64| match ms.unwrap_or(default_ms)
        {
            0 => Err(ConfigError::Invalid(format!("{flag} must be at least 1"))),
            ms => Ok(Duration::from_millis(ms)),
        };
        Ok(MemoryConfig {
            request_bytes_per_shard: per_shard(
                "--request-memory-bytes",
                self.request_memory_bytes,
            )?,
            fetch_bytes_per_shard: per_shard("--fetch-memory-bytes", self.fetch_memory_bytes)?,
            // What clients wait for a request before they give up on it (request.timeout.ms,
            // 30 s in librdkafka and the Java client): a frame still arriving after that is
            // of no use to anyone, and holds its memory.
            request_read_timeout: timeout(
                "--request-read-timeout-ms",
                self.request_read_timeout_ms,
                30_000,
            )?,
            connections_max_idle: timeout(
                "--connections-max-idle-ms",
                self.connections_max_idle_ms,
                600_000,
            )?,
        })
    }
}

/// The least a shard's request or fetch budget may be: one read chunk of a frame, one batch.
const READ_BUDGET_MIN_BYTES: usize = 1 << 20;

/// The machine's memory (MemTotal), or 8 GiB if /proc does not say.
fn machine_memory_bytes() -> usize {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let kib = s.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
            kib.trim().strip_suffix("kB")?.trim().parse::<usize>().ok()
        })
        .map_or(8 << 30, |kib| kib * 1024)
}

fn parse_host_port(s: &str) -> Option<(String, i32)> {
    let (host, port) = s.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    (!host.is_empty()).then(|| (host.trim_matches(['[', ']']).to_string(), i32::from(port)))
}

/// "0-3,6" as [0, 1, 2, 3, 6].
fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if a > b || b > 4095 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    cpus.dedup();
    (!cpus.is_empty()).then_some(cpus)
}

/// The CPUs this process may run on (its affinity mask), in order.
fn allowed_cpus() -> Vec<usize> {
    // /proc/self/status lists them as "Cpus_allowed_list: 0-1"; fall back to a count.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .and_then(|l| parse_cpu_list(l.trim()))
        })
        .unwrap_or_else(|| {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n).collect()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_like_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0-3,6"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("1"), Some(vec![1]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list(""), None);
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let file: Settings =
            toml::from_str("listen = \"127.0.0.1:1234\"\ndefault_partitions = 3\ncores = 1")
                .unwrap();
        let flags = Settings {
            default_partitions: Some(5),
            ..Settings::default()
        };
        let config = flags.or(file).resolve().unwrap();
        assert_eq!(config.listen.port(), 1234);
        assert_eq!(config.topic_defaults.partitions, 5);
        assert_eq!(config.shard_cpus.len(), 1);
        assert_eq!(config.advertise_port, 1234);
        assert_eq!(config.durability, Durability::Fsync);
        assert!(toml::from_str::<Settings>("no_such_key = 1").is_err());
    }

    #[test]
    fn memory_budgets_are_divided_among_the_shards() {
        let settings: Settings = toml::from_str(
            "cores = 2\nrequest_memory_bytes = 67108864\nfetch_memory_bytes = 33554432\n\
             request_read_timeout_ms = 2000",
        )
        .unwrap();
        let memory = settings.resolve().unwrap().memory;
        assert_eq!(memory.request_bytes_per_shard, 32 << 20);
        assert_eq!(memory.fetch_bytes_per_shard, 16 << 20);
        assert_eq!(memory.request_read_timeout, Duration::from_secs(2));
        assert_eq!(memory.connections_max_idle, Duration::from_secs(600));
        let defaults = Settings::default().resolve().unwrap().memory;
        assert!(defaults.request_bytes_per_shard >= READ_BUDGET_MIN_BYTES);
        let tiny = Settings {
            cores: Some(2),
            fetch_memory_bytes: Some(1000),
            ..Settings::default()
        };
        assert!(
            tiny.resolve()
                .unwrap_err()
                .to_string()
                .contains("--fetch-memory-bytes")
        );
    }

    #[test]
    fn the_replication_base_port_is_a_cluster_nodes_and_fits_every_shard() {
        let cluster = "controller_voters = \"1@127.0.0.1:9192\"\ncluster_listen = \"127.0.0.1:9192\"\n\
                       node_id = 1\ncores = 2\n";
        let with = |extra: &str| toml::from_str::<Settings>(&format!("{cluster}{extra}")).unwrap();
        let base = with("replication_listen_base_port = 9300")
            .resolve()
            .unwrap();
        assert_eq!(base.cluster.unwrap().replication_base_port, Some(9300));
        let picked = with("").resolve().unwrap();
        assert_eq!(picked.cluster.unwrap().replication_base_port, None);
        let past_the_end = with("replication_listen_base_port = 65535").resolve();
        assert!(past_the_end.unwrap_err().to_string().contains("1 to 65535"));
        let alone = Settings {
            replication_listen_base_port: Some(9300),
            ..Settings::default()
        };
        assert!(
            alone
                .resolve()
                .unwrap_err()
                .to_string()
                .contains("--controller-voters")
        );
    }

    #[test]
    fn unusable_settings_are_refused_with_a_reason() {
        let zero = Settings {
            cores: Some(0),
            ..Settings::default()
        };
        assert!(zero.resolve().unwrap_err().to_string().contains("cores"));
        let every = Settings {
            listen: Some("0.0.0.0:9092".parse().unwrap()),
            ..Settings::default()
        };
        assert!(
            every
                .resolve()
                .unwrap_err()
                .to_string()
                .contains("--advertise")
        );
    }
}
