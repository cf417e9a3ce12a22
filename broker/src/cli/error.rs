//! What can go wrong in an admin command, worded for the person who ran it: what happened and
//! what to do. Kafka error codes become these where the command knows what they are about.

use std::io;

use net::client::ClientError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("broker unreachable at {addr}: is `spindle serve` running? ({reason})")]
    Unreachable { addr: String, reason: String },
    #[error(
        "{what} at {addr} timed out after {timeout_ms} ms: is it a Kafka broker, and is it up?"
    )]
    Timeout {
        what: &'static str,
        addr: String,
        timeout_ms: u64,
    },
    #[error("topic '{0}' not found")]
    TopicNotFound(String),
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    #[error("topic '{topic}' has no partition {partition} (it has {count})")]
    NoSuchPartition {
        topic: String,
        partition: i32,
        count: usize,
    },
    #[error("group '{0}' not found")]
    GroupNotFound(String),
    #[error("group '{0}' is not empty: stop its consumers first")]
    GroupNotEmpty(String),
    /// A request the broker refused or could not serve, as the client words it.
    #[error("{0}")]
    Client(ClientError),
    #[error("{context}: {source}")]
    Io {
        context: &'static str,
        source: io::Error,
    },
    /// Bad arguments that parsing could not catch.
    #[error("{0}")]
    Usage(String),
    /// The command ran but did not do all it should (e.g. records that failed).
    #[error("{0}")]
    Incomplete(String),
}

impl CliError {
    /// 2 for usage, as clap exits on bad arguments; 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) => 2,
            _ => 1,
        }
    }

    pub fn io(context: &'static str) -> impl FnOnce(io::Error) -> Self {
        move |source| Self::Io { context, source }
    }
}

impl From<ClientError> for CliError {
    fn from(error: ClientError) -> Self {
        match error {
            ClientError::Unreachable { addr, source } => Self::Unreachable {
                addr,
                reason: source.to_string(),
            },
            ClientError::Timeout {
                what,
                addr,
                timeout_ms,
            } => Self::Timeout {
                what,
                addr,
                timeout_ms,
            },
            other => Self::Client(other),
        }
    }
}

/// Failures that may pass on a retry, once the client forgets its connections and metadata
/// (a leader moved, a broker restarted, a request timed out).
pub fn transient(error: &ClientError) -> bool {
    error.is_retriable()
        || matches!(
            error,
            ClientError::Broken { .. }
                | ClientError::Protocol { .. }
                | ClientError::Frame { .. }
                | ClientError::Unreachable { .. }
        )
}

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const TOPIC_ALREADY_EXISTS: i16 = 36;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;

/// Kafka error codes read in the light of what the command was about.
pub trait About<T> {
    fn about_topic(self, topic: &str) -> Result<T, CliError>;
    fn about_group(self, group: &str) -> Result<T, CliError>;
}

impl<T> About<T> for Result<T, ClientError> {
    fn about_topic(self, topic: &str) -> Result<T, CliError> {
        self.map_err(|error| match error.kafka_code() {
            Some(UNKNOWN_TOPIC_OR_PARTITION) => CliError::TopicNotFound(topic.to_owned()),
            Some(TOPIC_ALREADY_EXISTS) => CliError::TopicExists(topic.to_owned()),
            _ => error.into(),
        })
    }

    fn about_group(self, group: &str) -> Result<T, CliError> {
        self.map_err(|error| match error.kafka_code() {
            Some(GROUP_ID_NOT_FOUND) => CliError::GroupNotFound(group.to_owned()),
            Some(NON_EMPTY_GROUP) => CliError::GroupNotEmpty(group.to_owned()),
            _ => error.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use net::kafka_protocol::messages::ApiKey;

    use super::*;

    fn kafka(code: i16) -> Result<(), ClientError> {
        Err(ClientError::Kafka {
            api: ApiKey::DeleteTopics,
            resource: "t".to_owned(),
            code,
            message: None,
        })
    }

    #[test]
    fn kafka_codes_become_messages_about_the_command() {
        let message = |r: Result<(), CliError>| r.unwrap_err().to_string();
        assert_eq!(message(kafka(3).about_topic("t")), "topic 't' not found");
        assert_eq!(
            message(kafka(36).about_topic("t")),
            "topic 't' already exists"
        );
        assert_eq!(message(kafka(69).about_group("g")), "group 'g' not found");
        assert_eq!(
            message(kafka(68).about_group("g")),
            "group 'g' is not empty: stop its consumers first"
        );
        // Others keep Kafka's name for the error.
        assert_eq!(
            message(kafka(37).about_topic("t")),
            "DeleteTopics for t: InvalidPartitions (error code 37)"
        );
    }

    #[test]
    fn an_unreachable_broker_says_what_to_check() {
        let error = CliError::from(ClientError::Unreachable {
            addr: "127.0.0.1:9092".to_owned(),
            source: io::Error::from(io::ErrorKind::ConnectionRefused),
        });
        assert!(
            error
                .to_string()
                .starts_with("broker unreachable at 127.0.0.1:9092: is `spindle serve` running?")
        );
        assert_eq!(error.exit_code(), 1);
        assert_eq!(CliError::Usage("x".to_owned()).exit_code(), 2);
    }
}
