//! The `oxray` command: every role (head, node agent) and every client verb in one binary.

mod commands;
mod launch;
mod monitor;
mod output;
mod resources;
mod target;
mod tls;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "oxray", version, about = "A distributed compute runtime for AI workloads, compatible with Ray")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start the head of a new cluster (--head) or join this machine to one (--address).
    Start(commands::start::StartArgs),
    /// Stop every oxray process started on this machine.
    Stop(commands::stop::StopArgs),
    /// Show the cluster's nodes, resources in use and pending work.
    Status(target::TargetArgs),
    /// List cluster state.
    List {
        #[command(subcommand)]
        what: commands::list::ListWhat,
    },
    /// Show one actor, task (every attempt), placement group or job in full.
    Get(commands::state::GetArgs),
    /// The objects the cluster's processes hold, by node and process, with their sizes.
    Memory(commands::memory::MemoryArgs),
    /// Print a node's log files, or a worker's, actor's, task's or job's output.
    Logs(commands::logs::LogsArgs),
    /// Write the cluster's recent tasks as a Chrome trace (chrome://tracing, Perfetto).
    Timeline(commands::state::TimelineArgs),
    /// Summarize tasks by function or actors by class.
    Summary {
        #[command(subcommand)]
        what: commands::state::SummaryWhat,
    },
    /// Submit and manage jobs (compatible with Ray's Jobs API).
    Job {
        #[command(subcommand)]
        command: commands::job::JobCommand,
    },
    /// Deploy and inspect Serve applications (compatible with Ray's `serve` CLI and REST API).
    Serve {
        #[command(subcommand)]
        command: commands::serve::ServeCommand,
    },
    /// Print the cluster token that clients and joining nodes must present.
    GetAuthToken,
    /// Run the Kubernetes operator (RayCluster, RayJob, RayService in oxray.io/v1), or print
    /// its CRDs (`oxray operator crd`).
    Operator(commands::operator::OperatorArgs),
    /// Run the control plane in the foreground (what `start --head` launches).
    #[command(hide = true)]
    Head(commands::roles::HeadArgs),
    /// Run a node agent in the foreground (what `start` launches).
    #[command(hide = true)]
    Agent(commands::roles::AgentArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Start(args) => commands::start::run(args),
        Command::Stop(args) => commands::stop::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::List { what } => commands::list::run(what),
        Command::Get(args) => commands::state::get(args),
        Command::Summary { what } => commands::state::summary(what),
        Command::Timeline(args) => commands::state::timeline(args),
        Command::Logs(args) => commands::logs::run(args),
        Command::Memory(args) => commands::memory::run(args),
        Command::Job { command } => commands::job::run(command),
        Command::Serve { command } => commands::serve::run(command),
        Command::GetAuthToken => commands::token::run(),
        Command::Operator(args) => commands::operator::run(args),
        Command::Head(args) => commands::roles::run_head(args),
        Command::Agent(args) => commands::roles::run_agent(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
