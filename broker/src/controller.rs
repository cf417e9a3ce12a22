//! The controller: the only writer of the metadata. Shards propose [`Command`]s through
//! [`propose`]; the controller applies them in order to the latest metadata, commits the result
//! and has every shard apply it before anyone is answered, so a client that was told its topic
//! exists finds it on every shard.
//!
//! Today the quorum is this node alone and the controller lives on shard 0: committing is saving
//! the new metadata (synced) to this node's disk. The Raft quorum of `broker/controller` takes the
//! place of that save; proposers do not change.

use std::rc::Rc;
use std::sync::Arc;

use glommio::sync::Semaphore;
use model::{Applied, ApplyError, ClusterMetadata, Command};
use net::kafka_protocol::ResponseError;

use crate::metadata::{self, TopicError};
use crate::shard::Shard;

/// The shard the controller lives on.
pub const CONTROLLER_SHARD: usize = 0;

/// What each proposed command did, in the order proposed.
pub type Outcomes = Vec<Result<Applied, ApplyError>>;

#[derive(Debug)]
pub struct Controller {
    /// One commit at a time: each applies to the metadata the previous one left.
    turn: Semaphore,
}

impl Default for Controller {
    fn default() -> Self {
        Controller {
            turn: Semaphore::new(1),
        }
    }
}

impl Controller {
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
        let _turn = self.turn.acquire_permit(1).await;
        let current = shard.metadata();
        let mut next = (*current).clone();
        let outcomes: Outcomes = commands
            .iter()
            .map(|c| model::apply(&mut next, c))
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

/// Has every shard apply `metadata`, each on its own executor, all at once.
async fn broadcast(shard: &Rc<Shard>, metadata: Arc<ClusterMetadata>) -> Result<(), TopicError> {
    let tasks: Vec<_> = (0..shard.count)
        .map(|target| {
            let this = shard.clone();
            let metadata = metadata.clone();
            glommio::spawn_local(async move {
                this.mesh()
                    .run_on(target, &this, move |s: Rc<Shard>| async move {
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
