use anyhow::Result;
use clap::{Args, Subcommand};
use std::net::SocketAddr;
use std::process::ExitCode;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct OperatorArgs {
    #[command(subcommand)]
    command: Option<OperatorCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum OperatorCommand {
    /// Print the CustomResourceDefinitions (RayCluster, RayJob, RayService) as YAML
    Crd,
}

#[derive(Args)]
struct RunArgs {
    /// A namespace to watch (repeat for several) [default: every namespace]
    #[arg(long = "namespace", value_name = "NAMESPACE")]
    namespaces: Vec<String>,
    /// Where /healthz and /metrics listen
    #[arg(long, default_value = "0.0.0.0:8080")]
    health_addr: SocketAddr,
    /// The cluster DNS domain in the addresses workers use to reach their head
    #[arg(long, default_value = "cluster.local")]
    cluster_domain: String,
    /// Apply the CRDs (server-side) before starting, so one command installs everything
    #[arg(long)]
    install_crds: bool,
    /// Take a Lease before reconciling, so several replicas never act at once
    #[arg(long)]
    leader_elect: bool,
}

pub fn run(args: OperatorArgs) -> Result<ExitCode> {
    if let Some(OperatorCommand::Crd) = args.command {
        print!("{}", oxray_operator::crd::crds_yaml());
        return Ok(ExitCode::SUCCESS);
    }
    crate::commands::roles::init_logging();
    let options = oxray_operator::Options {
        namespaces: args.run.namespaces,
        health_addr: args.run.health_addr,
        cluster_domain: args.run.cluster_domain,
        install_crds: args.run.install_crds,
        leader_elect: args.run.leader_elect,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(oxray_operator::run(options))?;
    Ok(ExitCode::SUCCESS)
}
