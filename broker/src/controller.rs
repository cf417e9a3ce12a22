//! The controller: the only writer of the metadata. Shards propose [`Command`]s through
//! [`propose`]; the controller applies them in order to the latest metadata, commits the result
//! and has every shard apply it before anyone is answered, so a client that was told its topic
//! exists finds it on every shard.
//!
//! The controller lives on shard 0. On a node of its own (no `--controller-voters`) it is a
//! quorum of one, and committing is saving the new metadata (synced) to this node's disk, as
//! it always was. In a cluster, committing goes through the Raft quorum ([`Cluster::commit`]:
//! forwarded to the active controller, committed, applied here); proposers do not change.

use std::cell::OnceCell;
use std::rc::Rc;
use std::sync::Arc;

use glommio::sync::Semaphore;
use model::{Applied, ClusterMetadata, Command};
use net::kafka_protocol::ResponseError;

use crate::cluster::Cluster;
use crate::metadata::{self, TopicError};
use crate::shard::Shard;

/// The shard the controller lives on.
pub const CONTROLLER_SHARD: usize = 0;

/// What each proposed command did, in the order proposed.
pub type Outcomes = Vec<Result<Applied, TopicError>>;

#[derive(Debug)]
pub struct Controller {
    /// One commit at a time: each applies to the metadata the previous one left.
    turn: Semaphore,
    /// Set in a cluster: commits go through its quorum.
    cluster: OnceCell<Rc<Cluster>>,
}

impl Default for Controller {
    fn default() -> Self {
        Controller {
            turn: Semaphore::new(1),
            cluster: OnceCell::new(),
        }
    }
}

impl Controller {
    pub fn set_cluster(&self, cluster: Rc<Cluster>) {
        if self.cluster.set(cluster).is_err() {
            tracing::error!("the cluster was started twice");
        }
    }

    pub fn cluster(&self) -> Option<&Rc<Cluster>> {
        self.cluster.get()
    }

    /// Applies `commands` in order to the latest metadata; if that changed it, the new version is
    /// saved and applied by every shard before this returns. A refused command changes nothing
    /// and does not stop the ones after it.
    async fn commit(
        &self,
        shard: &Rc<Shard>,
        commands: Vec<Command>,
    ) -> Result<Outcomes, TopicError> {
        assert_eq!(
            shard.id, CONTROLLER_SHARD,
            "the controller commits on its own shard"
        );
        if let Some(cluster) = self.cluster.get() {
            return cluster.commit(commands).await;
        }
        let _turn = self.turn.acquire_permit(1).await;
        let current = shard.metadata();
        let mut next = (*current).clone();
        let outcomes: Outcomes = commands
            .iter()
            .map(|c| model::apply(&mut next, c).map_err(TopicError::from))
            .collect();
        if next.version == current.version {
            return Ok(outcomes);
        }
        assert!(next.version > current.version, "versions only grow");
        if let Err(e) = metadata::save(&next, &shard.config.data_dir) {
            tracing::error!(error = %e, "saving metadata");
            return Err(TopicError::new(
                ResponseError::KafkaStorageError,
                e.to_string(),
            ));
        }
        broadcast(shard, Arc::new(next)).await?;
        Ok(outcomes)
    }
}

/// Has the controller commit `commands`, from any shard: the one way metadata changes.
pub async fn propose(shard: &Rc<Shard>, commands: Vec<Command>) -> Result<Outcomes, TopicError> {
    let outcome = shard
        .mesh()
        .run_on(CONTROLLER_SHARD, shard, move |s: Rc<Shard>| async move {
            match s.controller() {
                Some(controller) => controller.commit(&s, commands).await,
                None => Err(not_controller()),
            }
        })
        .await;
    outcome.unwrap_or_else(|_gone| Err(not_controller()))
}

fn not_controller() -> TopicError {
    TopicError::new(
        ResponseError::NotController,
        "the controller is not running (the broker is stopping)",
    )
}

/// Has every shard apply `metadata`, each on its own executor, all at once, and open the group
/// coordinators of offsets partitions that came to it.
pub async fn broadcast(
    shard: &Rc<Shard>,
    metadata: Arc<ClusterMetadata>,
) -> Result<(), TopicError> {
    let tasks: Vec<_> = (0..shard.count)
        .map(|target| {
            let this = shard.clone();
            let metadata = metadata.clone();
            glommio::spawn_local(async move {
                this.mesh()
                    .run_on(target, &this, move |s: Rc<Shard>| async move {
                        s.apply_metadata(metadata)
                            .await
                            .map_err(|e| e.to_string())?;
                        crate::groups::open_coordinators(&s)
                            .await
                            .map_err(|e| e.to_string())
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
