//! [`Client`]: a cluster seen from a bootstrap address. Keeps one connection per broker, routes
//! partition requests to leaders and group requests to coordinators, and turns Kafka error codes
//! into [`ClientError::Kafka`].

use std::collections::HashMap;

use bytes::Bytes;
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreatePartitionsRequest, CreateTopicsRequest, DeleteGroupsRequest,
    DeleteTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest, DescribeGroupsRequest,
    DescribeQuorumRequest, ElectLeadersRequest, FetchRequest, FindCoordinatorRequest, GroupId,
    IncrementalAlterConfigsRequest, ListGroupsRequest, ListOffsetsRequest, MetadataRequest,
    OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::connection::{ConnectOptions, Connection};
use super::error::{ClientError, check};
use crate::produce::{ProducePartition, ProduceRequest, ProduceTopic};

/// What Metadata says about the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterMetadata {
    pub cluster_id: Option<String>,
    pub brokers: Vec<BrokerInfo>,
    pub controller_id: i32,
    pub topics: Vec<TopicInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// The cluster as DescribeCluster lists it, fenced brokers included (KIP-1073).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedCluster {
    pub cluster_id: String,
    pub controller_id: i32,
    /// Each broker, and whether it is fenced.
    pub brokers: Vec<(BrokerInfo, bool)>,
}

/// The controller quorum as DescribeQuorum reports it (`__cluster_metadata` partition 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedQuorum {
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
    /// Each voter and its log end offset (-1: not known to the broker that answered).
    pub voters: Vec<(i32, i64)>,
    pub observers: Vec<i32>,
}

/// ElectLeaders' election types (KIP-460).
pub const PREFERRED_ELECTION: i8 = 0;
pub const UNCLEAN_ELECTION: i8 = 1;

/// One partition's outcome of an ElectLeaders: error code 0 (elected), 84 (ELECTION_NOT_NEEDED:
/// it had that leader already) or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionResult {
    pub topic: String,
    pub partition: i32,
    pub error_code: i16,
    pub error_message: Option<String>,
}

impl BrokerInfo {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub topic_id: Uuid,
    /// A non-zero Kafka error code for this topic (e.g. 3, unknown topic).
    pub error_code: i16,
    pub partitions: Vec<PartitionInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub index: i32,
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub error_code: i16,
}

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
}

/// A resource whose configuration is described or altered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigResource<'a> {
    Topic(&'a str),
    Broker(i32),
}

impl ConfigResource<'_> {
    fn type_code(&self) -> i8 {
        match self {
            Self::Topic(_) => 2,
            Self::Broker(_) => 4,
        }
    }

    fn name(&self) -> String {
        match self {
            Self::Topic(name) => (*name).to_owned(),
            Self::Broker(id) => id.to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    pub value: Option<String>,
    pub read_only: bool,
    /// Kafka's config source code (1 topic, 4 static broker, 5 default, ...).
    pub source: i8,
    pub sensitive: bool,
}

/// One change of an incremental config alteration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigChange {
    Set(String, String),
    Delete(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    /// -1 when the group has no offset for the partition.
    pub offset: i64,
    pub metadata: Option<String>,
}

/// What a Produce with acks 1 or -1 returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceAck {
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
}

/// One partition's share of a Fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPartition {
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// Record batches as the broker sent them; see [`super::batch::decode_batches`].
    pub records: Bytes,
}

/// The earliest and latest offsets, for [`Client::list_offset`].
pub const EARLIEST_TIMESTAMP: i64 = -2;
pub const LATEST_TIMESTAMP: i64 = -1;

/// A client of one cluster.
#[derive(Debug)]
pub struct Client {
    options: ConnectOptions,
    bootstrap: Connection,
    /// Connections by broker id, opened on first use.
    connections: HashMap<i32, Connection>,
    metadata: ClusterMetadata,
}

impl Client {
    /// Connects to the bootstrap broker and reads the cluster's metadata.
    pub async fn connect(bootstrap: &str, options: ConnectOptions) -> Result<Self, ClientError> {
        let bootstrap = Connection::connect(bootstrap, &options).await?;
        let mut client = Self {
            options,
            bootstrap,
            connections: HashMap::new(),
            metadata: ClusterMetadata::default(),
        };
        client.metadata(None).await?;
        Ok(client)
    }

    /// The metadata of `topics` (all topics for `None`), also kept for routing.
    pub async fn metadata(
        &mut self,
        topics: Option<&[&str]>,
    ) -> Result<ClusterMetadata, ClientError> {
        let request = MetadataRequest::default()
            .with_topics(topics.map(|names| {
                names
                    .iter()
                    .map(|n| MetadataRequestTopic::default().with_name(Some(topic_name(n))))
                    .collect()
            }))
            .with_allow_auto_topic_creation(false);
        let response = self.bootstrap.send(&request).await?;
        let metadata = ClusterMetadata {
            cluster_id: response.cluster_id.as_ref().map(|c| c.to_string()),
            brokers: response
                .brokers
                .iter()
                .map(|b| BrokerInfo {
                    node_id: b.node_id.0,
                    host: b.host.to_string(),
                    port: b.port,
                    rack: b.rack.as_ref().map(|r| r.to_string()),
                })
                .collect(),
            controller_id: response.controller_id.0,
            topics: response
                .topics
                .iter()
                .map(|t| TopicInfo {
                    name: t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default(),
                    topic_id: t.topic_id,
                    error_code: t.error_code,
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| PartitionInfo {
                            index: p.partition_index,
                            leader_id: p.leader_id.0,
                            leader_epoch: p.leader_epoch,
                            replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
                            isr: p.isr_nodes.iter().map(|b| b.0).collect(),
                            error_code: p.error_code,
                        })
                        .collect(),
                })
                .collect(),
        };
        self.metadata.cluster_id = metadata.cluster_id.clone();
        self.metadata.brokers = metadata.brokers.clone();
        self.metadata.controller_id = metadata.controller_id;
        for topic in &metadata.topics {
            self.metadata.topics.retain(|t| t.name != topic.name);
            if topic.error_code == 0 {
                self.metadata.topics.push(topic.clone());
            }
        }
        Ok(metadata)
    }

    /// Every broker, fenced or not, and the active controller.
    pub async fn describe_cluster(&mut self) -> Result<DescribedCluster, ClientError> {
        let request = DescribeClusterRequest::default().with_include_fenced_brokers(true);
        let response = self.bootstrap.send(&request).await?;
        check(
            ApiKey::DescribeCluster,
            || "the cluster".to_string(),
            response.error_code,
            response.error_message.as_deref(),
        )?;
        Ok(DescribedCluster {
            cluster_id: response.cluster_id.to_string(),
            controller_id: response.controller_id.0,
            brokers: response
                .brokers
                .iter()
                .map(|b| {
                    let info = BrokerInfo {
                        node_id: b.broker_id.0,
                        host: b.host.to_string(),
                        port: b.port,
                        rack: b.rack.as_ref().map(|r| r.to_string()),
                    };
                    (info, b.is_fenced)
                })
                .collect(),
        })
    }

    /// The controller quorum, asked of broker `node` (the active controller knows every
    /// voter's progress).
    pub async fn describe_quorum(&mut self, node: i32) -> Result<DescribedQuorum, ClientError> {
        let request = DescribeQuorumRequest::default().with_topics(vec![
            TopicData::default()
                .with_topic_name(topic_name("__cluster_metadata"))
                .with_partitions(vec![PartitionData::default().with_partition_index(0)]),
        ]);
        let response = self.broker(node).await?.send(&request).await?;
        let what = || "the controller quorum".to_string();
        check(ApiKey::DescribeQuorum, what, response.error_code, None)?;
        let partition = response
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| ClientError::Protocol {
                addr: format!("broker {node}"),
                reason: "DescribeQuorum answered no partition".into(),
            })?;
        check(ApiKey::DescribeQuorum, what, partition.error_code, None)?;
        Ok(DescribedQuorum {
            leader_id: partition.leader_id.0,
            leader_epoch: partition.leader_epoch,
            high_watermark: partition.high_watermark,
            voters: partition
                .current_voters
                .iter()
                .map(|v| (v.replica_id.0, v.log_end_offset))
                .collect(),
            observers: partition.observers.iter().map(|o| o.replica_id.0).collect(),
        })
    }

    /// Asks the controller to elect leaders of `partitions` (topic, partition ids), or of every
    /// partition for `None` (the answer then leaves out those that already had the leader);
    /// each partition's outcome.
    pub async fn elect_leaders(
        &mut self,
        election_type: i8,
        partitions: Option<&[(String, Vec<i32>)]>,
        timeout_ms: i32,
    ) -> Result<Vec<ElectionResult>, ClientError> {
        let topics = partitions.map(|p| {
            p.iter()
                .map(|(topic, ids)| {
                    TopicPartitions::default()
                        .with_topic(topic_name(topic))
                        .with_partitions(ids.clone())
                })
                .collect()
        });
        let request = ElectLeadersRequest::default()
            .with_election_type(election_type)
            .with_topic_partitions(topics)
            .with_timeout_ms(timeout_ms);
        let response = self.controller().await?.send(&request).await?;
        check(
            ApiKey::ElectLeaders,
            || "the election".to_string(),
            response.error_code,
            None,
        )?;
        Ok(response
            .replica_election_results
            .iter()
            .flat_map(|t| {
                t.partition_result.iter().map(|p| ElectionResult {
                    topic: t.topic.0.to_string(),
                    partition: p.partition_id,
                    error_code: p.error_code,
                    error_message: p.error_message.as_ref().map(|m| m.to_string()),
                })
            })
            .collect())
    }

    pub async fn create_topics(
        &mut self,
        topics: &[NewTopic],
        timeout_ms: i32,
    ) -> Result<(), ClientError> {
        let request = CreateTopicsRequest::default()
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        CreatableTopic::default()
                            .with_name(topic_name(&t.name))
                            .with_num_partitions(t.partitions)
                            .with_replication_factor(t.replication_factor)
                            .with_configs(
                                t.configs
                                    .iter()
                                    .map(|(k, v)| {
                                        CreatableTopicConfig::default()
                                            .with_name(str_bytes(k))
                                            .with_value(Some(str_bytes(v)))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            )
            .with_timeout_ms(timeout_ms);
        let response = self.controller().await?.send(&request).await?;
        check_each(
            ApiKey::CreateTopics,
            response
                .topics
                .iter()
                .map(|t| (&t.name.0, t.error_code, t.error_message.as_deref())),
        )
    }

    pub async fn delete_topics(
        &mut self,
        names: &[&str],
        timeout_ms: i32,
    ) -> Result<(), ClientError> {
        let connection = self.controller().await?;
        let version = connection.version(ApiKey::DeleteTopics).unwrap_or_default();
        let mut request = DeleteTopicsRequest::default().with_timeout_ms(timeout_ms);
        // Version 6 names topics in structs (to allow ids); earlier versions in a list.
        if version >= 6 {
            request.topics = names
                .iter()
                .map(|n| DeleteTopicState::default().with_name(Some(topic_name(n))))
                .collect();
        } else {
            request.topic_names = names.iter().map(|n| topic_name(n)).collect();
        }
        let response = connection.send(&request).await?;
        check_each(
            ApiKey::DeleteTopics,
            response.responses.iter().map(|r| {
                let name = r.name.as_ref().map(|n| n.0.as_str()).unwrap_or_default();
                (name, r.error_code, r.error_message.as_deref())
            }),
        )
    }

    /// Grows `topic` to `count` partitions.
    pub async fn create_partitions(
        &mut self,
        topic: &str,
        count: i32,
        timeout_ms: i32,
    ) -> Result<(), ClientError> {
        let request = CreatePartitionsRequest::default()
            .with_topics(vec![
                CreatePartitionsTopic::default()
                    .with_name(topic_name(topic))
                    .with_count(count)
                    // Null: the broker places them (an empty list asks for no new partitions).
                    .with_assignments(None),
            ])
            .with_timeout_ms(timeout_ms);
        let response = self.controller().await?.send(&request).await?;
        check_each(
            ApiKey::CreatePartitions,
            response
                .results
                .iter()
                .map(|r| (&r.name.0, r.error_code, r.error_message.as_deref())),
        )
    }

    /// The configuration of a resource: the named keys, or all for `None`.
    pub async fn describe_configs(
        &mut self,
        resource: ConfigResource<'_>,
        keys: Option<&[&str]>,
    ) -> Result<Vec<ConfigEntry>, ClientError> {
        let request = DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(resource.type_code())
                .with_resource_name(str_bytes(&resource.name()))
                .with_configuration_keys(keys.map(|k| k.iter().map(|k| str_bytes(k)).collect())),
        ]);
        let response = self.controller().await?.send(&request).await?;
        let mut entries = Vec::new();
        for result in response.results {
            check(
                ApiKey::DescribeConfigs,
                || result.resource_name.to_string(),
                result.error_code,
                result.error_message.as_deref(),
            )?;
            entries.extend(result.configs.into_iter().map(|c| ConfigEntry {
                name: c.name.to_string(),
                value: c.value.map(|v| v.to_string()),
                read_only: c.read_only,
                source: c.config_source,
                sensitive: c.is_sensitive,
            }));
        }
        Ok(entries)
    }

    pub async fn incremental_alter_configs(
        &mut self,
        resource: ConfigResource<'_>,
        changes: &[ConfigChange],
    ) -> Result<(), ClientError> {
        let configs = changes
            .iter()
            .map(|change| match change {
                ConfigChange::Set(name, value) => AlterableConfig::default()
                    .with_name(str_bytes(name))
                    .with_config_operation(0)
                    .with_value(Some(str_bytes(value))),
                ConfigChange::Delete(name) => AlterableConfig::default()
                    .with_name(str_bytes(name))
                    .with_config_operation(1),
            })
            .collect();
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(resource.type_code())
                .with_resource_name(str_bytes(&resource.name()))
                .with_configs(configs),
        ]);
        let response = self.controller().await?.send(&request).await?;
        check_each(
            ApiKey::IncrementalAlterConfigs,
            response
                .responses
                .iter()
                .map(|r| (&r.resource_name, r.error_code, r.error_message.as_deref())),
        )
    }

    /// The offset for `timestamp_ms` in a partition: [`EARLIEST_TIMESTAMP`],
    /// [`LATEST_TIMESTAMP`] or a time.
    pub async fn list_offset(
        &mut self,
        topic: &str,
        partition: i32,
        timestamp_ms: i64,
    ) -> Result<i64, ClientError> {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![
                ListOffsetsTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(vec![
                        ListOffsetsPartition::default()
                            .with_partition_index(partition)
                            .with_timestamp(timestamp_ms),
                    ]),
            ])
            .with_timeout_ms(
                self.options
                    .request_timeout_ms
                    .try_into()
                    .unwrap_or(i32::MAX),
            );
        let response = self.leader(topic, partition).await?.send(&request).await?;
        let answers = response.topics.iter().flat_map(|t| &t.partitions);
        let found = partition_answer(
            ApiKey::ListOffsets,
            (topic, partition),
            answers.map(|p| (p, p.partition_index, p.error_code, None)),
        )?;
        Ok(found.offset)
    }

    /// The groups of every broker.
    pub async fn list_groups(&mut self) -> Result<Vec<GroupListing>, ClientError> {
        let mut groups = Vec::new();
        let broker_ids: Vec<i32> = self.metadata.brokers.iter().map(|b| b.node_id).collect();
        for broker_id in broker_ids {
            let response = self
                .broker(broker_id)
                .await?
                .send(&ListGroupsRequest::default())
                .await?;
            check(
                ApiKey::ListGroups,
                || format!("broker {broker_id}"),
                response.error_code,
                None,
            )?;
            groups.extend(response.groups.into_iter().map(|g| GroupListing {
                group_id: g.group_id.0.to_string(),
                protocol_type: g.protocol_type.to_string(),
                state: g.group_state.to_string(),
            }));
        }
        Ok(groups)
    }

    /// The groups as their coordinator describes them (`kafka-protocol`'s type, members and
    /// assignments included).
    pub async fn describe_group(&mut self, group: &str) -> Result<DescribedGroup, ClientError> {
        let request = DescribeGroupsRequest::default().with_groups(vec![group_id(group)]);
        let response = self.coordinator(group).await?.send(&request).await?;
        let described =
            response
                .groups
                .into_iter()
                .next()
                .ok_or_else(|| ClientError::Protocol {
                    addr: self.bootstrap.addr().to_owned(),
                    reason: format!("DescribeGroups answered without group {group}"),
                })?;
        check(
            ApiKey::DescribeGroups,
            || group.to_owned(),
            described.error_code,
            None,
        )?;
        Ok(described)
    }

    pub async fn delete_group(&mut self, group: &str) -> Result<(), ClientError> {
        let request = DeleteGroupsRequest::default().with_groups_names(vec![group_id(group)]);
        let response = self.coordinator(group).await?.send(&request).await?;
        check_each(
            ApiKey::DeleteGroups,
            response
                .results
                .iter()
                .map(|r| (&r.group_id.0, r.error_code, None)),
        )
    }

    /// A group's committed offsets for the partitions of `topic`.
    pub async fn offset_fetch(
        &mut self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<Vec<CommittedOffset>, ClientError> {
        self.committed_offsets(group, Some((topic, partitions)))
            .await
    }

    /// Every offset a group has committed, on every topic.
    pub async fn offset_fetch_all(
        &mut self,
        group: &str,
    ) -> Result<Vec<CommittedOffset>, ClientError> {
        self.committed_offsets(group, None).await
    }

    /// OffsetFetch for one topic's partitions, or for everything the group committed.
    async fn committed_offsets(
        &mut self,
        group: &str,
        only: Option<(&str, &[i32])>,
    ) -> Result<Vec<CommittedOffset>, ClientError> {
        let connection = self.coordinator(group).await?;
        let version = connection.version(ApiKey::OffsetFetch).unwrap_or_default();
        let mut request = OffsetFetchRequest::default();
        // Version 8 batches groups; earlier versions name one group.
        if version >= 8 {
            request.groups = vec![
                OffsetFetchRequestGroup::default()
                    .with_group_id(group_id(group))
                    .with_topics(only.map(|(topic, partitions)| {
                        vec![
                            OffsetFetchRequestTopics::default()
                                .with_name(topic_name(topic))
                                .with_partition_indexes(partitions.to_vec()),
                        ]
                    })),
            ];
        } else {
            request.group_id = group_id(group);
            request.topics = only.map(|(topic, partitions)| {
                vec![
                    OffsetFetchRequestTopic::default()
                        .with_name(topic_name(topic))
                        .with_partition_indexes(partitions.to_vec()),
                ]
            });
        }
        let response = connection.send(&request).await?;
        // Both layouts flattened to (topic, partition, offset, metadata, error code).
        let mut group_errors = vec![response.error_code];
        let mut found = Vec::new();
        if version >= 8 {
            for g in response.groups {
                group_errors.push(g.error_code);
                for t in g.topics {
                    found.extend(t.partitions.into_iter().map(|p| {
                        (
                            t.name.clone(),
                            p.partition_index,
                            p.committed_offset,
                            p.metadata,
                            p.error_code,
                        )
                    }));
                }
            }
        } else {
            for t in response.topics {
                found.extend(t.partitions.into_iter().map(|p| {
                    (
                        t.name.clone(),
                        p.partition_index,
                        p.committed_offset,
                        p.metadata,
                        p.error_code,
                    )
                }));
            }
        }
        for code in group_errors {
            check(ApiKey::OffsetFetch, || group.to_owned(), code, None)?;
        }
        let mut offsets = Vec::with_capacity(found.len());
        for (topic, partition, offset, metadata, code) in found {
            check(
                ApiKey::OffsetFetch,
                || format!("{}-{partition}", topic.0),
                code,
                None,
            )?;
            offsets.push(CommittedOffset {
                topic: topic.0.to_string(),
                partition,
                offset,
                metadata: metadata.map(|m| m.to_string()),
            });
        }
        Ok(offsets)
    }

    /// Commits offsets for a group outside any generation (as an admin or a simple consumer).
    pub async fn offset_commit(
        &mut self,
        group: &str,
        topic: &str,
        offsets: &[(i32, i64)],
    ) -> Result<(), ClientError> {
        let request = offset_commit_request(group, topic, offsets);
        let response = self.coordinator(group).await?.send(&request).await?;
        check_offset_commit(&response)
    }

    /// Produces one ready record batch to a partition's leader and waits for the answer
    /// (`None` for acks=0). For many in flight, use [`Client::leader`] with
    /// [`Connection::enqueue_produce`].
    pub async fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        batch: Bytes,
        acks: i16,
        timeout_ms: i32,
    ) -> Result<Option<ProduceAck>, ClientError> {
        let request = ProduceRequest::single(topic, partition, batch, acks, timeout_ms);
        let connection = self.leader(topic, partition).await?;
        let Some(ticket) = connection.enqueue_produce(&request).await? else {
            return Ok(None);
        };
        let response = connection.receive(ticket).await?;
        produce_ack(&response, topic, partition).map(Some)
    }

    /// Fetches from `offset` in one partition, waiting up to `max_wait_ms` for data.
    pub async fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
        max_wait_ms: i32,
    ) -> Result<FetchedPartition, ClientError> {
        let leader = self.leader_id(topic, partition).await?;
        let positions = [(partition, offset)];
        let mut answers = self
            .fetch_from_leader(topic, leader, &positions, max_bytes, max_wait_ms)
            .await?;
        answers.pop().map_or_else(
            || {
                Err(ClientError::Protocol {
                    addr: String::new(),
                    reason: format!("Fetch response without {topic}-{partition}"),
                })
            },
            |(_, answer)| answer,
        )
    }

    /// Fetches from several partitions of `topic` led by broker `leader` in one request,
    /// `(partition, offset)` each, `partition_max_bytes` at most from each; the broker waits up
    /// to `max_wait_ms` until one of them has data. The answer for each partition comes with it,
    /// in the order asked; the outer error is for the request as a whole.
    pub async fn fetch_from_leader(
        &mut self,
        topic: &str,
        leader: i32,
        positions: &[(i32, i64)],
        partition_max_bytes: i32,
        max_wait_ms: i32,
    ) -> Result<Vec<(i32, Result<FetchedPartition, ClientError>)>, ClientError> {
        let topic_id = self.topic(topic).await?.topic_id;
        let connection = self.broker(leader).await?;
        // Versions 13 and up name topics by id; a broker that gave no id gets version 12.
        let version_max = if topic_id.is_nil() {
            FETCH_BY_NAME_MAX
        } else {
            i16::MAX
        };
        let by_id = connection
            .version(ApiKey::Fetch)
            .unwrap_or_default()
            .min(version_max)
            >= 13;
        let partitions = positions
            .iter()
            .map(|&(partition, offset)| {
                FetchPartition::default()
                    .with_partition(partition)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(offset)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(partition_max_bytes)
            })
            .collect();
        let count = i32::try_from(positions.len()).unwrap_or(i32::MAX);
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(max_wait_ms)
            .with_min_bytes(1)
            .with_max_bytes(partition_max_bytes.saturating_mul(count))
            .with_session_epoch(-1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(if by_id {
                        TopicName::default()
                    } else {
                        topic_name(topic)
                    })
                    .with_topic_id(if by_id { topic_id } else { Uuid::nil() })
                    .with_partitions(partitions),
            ]);
        let response = connection.send_at_most(&request, version_max).await?;
        check(
            ApiKey::Fetch,
            || topic.to_owned(),
            response.error_code,
            None,
        )?;
        Ok(positions
            .iter()
            .map(|&(partition, _)| {
                let answers = response.responses.iter().flat_map(|t| &t.partitions);
                let answer = partition_answer(
                    ApiKey::Fetch,
                    (topic, partition),
                    answers.map(|p| (p, p.partition_index, p.error_code, None)),
                )
                .map(|data| FetchedPartition {
                    high_watermark: data.high_watermark,
                    last_stable_offset: data.last_stable_offset,
                    log_start_offset: data.log_start_offset,
                    records: data.records.clone().unwrap_or_default(),
                });
                (partition, answer)
            })
            .collect())
    }

    /// The broker leading a partition, from cached metadata (refreshed if the topic is not
    /// known yet).
    pub async fn leader_id(&mut self, topic: &str, partition: i32) -> Result<i32, ClientError> {
        self.topic(topic)
            .await?
            .partitions
            .iter()
            .find(|p| p.index == partition)
            .map(|p| p.leader_id)
            .ok_or_else(|| ClientError::Kafka {
                api: ApiKey::Metadata,
                resource: format!("{topic}-{partition}"),
                code: UNKNOWN_TOPIC_OR_PARTITION,
                message: None,
            })
    }

    /// The connection to a partition's leader, from cached metadata (refreshed if the topic is
    /// not known yet).
    pub async fn leader(
        &mut self,
        topic: &str,
        partition: i32,
    ) -> Result<&mut Connection, ClientError> {
        let leader_id = self.leader_id(topic, partition).await?;
        self.broker(leader_id).await
    }

    /// The connection to a broker by id, opened on first use.
    pub async fn broker(&mut self, node_id: i32) -> Result<&mut Connection, ClientError> {
        if !self.connections.contains_key(&node_id) {
            let addr = self
                .metadata
                .brokers
                .iter()
                .find(|b| b.node_id == node_id)
                .map(BrokerInfo::addr)
                .ok_or_else(|| ClientError::Usage(format!("no broker {node_id} in metadata")))?;
            let connection = Connection::connect(&addr, &self.options).await?;
            self.connections.insert(node_id, connection);
        }
        self.connections
            .get_mut(&node_id)
            .ok_or_else(|| ClientError::Usage(format!("no connection to broker {node_id}")))
    }

    /// Forgets broken connections and cached topics, e.g. after NOT_LEADER_OR_FOLLOWER.
    pub fn reset(&mut self) {
        self.connections.clear();
        self.metadata.topics.clear();
    }

    async fn controller(&mut self) -> Result<&mut Connection, ClientError> {
        let controller_id = self.metadata.controller_id;
        if self
            .metadata
            .brokers
            .iter()
            .any(|b| b.node_id == controller_id)
        {
            self.broker(controller_id).await
        } else {
            Ok(&mut self.bootstrap)
        }
    }

    /// The connection to a group's coordinator, looked up with FindCoordinator each time.
    pub async fn coordinator(&mut self, group: &str) -> Result<&mut Connection, ClientError> {
        let version = self
            .bootstrap
            .version(ApiKey::FindCoordinator)
            .unwrap_or_default();
        let mut request = FindCoordinatorRequest::default();
        // Version 4 batches keys; earlier versions take one.
        if version >= 4 {
            request.coordinator_keys = vec![str_bytes(group)];
        } else {
            request.key = str_bytes(group);
        }
        let response = self.bootstrap.send(&request).await?;
        let (node_id, code, message) = match response.coordinators.first() {
            Some(c) if version >= 4 => (c.node_id.0, c.error_code, c.error_message.clone()),
            _ => (
                response.node_id.0,
                response.error_code,
                response.error_message,
            ),
        };
        check(
            ApiKey::FindCoordinator,
            || group.to_owned(),
            code,
            message.as_deref(),
        )?;
        self.broker(node_id).await
    }

    async fn topic(&mut self, topic: &str) -> Result<&TopicInfo, ClientError> {
        if !self.metadata.topics.iter().any(|t| t.name == topic) {
            let fresh = self.metadata(Some(&[topic])).await?;
            if let Some(t) = fresh.topics.iter().find(|t| t.name == topic) {
                check(ApiKey::Metadata, || topic.to_owned(), t.error_code, None)?;
            }
        }
        self.metadata
            .topics
            .iter()
            .find(|t| t.name == topic)
            .ok_or_else(|| ClientError::Kafka {
                api: ApiKey::Metadata,
                resource: topic.to_owned(),
                code: UNKNOWN_TOPIC_OR_PARTITION,
                message: None,
            })
    }
}

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// The last Fetch version that names topics by name.
const FETCH_BY_NAME_MAX: i16 = 12;

impl ProduceRequest<Bytes> {
    /// A request carrying one batch to one partition.
    pub fn single(topic: &str, partition: i32, batch: Bytes, acks: i16, timeout_ms: i32) -> Self {
        Self {
            transactional_id: None,
            acks,
            timeout_ms,
            topics: vec![ProduceTopic {
                name: str_bytes(topic),
                partitions: vec![ProducePartition {
                    index: partition,
                    records: Some(batch),
                }],
            }],
        }
    }
}

/// The outcome of a one-partition Produce, as a [`ProduceAck`] or the partition's error.
pub fn produce_ack(
    response: &kafka_protocol::messages::ProduceResponse,
    topic: &str,
    partition: i32,
) -> Result<ProduceAck, ClientError> {
    let answers = response
        .responses
        .iter()
        .flat_map(|t| &t.partition_responses);
    let answer = partition_answer(
        ApiKey::Produce,
        (topic, partition),
        answers.map(|p| (p, p.index, p.error_code, p.error_message.as_deref())),
    )?;
    Ok(ProduceAck {
        base_offset: answer.base_offset,
        log_append_time_ms: answer.log_append_time_ms,
        log_start_offset: answer.log_start_offset,
    })
}

/// An OffsetCommit of one topic's partitions outside any generation; a group member sets its
/// generation and member id on it.
pub(crate) fn offset_commit_request(
    group: &str,
    topic: &str,
    offsets: &[(i32, i64)],
) -> OffsetCommitRequest {
    OffsetCommitRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id_or_member_epoch(-1)
        .with_retention_time_ms(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(
                    offsets
                        .iter()
                        .map(|(partition, offset)| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(*partition)
                                .with_committed_offset(*offset)
                                .with_committed_leader_epoch(-1)
                                .with_committed_metadata(Some(StrBytes::new()))
                        })
                        .collect(),
                ),
        ])
}

/// `Ok` if every partition of an OffsetCommit was committed, else the first partition's error.
pub(crate) fn check_offset_commit(
    response: &kafka_protocol::messages::OffsetCommitResponse,
) -> Result<(), ClientError> {
    for t in &response.topics {
        for p in &t.partitions {
            check(
                ApiKey::OffsetCommit,
                || format!("{}-{}", t.name.0, p.partition_index),
                p.error_code,
                None,
            )?;
        }
    }
    Ok(())
}

/// `Ok` if every (resource, error code, message) has code 0, else the first error.
fn check_each<'a, N: ToString>(
    api: ApiKey,
    results: impl IntoIterator<Item = (N, i16, Option<&'a str>)>,
) -> Result<(), ClientError> {
    for (resource, code, message) in results {
        check(api, || resource.to_string(), code, message)?;
    }
    Ok(())
}

/// A one-partition request's answer for that partition, given as (answer, partition index,
/// error code, error message): the answer if its code is 0, else the Kafka error.
fn partition_answer<'a, P>(
    api: ApiKey,
    (topic, partition): (&str, i32),
    answers: impl IntoIterator<Item = (&'a P, i32, i16, Option<&'a str>)>,
) -> Result<&'a P, ClientError> {
    let (answer, _, code, message) = answers
        .into_iter()
        .find(|(_, index, _, _)| *index == partition)
        .ok_or_else(|| ClientError::Protocol {
            addr: String::new(),
            reason: format!("{api:?} response without {topic}-{partition}"),
        })?;
    check(api, || format!("{topic}-{partition}"), code, message)?;
    Ok(answer)
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn topic_name(s: &str) -> TopicName {
    TopicName(str_bytes(s))
}

fn group_id(s: &str) -> GroupId {
    GroupId(str_bytes(s))
}
