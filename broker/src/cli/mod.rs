//! The admin command line: topics, console producer and consumer, groups.

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Manages topics.
    #[command(subcommand)]
    Topic(TopicCommand),
}

#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// Lists topics.
    List,
}

pub fn run(command: Command) -> ExitCode {
    match command {
        Command::Topic(TopicCommand::List) => ExitCode::SUCCESS,
    }
}
