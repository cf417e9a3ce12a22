//! `spindle serve`: the process. It locks the data directory, loads the metadata, starts one
//! pinned glommio executor per shard, and turns SIGTERM/SIGINT into a clean stop of all of them.
//!
//! A shard starts by opening the logs it owns and connecting to the other shards; shard 0 then
//! creates the internal offsets topic if needed; only when every shard is ready does any of them
//! listen. Stopping goes the other way: stop accepting, let connections finish what they started,
//! wait for every shard to get there, then close every log cleanly.

use std::cell::{Cell, OnceCell};
use std::net::SocketAddr;
use std::os::fd::IntoRawFd;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use futures_channel::oneshot;
use futures_lite::future;
use glommio::{LocalExecutorBuilder, Placement};
use net::ConnectionConfig;
use net::frame::ReadTimeouts;
use storage::{IoMode, ResolvedIoMode, ShardStorage, StorageConfig};

use model::{BrokerRegistration, ClusterMetadata, Command, ShardId};

use crate::cluster::Cluster;
use crate::config::BrokerConfig;
use crate::handler::Connection;
use crate::mesh::{self, Mesh};
use crate::metadata;
use crate::replication::Replication;
use crate::shard::Shard;

/// How long a stopping shard lets its connections finish their requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a port in use is waited for at start (a killed broker's may linger that long).
const PORT_FREE_WAIT: Duration = Duration::from_secs(5);
const PORT_RETRY_INTERVAL: Duration = Duration::from_millis(50);
/// A shard's direct-IO memory beyond its write-buffer budget: tail pages and segment reads.
const IO_MEMORY_HEADROOM_BYTES: usize = 8 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("data directory {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(
        "data directory {0} is in use by another spindle process (stop it, or use another --data-dir)"
    )]
    Locked(std::path::PathBuf),
    #[error(transparent)]
    Metadata(#[from] crate::metadata::MetadataError),
    #[error(
        "data directory {path} belongs to node {owner}, not node {node}: start with --node-id {owner}, or use another --data-dir"
    )]
    ForeignDataDir {
        path: std::path::PathBuf,
        node: model::NodeId,
        owner: model::NodeId,
    },
    #[error("registering this node: {0}")]
    Register(model::ApplyError),
    #[error(
        "data directory {path} belongs to cluster {theirs}, but this node's --controller-voters make cluster {ours} (another set of voters, or a node of its own): use another --data-dir"
    )]
    OtherCluster {
        path: std::path::PathBuf,
        theirs: String,
        ours: String,
    },
    #[error(transparent)]
    Refused(#[from] crate::cluster::PreflightError),
    #[error(transparent)]
    Storage(#[from] storage::IoFailure),
    #[error("starting shard {shard}: {reason}")]
    Shard { shard: usize, reason: String },
    #[error("signal handling: {0}")]
    Signals(std::io::Error),
    #[error("listening on {addr}: {source} (is another broker listening there?)")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A meeting point for the shards, awaited without blocking an executor (a blocked executor
/// could not run the work other shards send it while they wait).
#[derive(Debug, Clone)]
struct Rendezvous {
    arrived: Arc<AtomicUsize>,
    /// Set by a shard that failed: the others stop waiting for it.
    failed: Arc<AtomicBool>,
    shards: usize,
    /// Each shard's replication port, set before the first round, for the registration shard
    /// 0 heartbeats.
    replication_ports: Arc<[AtomicU16]>,
}

impl Rendezvous {
    fn new(shards: usize) -> Self {
        Rendezvous {
            arrived: Arc::new(AtomicUsize::new(0)),
            failed: Arc::new(AtomicBool::new(false)),
            shards,
            replication_ports: (0..shards).map(|_| AtomicU16::new(0)).collect(),
        }
    }

    fn set_replication_port(&self, shard: usize, port: u16) {
        if let Some(slot) = self.replication_ports.get(shard) {
            slot.store(port, Ordering::Release);
        }
    }

    /// Every shard's replication port (after the first round).
    fn replication_ports(&self) -> Vec<u16> {
        self.replication_ports
            .iter()
            .map(|p| p.load(Ordering::Acquire))
            .collect()
    }

    /// Waits until every shard has called this `round` times (rounds are 1, 2, ...); fails if
    /// a shard failed.
    async fn meet(&self, round: usize) -> Result<(), String> {
        self.arrived.fetch_add(1, Ordering::AcqRel);
        while self.arrived.load(Ordering::Acquire) < round * self.shards {
            if self.failed.load(Ordering::Acquire) {
                return Err("another shard failed to start".into());
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        Ok(())
    }

    fn fail(&self) {
        self.failed.store(true, Ordering::Release);
    }
}

/// The stop signals of every shard, sent once by whoever asks first: a signal, or a shard that
/// failed (the others must not go on without it).
#[derive(Debug, Clone, Default)]
struct Stops(Arc<Mutex<Vec<oneshot::Sender<()>>>>);

impl Stops {
    fn add(&self, stop: oneshot::Sender<()>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(stop);
    }

    /// Stops every shard; false if they were already told.
    fn stop_all(&self) -> bool {
        let stops = std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()));
        let first = !stops.is_empty();
        for stop in stops {
            let _ = stop.send(());
        }
        first
    }
}

pub fn run(config: BrokerConfig) -> Result<(), ServeError> {
    let mut config = config;
    port_is_free(config.listen).map_err(|source| ServeError::Listen {
        addr: config.listen,
        source,
    })?;
    if let Some(cluster) = &config.cluster {
        // Before anything on disk changes: a node the others refuse stops here.
        crate::cluster::preflight(
            config.node_id,
            cluster,
            uuid::Uuid::new_v4().as_u64_pair().0,
        )?;
    }
    let data_dir = config.data_dir.clone();
    std::fs::create_dir_all(&data_dir).map_err(|source| ServeError::DataDir {
        path: data_dir.clone(),
        source,
    })?;
    // Absolute from here on: glommio opens directories relative to no directory (openat(-1)),
    // so a relative path (the default ./data) would fail at the first directory sync.
    let data_dir = std::fs::canonicalize(&data_dir).map_err(|source| ServeError::DataDir {
        path: data_dir.clone(),
        source,
    })?;
    config.data_dir = data_dir.clone();
    let _lock = lock(&data_dir)?;
    let shards = config.shard_cpus.len();
    let metadata = match &config.cluster {
        None => register(&config, shards)?,
        Some(cluster) => open_cluster_dir(&config, cluster)?,
    };
    let io_mode = storage::resolve_io_mode(&data_dir, IoMode::Auto)?;
    // Before any shard opens a log, whichever shard wrote each journal (the count may differ).
    let replayed = storage::journal::replay(&data_dir)?;
    let open_files_max = raise_open_files_limit();
    tracing::info!(
        listen = %config.listen,
        data_dir = %data_dir.display(),
        shards,
        node = %config.node_id,
        topics = metadata.visible_topics().count(),
        io = ?io_mode,
        durability = ?config.durability,
        open_files_max,
        journal_entries_replayed = replayed.entries,
        "starting"
    );
    let config = Arc::new(config);
    let metadata = Arc::new(metadata);
    let rendezvous = Rendezvous::new(shards);
    let stops = Stops::default();
    let (exits, exited) = mpsc::channel();
    let mut executors = Vec::new();
    for (id, ends) in mesh::channels::<Shard>(shards).into_iter().enumerate() {
        let (stop, stopped) = oneshot::channel::<()>();
        stops.add(stop);
        let placement = match config.shard_cpus[id] {
            Some(cpu) => Placement::Fixed(cpu),
            None => Placement::Unbound,
        };
        let (config, metadata, rendezvous) = (config.clone(), metadata.clone(), rendezvous.clone());
        let exits = exits.clone();
        let executor = LocalExecutorBuilder::new(placement)
            .name(&format!("shard-{id}"))
            .spin_before_park(config.idle_poll)
            // Write buffers come from this pool (registered with io_uring when the memlock limit
            // allows): memory faulted in once and reused, where buffers from the heap were fresh
            // pages to zero at every write (a tenth of the shard's time at 10,000 partitions).
            .io_memory(config.storage.write_buffer_bytes + IO_MEMORY_HEADROOM_BYTES)
            .spawn(move || async move {
                let result = run_shard(
                    id,
                    config,
                    metadata,
                    io_mode,
                    ends,
                    rendezvous.clone(),
                    stopped,
                )
                .await;
                if result.is_err() {
                    rendezvous.fail();
                }
                let _ = exits.send((id, result.clone()));
                result
            })
            .map_err(|e| ServeError::Shard {
                shard: id,
                reason: e.to_string(),
            })?;
        executors.push(executor);
    }
    drop(exits);
    spawn_signal_thread(stops.clone())?;
    // A shard that fails takes the others down with it, cleanly.
    let mut failure = None;
    for (shard, result) in exited.iter() {
        if let Err(reason) = result {
            tracing::error!(shard, %reason, "shard failed: stopping the others");
            failure.get_or_insert(ServeError::Shard { shard, reason });
            stops.stop_all();
        }
    }
    for executor in executors {
        if let Err(e) = executor.join() {
            failure.get_or_insert(ServeError::Shard {
                shard: usize::MAX,
                reason: e.to_string(),
            });
        }
    }
    match failure {
        Some(e) => Err(e),
        None => {
            tracing::info!("stopped cleanly");
            Ok(())
        }
    }
}

/// Loads this node's metadata (new for a new data directory) and registers the node in it: the
/// start-up command of a quorum of one. Saved only when that changed something (a new directory,
/// a new shard count or address), so a broker with a full disk still starts.
fn register(config: &BrokerConfig, shards: usize) -> Result<ClusterMetadata, ServeError> {
    let data_dir = &config.data_dir;
    let node = config.node_id;
    let mut metadata = metadata::load(data_dir, node)?
        .unwrap_or_else(|| ClusterMetadata::new(uuid::Uuid::new_v4().simple().to_string()));
    // One node keeps a quorum of one: a directory whose metadata registers other nodes and not
    // this one was another node's, and its partitions are not ours to serve.
    if let Some(owner) = metadata.brokers.keys().find(|&&id| id != node)
        && !metadata.brokers.contains_key(&node)
    {
        return Err(ServeError::ForeignDataDir {
            path: data_dir.clone(),
            node,
            owner: *owner,
        });
    }
    let before = metadata.version;
    let registration = Command::RegisterBroker(BrokerRegistration {
        id: node,
        host: config.advertise_host.clone(),
        port: u16::try_from(config.advertise_port).unwrap_or(0),
        cluster_listener: None,
        shards: u16::try_from(shards).unwrap_or(u16::MAX),
        rack: config.rack.clone(),
        fenced: false,
        replication_ports: Vec::new(),
    });
    model::apply(&mut metadata, &registration).map_err(ServeError::Register)?;
    if metadata.version != before || !metadata::path(data_dir).exists() {
        metadata::save(&metadata, data_dir)?;
    }
    Ok(metadata)
}

/// The metadata a cluster node starts its shards with: its last copy (the quorum's log, or for a
/// broker-only node the controller, brings it up to date), after checking that the directory
/// is this node's and this cluster's. Writes nothing but, on a new directory, which node it is.
fn open_cluster_dir(
    config: &BrokerConfig,
    cluster: &crate::config::ClusterConfig,
) -> Result<ClusterMetadata, ServeError> {
    let data_dir = &config.data_dir;
    let node = config.node_id;
    let ours = crate::cluster::cluster_id(cluster);
    let metadata = metadata::load(data_dir, node)?;
    if let Some(m) = &metadata
        && m.cluster_id != ours
    {
        return Err(ServeError::OtherCluster {
            path: data_dir.clone(),
            theirs: m.cluster_id.clone(),
            ours,
        });
    }
    let owner = metadata::owner(data_dir)?;
    match owner {
        Some(owner) if owner != node => {
            return Err(ServeError::ForeignDataDir {
                path: data_dir.clone(),
                node,
                owner,
            });
        }
        Some(_) => {}
        None if metadata.is_some() => {
            // A directory of a node of its own, never a cluster's (those record their node).
            return Err(ServeError::OtherCluster {
                path: data_dir.clone(),
                theirs: metadata.map(|m| m.cluster_id).unwrap_or_default(),
                ours,
            });
        }
        None => metadata::set_owner(data_dir, node)?,
    }
    Ok(metadata.unwrap_or_else(|| ClusterMetadata::new(ours)))
}

/// Raises the soft limit of open files to the hard limit, as far as the kernel allows, and
/// returns the limit: segments and connections are all files, and a broker of thousands of
/// partitions needs thousands (Kafka's guide asks for 100,000).
fn raise_open_files_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    // An unlimited hard limit is still bounded by fs.nr_open (1,048,576 by default).
    let want = hard.min(1 << 20);
    if want > soft && setrlimit(Resource::RLIMIT_NOFILE, want, hard).is_ok() {
        return want;
    }
    soft
}

/// Holds an exclusive lock on the data directory for as long as the returned file lives.
fn lock(data_dir: &Path) -> Result<std::fs::File, ServeError> {
    use std::os::fd::AsRawFd;
    let path = data_dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| ServeError::DataDir {
            path: path.clone(),
            source,
        })?;
    nix::fcntl::flock(
        file.as_raw_fd(),
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    )
    .map_err(|_| ServeError::Locked(data_dir.to_path_buf()))?;
    Ok(file)
}

/// The first SIGTERM or SIGINT stops every shard cleanly; a second one ends the process at once.
fn spawn_signal_thread(stops: Stops) -> Result<(), ServeError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).map_err(ServeError::Signals)?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if stops.stop_all() {
                    tracing::info!(signal, "stopping: finishing requests in flight");
                } else {
                    tracing::warn!(signal, "second signal: exiting without a clean stop");
                    std::process::exit(1);
                }
            }
        })
        .map_err(ServeError::Signals)?;
    Ok(())
}

async fn run_shard(
    id: usize,
    config: Arc<BrokerConfig>,
    metadata: Arc<ClusterMetadata>,
    io_mode: ResolvedIoMode,
    ends: mesh::Ends<Shard>,
    rendezvous: Rendezvous,
    stop: oneshot::Receiver<()>,
) -> Result<(), String> {
    let context = Rc::new(OnceCell::new());
    let mesh = Mesh::connect(id, ends, context.clone()).await;
    let storage_config = StorageConfig {
        shard_index: id,
        ..config.storage.clone()
    };
    let storage = ShardStorage::open(&config.data_dir, storage_config, io_mode)
        .await
        .map_err(|e| e.to_string())?;
    let shard = Rc::new(Shard::new(id, config.clone(), storage, metadata.clone()));
    shard.set_mesh(mesh);
    let _ = context.set(Rc::downgrade(&shard));
    if config.cluster.is_some() {
        // Before the first metadata: every partition the shard opens is replicated.
        let shard_id = ShardId(u16::try_from(id).map_err(|e| e.to_string())?);
        shard.set_replication(Replication::new(
            Rc::downgrade(&shard),
            config.node_id,
            shard_id,
        ));
    }
    shard
        .apply_metadata(metadata)
        .await
        .map_err(|e| e.to_string())?;
    listen_for_replication(&config, id, shard.replication(), &rendezvous).await?;
    rendezvous.meet(1).await?;
    let mut stop = stop;
    let mut cluster = None;
    if id == 0 {
        match &config.cluster {
            None => crate::proposals::ensure_offsets_topic(&shard, config.offsets_partitions)
                .await
                .map_err(|e| e.message)?,
            Some(_) => {
                let ports = rendezvous.replication_ports();
                let c = Cluster::start(&shard, &config, ports).map_err(|e| e.to_string())?;
                if let Some(controller) = shard.controller() {
                    controller.set_cluster(c.clone());
                }
                tracing::info!("joining the cluster: waiting to be registered");
                let joined = future::or(async { Some(c.registered().await) }, async {
                    let _ = (&mut stop).await;
                    None
                })
                .await;
                match joined {
                    Some(Ok(())) => tracing::info!("registered with the active controller"),
                    Some(Err(why)) => return Err(why),
                    None => return Err("stopped before joining the cluster".into()),
                }
                cluster = Some(c);
            }
        }
    }
    rendezvous.meet(2).await?;
    crate::groups::open_coordinators(&shard)
        .await
        .map_err(|e| e.to_string())?;
    rendezvous.meet(3).await?;

    let listener =
        listen(config.listen, true).map_err(|e| format!("listening on {}: {e}", config.listen))?;
    tracing::info!(
        shard = id,
        request_memory_bytes = shard.request_memory.capacity_bytes(),
        fetch_memory_bytes = shard.fetch_memory.capacity_bytes(),
        cache_bytes = config.storage.cache_bytes_max,
        readahead_bytes = config.storage.readahead_bytes_max,
        in_use_bytes = shard.request_memory.used_bytes()
            + shard.fetch_memory.used_bytes()
            + shard.storage.cache_used_bytes(),
        "memory budgets"
    );
    if id == 0 {
        tracing::info!(listen = %config.listen, "ready");
    }
    glommio::spawn_local(shard.clone().housekeeping(config.retention_check_interval)).detach();
    let open_connections = Rc::new(Cell::new(0usize));
    let accepting = accept_loop(&shard, &listener, &open_connections);
    let fatal = future::or(
        async {
            accepting.await;
            None
        },
        future::or(
            async {
                let _ = stop.await;
                None
            },
            async {
                loop {
                    if let Some(why) = cluster.as_ref().and_then(|c| c.fatal()) {
                        return Some(why);
                    }
                    glommio::timer::sleep(Duration::from_millis(100)).await;
                }
            },
        ),
    )
    .await;
    drop(listener);

    if let (Some(c), None) = (&cluster, &fatal) {
        // Leaderships move to the other replicas before this node stops serving them.
        c.shut_down().await;
    }
    shard.shutdown.trigger();
    // A JoinGroup may wait minutes for its rebalance: closing the coordinators answers it, so
    // the connections can drain.
    crate::groups::close_coordinators(&shard).await;
    let drained = glommio::timer::timeout(DRAIN_TIMEOUT, async {
        while open_connections.get() > 0 {
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
        Ok(())
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            shard = id,
            open = open_connections.get(),
            "connections still open after the drain timeout"
        );
    }
    // Every shard has drained before any closes its logs: another shard's last requests may
    // still be writing to ours. A failed shard must not hold the others' clean stop.
    let _ = rendezvous.meet(4).await;
    shard.close().await;
    match fatal {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// A cluster node's shard listens for its peer shards' replication (on the host of
/// `--cluster-listen`, port base + shard or one the OS picks), records its port for the node's
/// registration, and starts replicating.
async fn listen_for_replication(
    config: &BrokerConfig,
    id: usize,
    replication: Option<&Rc<Replication>>,
    rendezvous: &Rendezvous,
) -> Result<(), String> {
    let (Some(cluster), Some(replication)) = (&config.cluster, replication) else {
        return Ok(());
    };
    let shard = u16::try_from(id).map_err(|e| e.to_string())?;
    let port = cluster
        .replication_base_port
        .map_or(0, |base| base.saturating_add(shard));
    let host = cluster.listen.ip().to_string();
    let port = replication
        .start(&crate::cluster::cluster_id(cluster), &host, port)
        .await
        .map_err(|e| format!("shard {id}: listening for replication on {host}:{port}: {e}"))?;
    rendezvous.set_replication_port(id, port);
    Ok(())
}

async fn accept_loop(
    shard: &Rc<Shard>,
    listener: &glommio::net::TcpListener,
    open: &Rc<Cell<usize>>,
) {
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Ok(peer) = stream.peer_addr() else {
            continue;
        };
        let handler = Rc::new(Connection {
            shard: shard.clone(),
            peer,
        });
        let config = ConnectionConfig {
            frame_bytes_max: shard.config.request_max_bytes,
            request_memory: Some(shard.request_memory.clone()),
            read_timeouts: ReadTimeouts {
                idle: Some(shard.config.memory.connections_max_idle),
                frame: Some(shard.config.memory.request_read_timeout),
            },
            shutdown: shard.shutdown.clone(),
            ..ConnectionConfig::default()
        };
        let open = open.clone();
        open.set(open.get() + 1);
        glommio::spawn_local(async move {
            if let Err(e) = net::serve_connection(stream, handler, config).await {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
            open.set(open.get() - 1);
        })
        .detach();
    }
}

/// A listening socket, reusable right after a restart (SO_REUSEADDR); with `shared`, every
/// shard listens on it (SO_REUSEPORT: the kernel spreads connections over them).
pub(crate) fn listen(addr: SocketAddr, shared: bool) -> std::io::Result<glommio::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(shared)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(adopt_listener(socket.into_raw_fd()))
}

/// Fails if something listens on `addr` already. The shards' listeners share the port
/// (SO_REUSEPORT), and so would another process's made the same way: a second broker started
/// on the port would silently take half of the first one's connections. A socket without
/// SO_REUSEPORT cannot bind beside one, so it tells; it is closed before the shards bind.
///
/// A broker killed a moment ago may still hold its port after it is gone: io_uring releases
/// the files of its cancelled requests (an accept in flight) in a kernel worker, later. So a
/// port in use is asked again for up to [`PORT_FREE_WAIT`] before it counts as taken.
fn port_is_free(addr: SocketAddr) -> std::io::Result<()> {
    use socket2::{Domain, Protocol, Socket, Type};
    if addr.port() == 0 {
        return Ok(());
    }
    let started = std::time::Instant::now();
    loop {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        match socket.bind(&addr.into()) {
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && started.elapsed() < PORT_FREE_WAIT =>
            {
                if started.elapsed() < PORT_RETRY_INTERVAL {
                    tracing::info!(%addr, "the port is in use; waiting a moment for it to be freed");
                }
                std::thread::sleep(PORT_RETRY_INTERVAL);
            }
            result => return result,
        }
    }
}

/// glommio's own `TcpListener::bind` sets no SO_REUSEADDR (a restart could not bind while old
/// connections linger in TIME_WAIT), so the socket is made here and handed over.
#[allow(unsafe_code)]
fn adopt_listener(fd: std::os::fd::RawFd) -> glommio::net::TcpListener {
    use std::os::fd::FromRawFd;
    // SAFETY: `fd` is a listening socket we just created and own; ownership moves to the
    // listener, which closes it.
    unsafe { glommio::net::TcpListener::from_raw_fd(fd) }
}
