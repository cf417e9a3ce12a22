//! The admin command line: topics, console producer and consumer, groups, the cluster. Every command speaks
//! the Kafka protocol to `--bootstrap-server` through `net::client`, so it works against any
//! Kafka-compatible broker.
//!
//! Module map:
//! - [`topic`], [`produce`], [`consume`], [`group`], [`cluster`]: the commands.
//! - [`connect`]: the options every command takes, connecting, looking a topic up.
//! - [`runtime`]: the glommio executor a command runs on; Ctrl-C as a flag.
//! - [`output`]: tables and JSON on stdout. [`error`]: messages that say what to do.
//! - [`lines`] and [`partitioner`]: the producer's input and its murmur2 partitioner.
//! - [`offset_spec`] and [`format`]: the consumer's `--offset` and `--format`.
//!
//! Results go to stdout; errors go to stderr as one line, `error: ...`, with exit code 1 (2 for
//! usage errors, as clap does).

use std::process::ExitCode;

use clap::Subcommand;

mod cluster;
mod connect;
mod consume;
mod error;
mod format;
mod group;
mod lines;
mod offset_spec;
mod output;
mod partitioner;
mod produce;
mod runtime;
mod topic;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Creates, lists, describes, alters and deletes topics.
    Topic(topic::TopicArgs),
    /// Produces one record per line of stdin.
    Produce(produce::ProduceArgs),
    /// Prints a topic's records, from chosen partitions or as a group member.
    Consume(consume::ConsumeArgs),
    /// Lists, describes, resets and deletes consumer groups.
    Group(group::GroupArgs),
    /// Describes the cluster (its brokers and the active controller), or elects preferred leaders.
    Cluster(cluster::ClusterArgs),
}

pub fn run(command: Command) -> ExitCode {
    init_logging();
    let result = runtime::block_on(move || async move {
        match command {
            Command::Topic(args) => topic::run(args).await,
            Command::Produce(args) => produce::run(args).await,
            Command::Consume(args) => consume::run(args).await,
            Command::Group(args) => group::run(args).await,
            Command::Cluster(args) => cluster::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}

/// Warnings (a failed heartbeat, say) on stderr; `RUST_LOG` for more.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .init();
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    /// The admin commands as `spindle` mounts them.
    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    fn parse(line: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("spindle").chain(line.split(' ')))
    }

    #[test]
    fn the_command_tree_is_consistent() {
        // Duplicate flags, bad defaults and the like panic here rather than for a user.
        Cli::command().debug_assert();
    }

    #[test]
    fn options_read_as_documented() {
        assert!(
            parse("consume t --offset -10 -n 5 -f %k\\n").is_ok(),
            "-N is an offset"
        );
        assert!(
            parse("consume t -o latest --from-beginning").is_err(),
            "one start"
        );
        assert!(
            parse("consume t --group g --partition 1").is_err(),
            "a group assigns"
        );
        assert!(
            parse("consume t --assignor roundrobin").is_err(),
            "an assignor needs a group"
        );
        assert!(parse("produce t --acks all -z zstd -K : -H a=b -v").is_ok());
        assert!(parse("produce t --acks 2").is_err());
        assert!(parse("topic create a b -p 3 -r 1 -c retention.ms=1").is_ok());
        assert!(
            parse("topic alter-config t").is_err(),
            "something to change"
        );
        assert!(
            parse("group reset-offsets g --topic t").is_err(),
            "somewhere to go"
        );
        assert!(parse("group reset-offsets g --topic t --to-earliest --to-latest").is_err());
        assert!(parse("group reset-offsets g --topic t --to-offset 5 --dry-run").is_ok());
        assert!(parse("cluster describe --output json").is_ok());
        assert!(parse("cluster elect-leaders").is_ok());
        assert!(parse("cluster elect-leaders --topic t --partition 2").is_ok());
        assert!(
            parse("cluster elect-leaders --partition 2").is_err(),
            "a partition of which topic?"
        );
        // Connection options go anywhere after the command.
        let cli = parse("topic list --output json -b 10.0.0.1:9092").unwrap();
        let Command::Topic(args) = cli.command else {
            panic!("not a topic command");
        };
        assert!(format!("{args:?}").contains("10.0.0.1:9092"));
    }
}
