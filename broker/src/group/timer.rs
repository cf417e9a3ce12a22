//! Timers on the coordinator's executor, owned by what they time: a member's session, a
//! group's join or sync phase. Dropping a timer cancels it, so a timer never outlives its owner
//! and never fires for a member or group that is gone.

use std::fmt;
use std::time::Duration;

/// Runs a closure once, after a delay, unless dropped first. Must be created inside a glommio
/// executor. The closure never runs inside `after` itself, even for a zero delay: glommio runs a
/// spawned task at once until it first waits, and the caller may be holding what the closure
/// needs.
pub(super) struct Timer {
    _task: glommio::Task<()>,
}

impl Timer {
    pub fn after(delay: Duration, fire: impl FnOnce() + 'static) -> Timer {
        Timer {
            _task: glommio::spawn_local(async move {
                futures_lite::future::yield_now().await;
                glommio::timer::sleep(delay).await;
                fire();
            }),
        }
    }
}

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Timer")
    }
}
