//! The broker's topics: names, ids, settings, and which shard owns each partition.
//!
//! One [`Metadata`] value is the whole truth at one version. Shard 0 (the controller) makes
//! every change as a new version, writes it to `meta/metadata.fb` (FlatBuffers followed by its
//! CRC-32C, replaced atomically) and hands every shard the new value; shards never share one
//! behind a lock.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use schema::metadata as fb;
use uuid::Uuid;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    pub name: String,
    pub id: Uuid,
    /// The shard that owns partition i; the length is the partition count.
    pub partition_shards: Vec<u16>,
    /// Settings the user set explicitly, by Kafka name.
    pub configs: BTreeMap<String, String>,
    /// Kept by the broker itself; never shown to clients.
    pub internal: bool,
}

impl Topic {
    pub fn partitions(&self) -> i32 {
        self.partition_shards.len() as i32
    }

    /// The shard that owns `partition`, if the topic has it.
    pub fn shard_of(&self, partition: i32) -> Option<usize> {
        let i = usize::try_from(partition).ok()?;
        self.partition_shards.get(i).map(|&s| usize::from(s))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub version: u64,
    pub cluster_id: String,
    pub topics: BTreeMap<String, Arc<Topic>>,
    /// The last block of producer ids handed to a shard; every block is taken once, through the
    /// controller, and saved before any of its ids is used.
    pub producer_id_block: u64,
}

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

impl Metadata {
    /// Empty metadata for a new data directory.
    pub fn new() -> Metadata {
        Metadata {
            version: 0,
            cluster_id: Uuid::new_v4().simple().to_string(),
            topics: BTreeMap::new(),
            producer_id_block: 0,
        }
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<&Arc<Topic>> {
        self.topics.values().find(|t| t.id == id)
    }

    /// Topics clients may see (not the internal ones).
    pub fn visible_topics(&self) -> impl Iterator<Item = &Arc<Topic>> {
        self.topics.values().filter(|t| !t.internal)
    }

    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join("meta").join("metadata.fb")
    }

    /// Reads the metadata of a data directory; `None` if it has none yet.
    pub fn load(data_dir: &Path) -> Result<Option<Metadata>, MetadataError> {
        let path = Self::path(data_dir);
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
        Self::decode(body).map(Some).map_err(corrupt)
    }

    /// Writes the metadata durably: a temporary file, synced, renamed over the old one, and the
    /// directory synced. Blocking, but rare (only when topics change) and small.
    pub fn save(&self, data_dir: &Path) -> Result<(), MetadataError> {
        let path = Self::path(data_dir);
        let io = |source| MetadataError::Io {
            path: path.clone(),
            source,
        };
        let dir = path.parent().unwrap_or(data_dir);
        std::fs::create_dir_all(dir).map_err(io)?;
        let tmp = path.with_extension("tmp");
        let mut file = std::fs::File::create(&tmp).map_err(io)?;
        let body = self.encode();
        file.write_all(&body).map_err(io)?;
        file.write_all(&crc32c::crc32c(&body).to_be_bytes())
            .map_err(io)?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = flatbuffers::FlatBufferBuilder::new();
        let topics: Vec<_> = self
            .topics
            .values()
            .map(|t| {
                let name = b.create_string(&t.name);
                let shards = b.create_vector(&t.partition_shards);
                let configs: Vec<_> = t
                    .configs
                    .iter()
                    .map(|(k, v)| {
                        let args = fb::ConfigEntryArgs {
                            key: Some(b.create_string(k)),
                            value: Some(b.create_string(v)),
                        };
                        fb::ConfigEntry::create(&mut b, &args)
                    })
                    .collect();
                let configs = b.create_vector(&configs);
                let (high, low) = t.id.as_u64_pair();
                let id = fb::Uuid::new(high, low);
                fb::Topic::create(
                    &mut b,
                    &fb::TopicArgs {
                        name: Some(name),
                        id: Some(&id),
                        partition_shards: Some(shards),
                        configs: Some(configs),
                        internal: t.internal,
                    },
                )
            })
            .collect();
        let topics = b.create_vector(&topics);
        let cluster_id = b.create_string(&self.cluster_id);
        let root = fb::Metadata::create(
            &mut b,
            &fb::MetadataArgs {
                version: self.version,
                cluster_id: Some(cluster_id),
                topics: Some(topics),
                producer_id_block: self.producer_id_block,
            },
        );
        b.finish(root, Some("SPMD"));
        b.finished_data().to_vec()
    }

    pub fn decode(bytes: &[u8]) -> Result<Metadata, String> {
        // The identifier check reads 8 bytes without looking at the length (it would panic).
        if bytes.len() < 8 || !fb::metadata_buffer_has_identifier(bytes) {
            return Err("missing the SPMD identifier".into());
        }
        // The verifier checks every offset and length before anything is read.
        let root = fb::root_as_metadata(bytes).map_err(|e| e.to_string())?;
        let mut topics = BTreeMap::new();
        for t in root.topics().iter().flatten() {
            let id = t.id();
            let topic = Topic {
                name: t.name().to_string(),
                id: Uuid::from_u64_pair(id.high(), id.low()),
                partition_shards: t.partition_shards().iter().collect(),
                configs: t
                    .configs()
                    .iter()
                    .flatten()
                    .map(|c| (c.key().to_string(), c.value().to_string()))
                    .collect(),
                internal: t.internal(),
            };
            topics.insert(topic.name.clone(), Arc::new(topic));
        }
        Ok(Metadata {
            version: root.version(),
            cluster_id: root.cluster_id().to_string(),
            topics,
            producer_id_block: root.producer_id_block(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::OFFSETS_TOPIC;

    fn sample() -> Metadata {
        let mut m = Metadata::new();
        m.version = 7;
        m.producer_id_block = 3;
        for (name, shards, internal) in [
            ("orders", vec![0, 1, 0], false),
            (OFFSETS_TOPIC, vec![1], true),
        ] {
            let mut configs = BTreeMap::new();
            configs.insert("retention.ms".to_string(), "1000".to_string());
            m.topics.insert(
                name.to_string(),
                Arc::new(Topic {
                    name: name.to_string(),
                    id: Uuid::new_v4(),
                    partition_shards: shards,
                    configs,
                    internal,
                }),
            );
        }
        m
    }

    #[test]
    fn round_trips_through_flatbuffers_and_the_file() {
        let m = sample();
        assert_eq!(Metadata::decode(&m.encode()).unwrap(), m);
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Metadata::load(dir.path()).unwrap(), None);
        m.save(dir.path()).unwrap();
        assert_eq!(Metadata::load(dir.path()).unwrap(), Some(m));
        let path = Metadata::path(dir.path());
        let mut bytes = std::fs::read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(matches!(
            Metadata::load(dir.path()),
            Err(MetadataError::Corrupt { .. })
        ));
    }

    #[test]
    fn damaged_files_are_refused_not_trusted() {
        let bytes = sample().encode();
        for cut in [0, 4, 8, bytes.len() / 2] {
            assert!(Metadata::decode(&bytes[..cut]).is_err());
        }
        let mut flipped = bytes.clone();
        flipped[4] ^= 0xff;
        assert!(Metadata::decode(&flipped).is_err());
    }
}
