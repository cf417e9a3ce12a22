//! Work for another shard: a closure sent over a bounded channel to the shard that owns the
//! data, run there on its executor, its result sent back.
//!
//! A closure must be `Send` (it crosses threads) but the future it makes need not be: it runs on
//! the owning shard, next to the `Rc` state it touches. Record batches travel inside closures as
//! `Bytes`/`BytesMut`, never copied. Every pair of shards has its own bounded channel, so a shard
//! that falls behind slows only the senders that wait on it.

use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};

use futures_channel::oneshot;
use glommio::channels::shared_channel::{
    self, ConnectedReceiver, ConnectedSender, SharedReceiver, SharedSender,
};

/// Messages a shard may have queued from one other shard before senders wait.
const CHANNEL_CAPACITY: usize = 1024;

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;
type Job<C> = Box<dyn FnOnce(Rc<C>) -> LocalFuture + Send>;

/// The channel ends one shard is given before its executor starts.
pub struct Ends<C> {
    senders: Vec<Option<SharedSender<Job<C>>>>,
    receivers: Vec<Option<SharedReceiver<Job<C>>>>,
}

impl<C> std::fmt::Debug for Ends<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ends")
            .field("shards", &self.senders.len())
            .finish()
    }
}

/// Channels for every ordered pair of `shards` shards; entry i goes to shard i.
pub fn channels<C: 'static>(shards: usize) -> Vec<Ends<C>> {
    let mut ends: Vec<Ends<C>> = (0..shards)
        .map(|_| Ends {
            senders: (0..shards).map(|_| None).collect(),
            receivers: (0..shards).map(|_| None).collect(),
        })
        .collect();
    for from in 0..shards {
        for to in 0..shards {
            if from != to {
                let (s, r) = shared_channel::new_bounded(CHANNEL_CAPACITY);
                ends[from].senders[to] = Some(s);
                ends[to].receivers[from] = Some(r);
            }
        }
    }
    ends
}

/// A shard's connected ends: it sends work to the others and runs what they send it.
pub struct Mesh<C> {
    me: usize,
    senders: Vec<Option<ConnectedSender<Job<C>>>>,
}

impl<C> std::fmt::Debug for Mesh<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mesh").field("me", &self.me).finish()
    }
}

/// The shard a request was for is gone (it is shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("shard {0} is not running")]
pub struct ShardGone(pub usize);

impl<C: 'static> Mesh<C> {
    /// Connects this shard's ends (every peer connects at the same time: do this before anything
    /// that can fail, or the peers wait for ever) and starts running what other shards send,
    /// with the context set later in `context` as the argument of their closures.
    pub async fn connect(me: usize, ends: Ends<C>, context: Rc<OnceCell<Weak<C>>>) -> Mesh<C> {
        let senders: Vec<_> = ends
            .senders
            .into_iter()
            .map(|s| s.map(|s| glommio::spawn_local(s.connect())))
            .collect();
        let receivers: Vec<_> = ends
            .receivers
            .into_iter()
            .map(|r| r.map(|r| glommio::spawn_local(r.connect())))
            .collect();
        let mut connected = Vec::new();
        for s in senders {
            connected.push(match s {
                Some(task) => Some(task.await),
                None => None,
            });
        }
        for r in receivers.into_iter().flatten() {
            let receiver = r.await;
            glommio::spawn_local(serve(receiver, context.clone())).detach();
        }
        Mesh {
            me,
            senders: connected,
        }
    }

    /// Runs `work` on shard `shard` and returns its result. `local` is this shard's context,
    /// used when `shard` is this one (no channel, no copy).
    pub async fn run_on<R, F, Fut>(
        &self,
        shard: usize,
        local: &Rc<C>,
        work: F,
    ) -> Result<R, ShardGone>
    where
        R: Send + 'static,
        F: FnOnce(Rc<C>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
    {
        if shard == self.me {
            return Ok(work(local.clone()).await);
        }
        let sender = self
            .senders
            .get(shard)
            .and_then(Option::as_ref)
            .ok_or(ShardGone(shard))?;
        let (tx, rx) = oneshot::channel();
        let job: Job<C> = Box::new(move |context| {
            Box::pin(async move {
                let _ = tx.send(work(context).await);
            })
        });
        sender.send(job).await.map_err(|_| ShardGone(shard))?;
        rx.await.map_err(|_| ShardGone(shard))
    }
}

/// Runs each job another shard sends, as its own task so a slow one does not hold up the rest.
/// A job that comes before the context is set, or after it is gone, is dropped: its sender sees
/// [`ShardGone`].
async fn serve<C: 'static>(receiver: ConnectedReceiver<Job<C>>, context: Rc<OnceCell<Weak<C>>>) {
    while let Some(job) = receiver.recv().await {
        if let Some(context) = context.get().and_then(Weak::upgrade) {
            glommio::spawn_local(job(context)).detach();
        }
    }
}
