//! The Kafka APIs the broker answers, one module each (group APIs live in `crate::group`).
//! Each turns a request into work on the shards that own the partitions it names, and their
//! answers into the response for the request's version.

pub mod acls;
pub mod cluster;
pub mod configs;
pub mod delete_records;
pub mod elect_leaders;
pub mod fetch;
pub mod list_offsets;
pub mod metadata;
pub mod produce;
pub mod topics;

use std::collections::BTreeMap;
use std::future::Future;
use std::rc::Rc;

use crate::shard::Shard;

/// Runs `work` for every item on the shard that owns it (`owner`), the shards at once and the
/// items of a shard at once; results come back in the order of `items`. An item whose shard is
/// gone gets `gone()`.
pub async fn on_owners<I, R, F, Fut>(
    shard: &Rc<Shard>,
    items: Vec<(usize, I)>,
    work: F,
    gone: fn() -> R,
) -> Vec<R>
where
    I: Send + 'static,
    R: Send + 'static,
    F: Fn(Rc<Shard>, I) -> Fut + Send + Clone + 'static,
    Fut: Future<Output = R> + 'static,
{
    on_owners_by_part(
        shard,
        items,
        move |owner: Rc<Shard>, items: Vec<I>| {
            // One task for the shard's part, not one per item: first polled in order, then
            // only as woken.
            let work = work.clone();
            futures_util::future::join_all(items.into_iter().map(move |i| work(owner.clone(), i)))
        },
        gone,
    )
    .await
}

/// Runs `part` once on each shard that owns items (`owner`), with that shard's items in their
/// order, the shards at once; `part` answers each of its items, in order. Results come back in
/// the order of `items`. An item whose shard is gone gets `gone()`.
pub async fn on_owners_by_part<I, R, F, Fut>(
    shard: &Rc<Shard>,
    items: Vec<(usize, I)>,
    part: F,
    gone: fn() -> R,
) -> Vec<R>
where
    I: Send + 'static,
    R: Send + 'static,
    F: Fn(Rc<Shard>, Vec<I>) -> Fut + Send + Clone + 'static,
    Fut: Future<Output = Vec<R>> + 'static,
{
    let count = items.len();
    let mut by_owner: BTreeMap<usize, Vec<(usize, I)>> = BTreeMap::new();
    for (position, (owner, item)) in items.into_iter().enumerate() {
        by_owner.entry(owner).or_default().push((position, item));
    }
    let tasks: Vec<_> = by_owner
        .into_iter()
        .map(|(owner, items)| {
            let positions: Vec<usize> = items.iter().map(|(p, _)| *p).collect();
            let items: Vec<I> = items.into_iter().map(|(_, i)| i).collect();
            let part = part.clone();
            let this = shard.clone();
            let task = glommio::spawn_local(async move {
                this.mesh()
                    .run_on(owner, &this, move |owner_shard: Rc<Shard>| {
                        part(owner_shard, items)
                    })
                    .await
            });
            (positions, task)
        })
        .collect();
    let mut results: Vec<Option<R>> = (0..count).map(|_| None).collect();
    for (positions, task) in tasks {
        match task.await {
            Ok(answers) => {
                assert_eq!(answers.len(), positions.len(), "a part answers each item");
                for (position, answer) in positions.into_iter().zip(answers) {
                    results[position] = Some(answer);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "a shard did not answer");
                for position in positions {
                    results[position] = Some(gone());
                }
            }
        }
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(gone))
        .collect()
}
