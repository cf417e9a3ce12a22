//! The metadata on this node's disk, and the error every metadata change answers with.
//!
//! The metadata itself ([`ClusterMetadata`]: brokers, topics, each partition's replicas, leader
//! and ISR) is defined in the IO-free `model` crate with the commands that change it. This
//! module keeps its latest version in `meta/metadata.fb` (a FlatBuffers snapshot followed by its
//! CRC-32C, replaced atomically); shards never share one value behind a lock, each holds an
//! `Arc` of the latest version it has applied.

use std::io::Write;
use std::path::{Path, PathBuf};

use model::{ClusterMetadata, NodeId};
use net::kafka_protocol::ResponseError;

pub use model::Topic;

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a valid metadata file: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

/// Why a change to the metadata (a topic, a setting, a producer id block) was refused, as a
/// Kafka error code and a message for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicError {
    pub code: ResponseError,
    pub message: String,
}

impl TopicError {
    pub fn new(code: ResponseError, message: impl Into<String>) -> TopicError {
        TopicError {
            code,
            message: message.into(),
        }
    }
}

impl From<model::ApplyError> for TopicError {
    fn from(e: model::ApplyError) -> TopicError {
        use model::ApplyError as E;
        let code = match &e {
            E::TopicExists(_) => ResponseError::TopicAlreadyExists,
            E::UnknownTopic(_) | E::UnknownPartition { .. } => {
                ResponseError::UnknownTopicOrPartition
            }
            E::UnknownBroker(_) | E::BadReplicas(_) => ResponseError::InvalidReplicaAssignment,
            E::FencedBroker(_) => ResponseError::IneligibleReplica,
            E::StaleEpoch { .. } => ResponseError::FencedLeaderEpoch,
            E::ProducerIdsExhausted => ResponseError::UnknownServerError,
        };
        TopicError::new(code, e.to_string())
    }
}

pub type TopicResult = Result<(), TopicError>;

pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join("meta").join("metadata.fb")
}

/// Reads the metadata of a data directory; `None` if it has none yet. `node` is this node: a
/// directory written before the cluster existed becomes one whose partitions are all on it.
pub fn load(data_dir: &Path, node: NodeId) -> Result<Option<ClusterMetadata>, MetadataError> {
    let path = path(data_dir);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(MetadataError::Io { path, source }),
    };
    let corrupt = |reason: String| MetadataError::Corrupt {
        path: path.clone(),
        reason,
    };
    let Some((body, crc)) = bytes.split_last_chunk::<4>() else {
        return Err(corrupt("too short".into()));
    };
    if crc32c::crc32c(body) != u32::from_be_bytes(*crc) {
        return Err(corrupt("checksum mismatch".into()));
    }
    model::snapshot::decode(body, node)
        .map(Some)
        .map_err(corrupt)
}

/// Writes the metadata durably: a temporary file, synced, renamed over the old one, and the
/// directory synced. Blocking, but rare (only when the metadata changes) and small.
pub fn save(metadata: &ClusterMetadata, data_dir: &Path) -> Result<(), MetadataError> {
    let path = path(data_dir);
    let io = |source| MetadataError::Io {
        path: path.clone(),
        source,
    };
    let dir = path.parent().unwrap_or(data_dir);
    std::fs::create_dir_all(dir).map_err(io)?;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp).map_err(io)?;
    let body = model::snapshot::encode(metadata);
    file.write_all(&body).map_err(io)?;
    file.write_all(&crc32c::crc32c(&body).to_be_bytes())
        .map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)
}

fn owner_path(data_dir: &Path) -> PathBuf {
    data_dir.join("meta").join("node")
}

/// The node a cluster node's data directory belongs to (`None`: not recorded).
pub fn owner(data_dir: &Path) -> Result<Option<NodeId>, MetadataError> {
    let path = owner_path(data_dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .strip_prefix("node.id=")
            .and_then(|id| id.parse().ok())
            .map(|id| Some(NodeId(id)))
            .ok_or_else(|| MetadataError::Corrupt {
                path,
                reason: format!("expected node.id=N, found {text:?}"),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(MetadataError::Io { path, source }),
    }
}

/// Records that the data directory belongs to `node`, durably.
pub fn set_owner(data_dir: &Path, node: NodeId) -> Result<(), MetadataError> {
    let path = owner_path(data_dir);
    let io = |source| MetadataError::Io {
        path: path.clone(),
        source,
    };
    let dir = path.parent().unwrap_or(data_dir);
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut file = std::fs::File::create(&path).map_err(io)?;
    file.write_all(format!("node.id={}\n", node.0).as_bytes())
        .map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_the_file_and_refuses_damage() {
        let mut m = ClusterMetadata::new("c".into());
        m.version = 3;
        m.producer_id_block = 2;
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(dir.path(), NodeId(0)).unwrap(), None);
        save(&m, dir.path()).unwrap();
        assert_eq!(load(dir.path(), NodeId(0)).unwrap(), Some(m));
        let file = path(dir.path());
        let mut bytes = std::fs::read(&file).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&file, bytes).unwrap();
        assert!(matches!(
            load(dir.path(), NodeId(0)),
            Err(MetadataError::Corrupt { .. })
        ));
    }
}
