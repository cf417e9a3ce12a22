//! Changes to topics, made by shard 0 alone: it checks each change against the current
//! metadata, writes the new version to disk, and has every shard apply it before answering.
//! A request on any shard reaches it through the mesh.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use net::kafka_protocol::ResponseError;

use crate::group::{self, OFFSETS_TOPIC};
use crate::metadata::{Metadata, Topic};
use crate::placement;
use crate::shard::Shard;
use crate::topic_config;

/// The shard that owns the metadata.
const CONTROLLER: usize = 0;

/// A topic to create.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub configs: BTreeMap<String, String>,
}

/// A change to one topic setting.
#[derive(Debug, Clone)]
pub enum ConfigOp {
    Set(String, String),
    Delete(String),
}

/// Why a change to one topic was refused.
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

pub type TopicResult = Result<(), TopicError>;

/// Kafka's rule for topic names: 1 to 249 of `[a-zA-Z0-9._-]`, not "." or "..".
pub fn check_topic_name(name: &str) -> Result<(), TopicError> {
    let legal = !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if legal {
        Ok(())
    } else {
        Err(TopicError::new(
            ResponseError::InvalidTopicException,
            format!("invalid topic name {name:?}: use 1 to 249 of a-z A-Z 0-9 . _ -"),
        ))
    }
}

impl Shard {
    /// Runs `change` on the controller against a copy of the metadata; if it changed anything,
    /// the new version is saved and applied by every shard before this returns.
    async fn change_metadata<R, F>(self: &Rc<Self>, change: F) -> Result<R, TopicError>
    where
        R: Send + 'static,
        F: FnOnce(&mut Metadata, usize) -> R + Send + 'static,
    {
        let outcome = self
            .mesh()
            .run_on(CONTROLLER, self, move |controller: Rc<Shard>| async move {
                let _turn = controller.controller_lock.acquire_permit(1).await;
                let current = controller.metadata();
                let mut next = (*current).clone();
                let result = change(&mut next, controller.count);
                if next == *current {
                    return Ok(result);
                }
                next.version = current.version + 1;
                if let Err(e) = next.save(&controller.config.data_dir) {
                    tracing::error!(error = %e, "saving metadata");
                    return Err(TopicError::new(
                        ResponseError::KafkaStorageError,
                        e.to_string(),
                    ));
                }
                controller.broadcast(Arc::new(next)).await?;
                Ok(result)
            })
            .await;
        outcome.unwrap_or_else(|gone| {
            Err(TopicError::new(
                ResponseError::NotController,
                gone.to_string(),
            ))
        })
    }

    /// Has every shard apply `metadata`, each on its own executor, all at once.
    async fn broadcast(self: &Rc<Self>, metadata: Arc<Metadata>) -> Result<(), TopicError> {
        let tasks: Vec<_> = (0..self.count)
            .map(|shard| {
                let this = self.clone();
                let metadata = metadata.clone();
                glommio::spawn_local(async move {
                    this.mesh()
                        .run_on(shard, &this, move |s: Rc<Shard>| async move {
                            s.apply_metadata(metadata).await.map_err(|e| e.to_string())
                        })
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| r)
                })
            })
            .collect();
        let mut failure = None;
        for task in tasks {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "a shard failed to apply new metadata");
                failure = Some(e);
            }
        }
        match failure {
            Some(e) => Err(TopicError::new(ResponseError::KafkaStorageError, e)),
            None => Ok(()),
        }
    }

    /// Takes the next block of producer ids; it is saved before this returns, so no later run
    /// takes it again.
    pub async fn take_producer_id_block(self: &Rc<Self>) -> Result<u64, TopicError> {
        self.change_metadata(|metadata, _| {
            metadata.producer_id_block += 1;
            metadata.producer_id_block
        })
        .await
    }

    pub async fn create_topics(
        self: &Rc<Self>,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        let count = topics.len();
        self.change_metadata(move |metadata, shards| {
            topics
                .into_iter()
                .map(|t| {
                    check_new_topic(metadata, &t)?;
                    if !validate_only {
                        add_topic(metadata, shards, t, false);
                    }
                    Ok(())
                })
                .collect()
        })
        .await
        .unwrap_or_else(|e| vec![Err(e); count])
    }

    /// Creates the internal topic of committed offsets if this data directory has none yet.
    pub async fn ensure_offsets_topic(self: &Rc<Self>, partitions: i32) -> TopicResult {
        let group_config = crate::groups::group_config(self);
        self.change_metadata(move |metadata, shards| {
            if !metadata.topics.contains_key(OFFSETS_TOPIC) {
                let topic = NewTopic {
                    name: OFFSETS_TOPIC.to_string(),
                    partitions,
                    configs: group::offsets_topic_configs(&group_config),
                };
                add_topic(metadata, shards, topic, true);
            }
        })
        .await
    }

    pub async fn delete_topics(self: &Rc<Self>, names: Vec<String>) -> Vec<TopicResult> {
        let count = names.len();
        self.change_metadata(move |metadata, _| {
            names
                .into_iter()
                .map(|name| match metadata.topics.get(&name) {
                    Some(t) if !t.internal => {
                        metadata.topics.remove(&name);
                        Ok(())
                    }
                    Some(_) => Err(TopicError::new(
                        ResponseError::InvalidRequest,
                        format!("{name} is internal to the broker"),
                    )),
                    None => Err(unknown_topic(&name)),
                })
                .collect()
        })
        .await
        .unwrap_or_else(|e| vec![Err(e); count])
    }

    pub async fn add_partitions(
        self: &Rc<Self>,
        changes: Vec<(String, i32)>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        let count = changes.len();
        self.change_metadata(move |metadata, shards| {
            changes
                .into_iter()
                .map(|(name, total)| {
                    let topic = visible(metadata, &name)?;
                    let current = topic.partitions();
                    if total <= current {
                        return Err(TopicError::new(
                            ResponseError::InvalidPartitions,
                            format!("{name} has {current} partitions: ask for more than that"),
                        ));
                    }
                    if total > MAX_PARTITIONS {
                        return Err(too_many_partitions(total));
                    }
                    if !validate_only {
                        let added = placement::assign(metadata, shards, (total - current) as usize);
                        let topic =
                            Arc::make_mut(metadata.topics.get_mut(&name).expect("checked above"));
                        topic.partition_shards.extend(added);
                    }
                    Ok(())
                })
                .collect()
        })
        .await
        .unwrap_or_else(|e| vec![Err(e); count])
    }

    pub async fn alter_configs(
        self: &Rc<Self>,
        changes: Vec<(String, Vec<ConfigOp>)>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        let count = changes.len();
        self.change_metadata(move |metadata, _| {
            changes
                .into_iter()
                .map(|(name, ops)| {
                    let mut configs = visible(metadata, &name)?.configs.clone();
                    for op in ops {
                        match op {
                            ConfigOp::Set(key, value) => {
                                topic_config::check(&key, &value).map_err(invalid_config)?;
                                configs.insert(key, value);
                            }
                            ConfigOp::Delete(key) => {
                                topic_config::check_name(&key).map_err(invalid_config)?;
                                configs.remove(&key);
                            }
                        }
                    }
                    if !validate_only {
                        let topic =
                            Arc::make_mut(metadata.topics.get_mut(&name).expect("checked above"));
                        topic.configs = configs;
                    }
                    Ok(())
                })
                .collect()
        })
        .await
        .unwrap_or_else(|e| vec![Err(e); count])
    }
}

/// More partitions than this in one topic is surely a mistake (and a lot of files).
const MAX_PARTITIONS: i32 = 10_000;

fn too_many_partitions(n: i32) -> TopicError {
    TopicError::new(
        ResponseError::InvalidPartitions,
        format!("{n} partitions: at most {MAX_PARTITIONS} per topic"),
    )
}

fn invalid_config(message: String) -> TopicError {
    TopicError::new(ResponseError::InvalidConfig, message)
}

fn unknown_topic(name: &str) -> TopicError {
    TopicError::new(
        ResponseError::UnknownTopicOrPartition,
        format!("topic {name} does not exist"),
    )
}

fn visible<'m>(metadata: &'m Metadata, name: &str) -> Result<&'m Arc<Topic>, TopicError> {
    metadata
        .topics
        .get(name)
        .filter(|t| !t.internal)
        .ok_or_else(|| unknown_topic(name))
}

fn check_new_topic(metadata: &Metadata, topic: &NewTopic) -> Result<(), TopicError> {
    check_topic_name(&topic.name)?;
    if metadata.topics.contains_key(&topic.name) {
        return Err(TopicError::new(
            ResponseError::TopicAlreadyExists,
            format!("topic {} already exists", topic.name),
        ));
    }
    if topic.partitions < 1 {
        return Err(TopicError::new(
            ResponseError::InvalidPartitions,
            "a topic needs at least one partition",
        ));
    }
    if topic.partitions > MAX_PARTITIONS {
        return Err(too_many_partitions(topic.partitions));
    }
    for (key, value) in &topic.configs {
        topic_config::check(key, value).map_err(invalid_config)?;
    }
    Ok(())
}

fn add_topic(metadata: &mut Metadata, shards: usize, topic: NewTopic, internal: bool) {
    let partition_shards = placement::assign(metadata, shards, topic.partitions as usize);
    metadata.topics.insert(
        topic.name.clone(),
        Arc::new(Topic {
            name: topic.name,
            id: uuid::Uuid::new_v4(),
            partition_shards,
            configs: topic.configs,
            internal,
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(check_topic_name("orders.v2_eu-1").is_ok());
        for bad in ["", ".", "..", "a b", "a/b", &"x".repeat(250)] {
            assert_eq!(
                check_topic_name(bad).unwrap_err().code,
                ResponseError::InvalidTopicException
            );
        }
    }
}
