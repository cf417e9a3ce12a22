//! The bench's one error type: what stops a run.

use net::client::ClientError;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Setup or a connection failed: the broker is down, refused us, or broke the protocol.
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("topic {topic}: {reason}")]
    Topic { topic: String, reason: String },
    #[error("starting an executor: {0}")]
    Executor(String),
    #[error("writing {path}: {source}")]
    Output {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
}
