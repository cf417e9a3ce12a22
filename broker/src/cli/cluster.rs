//! `spindle cluster describe`: the cluster's id, its brokers (id, address, rack) and which one is
//! the active controller, as Metadata reports them.

use clap::{Args, Subcommand};
use serde::Serialize;

use super::connect::ConnectArgs;
use super::error::CliError;
use super::output::{Table, summary};

#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Shows the cluster id, every live broker and the active controller.
    Describe,
}

#[derive(Debug, Serialize)]
struct ClusterDescription {
    cluster_id: Option<String>,
    controller: i32,
    brokers: Vec<BrokerDescription>,
}

#[derive(Debug, Serialize)]
struct BrokerDescription {
    node: i32,
    host: String,
    port: i32,
    rack: Option<String>,
    controller: bool,
}

pub async fn run(args: ClusterArgs) -> Result<(), CliError> {
    let mut client = args.connect.connect().await?;
    match args.command {
        ClusterCommand::Describe => {
            let metadata = client.metadata(Some(&[])).await?;
            let mut brokers: Vec<BrokerDescription> = metadata
                .brokers
                .into_iter()
                .map(|b| BrokerDescription {
                    controller: b.node_id == metadata.controller_id,
                    node: b.node_id,
                    host: b.host,
                    port: b.port,
                    rack: b.rack,
                })
                .collect();
            brokers.sort_by_key(|b| b.node);
            let description = ClusterDescription {
                cluster_id: metadata.cluster_id,
                controller: metadata.controller_id,
                brokers,
            };
            args.connect.output.emit(&description, describe_table)
        }
    }
}

fn describe_table(d: &ClusterDescription) -> String {
    let headline = summary(&[
        ("CLUSTER-ID", d.cluster_id.clone().unwrap_or_default()),
        ("CONTROLLER", d.controller.to_string()),
        ("BROKERS", d.brokers.len().to_string()),
    ]);
    let brokers = Table::of(
        &["NODE", "HOST", "PORT", "RACK", "CONTROLLER"],
        &d.brokers,
        |b| {
            vec![
                b.node.to_string(),
                b.host.clone(),
                b.port.to_string(),
                b.rack.clone().unwrap_or_default(),
                if b.controller { "yes" } else { "no" }.to_owned(),
            ]
        },
    );
    [headline, brokers].join("\n")
}
