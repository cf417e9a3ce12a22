//! The client's one error type.

use kafka_protocol::ResponseError;
use kafka_protocol::messages::ApiKey;

use super::batch::BatchError;
use crate::frame::FrameError;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("broker unreachable at {addr}: {source}")]
    Unreachable {
        addr: String,
        source: std::io::Error,
    },
    #[error("{what} at {addr} timed out after {timeout_ms} ms")]
    Timeout {
        what: &'static str,
        addr: String,
        timeout_ms: u64,
    },
    /// The broker answered with a Kafka error code.
    #[error("{api:?} for {resource}: {} (error code {code}){}", error_name(*code), message_suffix(message))]
    Kafka {
        api: ApiKey,
        resource: String,
        code: i16,
        message: Option<String>,
    },
    #[error("protocol error with {addr}: {reason}")]
    Protocol { addr: String, reason: String },
    #[error("broker at {addr} does not support {api:?} at any version we speak")]
    Unsupported { addr: String, api: ApiKey },
    #[error("connection to {addr} is unusable after an earlier failure: {reason}")]
    Broken { addr: String, reason: String },
    #[error("connection to {addr}: {source}")]
    Frame { addr: String, source: FrameError },
    #[error("malformed record batch: {0}")]
    Batch(#[from] BatchError),
    #[error("{0}")]
    Usage(String),
}

impl ClientError {
    /// The Kafka error code, for a [`ClientError::Kafka`].
    pub fn kafka_code(&self) -> Option<i16> {
        match self {
            Self::Kafka { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether Kafka marks the error retriable (e.g. NOT_LEADER_OR_FOLLOWER).
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Kafka { code, .. } => {
                ResponseError::try_from_code(*code).is_some_and(|e| e.is_retriable())
            }
            Self::Timeout { .. } => true,
            _ => false,
        }
    }
}

/// Kafka's name for an error code, e.g. `UnknownTopicOrPartition`.
pub fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        Some(error) => error.to_string(),
        None => "None".to_owned(),
    }
}

fn message_suffix(message: &Option<String>) -> String {
    message
        .as_deref()
        .filter(|m| !m.is_empty())
        .map(|m| format!(": {m}"))
        .unwrap_or_default()
}

/// `Ok` for error code 0, else a [`ClientError::Kafka`].
pub(crate) fn check(
    api: ApiKey,
    resource: impl FnOnce() -> String,
    code: i16,
    message: Option<&str>,
) -> Result<(), ClientError> {
    if code == 0 {
        return Ok(());
    }
    Err(ClientError::Kafka {
        api,
        resource: resource(),
        code,
        message: message.map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_errors_carry_the_error_name() {
        let error = check(ApiKey::Produce, || "t-0".into(), 3, None).unwrap_err();
        assert_eq!(
            error.to_string(),
            "Produce for t-0: UnknownTopicOrPartition (error code 3)"
        );
        assert!(error.is_retriable());
        assert!(check(ApiKey::Produce, || unreachable!(), 0, None).is_ok());
        let with_message = check(ApiKey::CreateTopics, || "t".into(), 36, Some("exists"));
        assert_eq!(
            with_message.unwrap_err().to_string(),
            "CreateTopics for t: TopicAlreadyExists (error code 36): exists"
        );
    }
}
