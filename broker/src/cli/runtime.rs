//! The glommio executor a command runs on, and Ctrl-C as a flag the command looks at.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::error::CliError;

/// Runs a command's future on a glommio executor of its own and waits for it.
pub fn block_on<F, Fut>(work: F) -> Result<(), CliError>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), CliError>> + 'static,
{
    let executor = glommio::LocalExecutorBuilder::default()
        .name("spindle-cli")
        .spawn(move || async move { work().await })
        .map_err(|e| CliError::Usage(format!("cannot start the IO runtime (io_uring): {e}")))?;
    executor
        .join()
        .map_err(|e| CliError::Usage(format!("the IO runtime failed: {e}")))?
}

/// Set by SIGINT or SIGTERM; a second SIGINT ends the process at once.
#[derive(Debug, Clone)]
pub struct StopFlag(Arc<AtomicBool>);

/// How often a waiting command looks at the flag.
const STOP_POLL_MS: u64 = 50;

impl StopFlag {
    pub fn install() -> Result<Self, CliError> {
        let flag = Arc::new(AtomicBool::new(false));
        let install = || -> std::io::Result<()> {
            for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
                // Registered first, so it sees the flag as the earlier signal left it.
                signal_hook::flag::register_conditional_shutdown(signal, 130, flag.clone())?;
                signal_hook::flag::register(signal, flag.clone())?;
            }
            Ok(())
        };
        install().map_err(CliError::io("installing the Ctrl-C handler"))?;
        Ok(Self(flag))
    }

    pub fn raised(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Returns once the flag is raised.
    pub async fn wait(&self) {
        while !self.raised() {
            glommio::timer::sleep(Duration::from_millis(STOP_POLL_MS)).await;
        }
    }

    /// Sleeps `ms`, or less if the flag is raised meanwhile.
    pub async fn sleep(&self, ms: u64) {
        let stop = self.wait();
        let sleep = glommio::timer::sleep(Duration::from_millis(ms));
        futures_lite::future::or(stop, sleep).await;
    }

    /// `None` if the flag is raised before `work` finishes (which is then dropped).
    pub async fn unless_raised<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        futures_lite::future::or(async { Some(work.await) }, async {
            self.wait().await;
            None
        })
        .await
    }
}
