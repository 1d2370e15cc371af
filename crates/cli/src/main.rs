//! The `oxray` command: every role (head, node agent) and every client verb in one binary.

mod commands;
mod launch;
mod monitor;
mod output;
mod personality;
mod ray_flags;
mod resources;
mod target;
mod tls;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use personality::Personality;
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
    Start(Box<commands::start::StartArgs>),
    /// Stop every oxray process started on this machine.
    Stop(commands::stop::StopArgs),
    /// Show the cluster's nodes, resources in use and pending work.
    Status(commands::status::StatusArgs),
    /// Exit 0 if the cluster's head answers, 1 if not (as Ray's, for probes and scripts).
    HealthCheck(target::TargetArgs),
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
    GetAuthToken(commands::token::TokenArgs),
    /// oxray collects no usage statistics; accepted as Ray's.
    #[command(hide = true)]
    DisableUsageStats,
    #[command(hide = true)]
    EnableUsageStats,
    /// Run the Kubernetes operator (RayCluster, RayJob, RayService in oxray.io/v1), or print
    /// its CRDs (`oxray operator crd`).
    Operator(commands::operator::OperatorArgs),
    /// Run the control plane in the foreground (what `start --head` launches).
    #[command(hide = true)]
    Head(commands::roles::HeadArgs),
    /// Run a node agent in the foreground (what `start` launches).
    #[command(hide = true)]
    Agent(commands::roles::AgentArgs),
    #[command(external_subcommand)]
    Other(Vec<String>),
}

fn main() -> ExitCode {
    let raw: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let personality = Personality::of(raw.first().map(|a| a.as_os_str()));
    if let Some(line) = personality.version_line(&raw) {
        println!("{line}");
        return ExitCode::SUCCESS;
    }
    let args = personality.argv(raw);
    // Before any thread starts: Ray's variables become oxray's for this process and its children.
    if let Err(e) = oxray_config::ray_env::adopt(!personality::starts_servers(&args)) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let name = if personality == Personality::Serve { "ray" } else { personality.name() };
    let matches = Cli::command().name(name).bin_name(name).get_matches_from(args);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Start(args) => commands::start::run(*args),
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
        Command::GetAuthToken(args) => commands::token::run(args),
        Command::HealthCheck(args) => commands::status::health_check(args),
        Command::DisableUsageStats | Command::EnableUsageStats => {
            println!("oxray collects no usage statistics");
            Ok(ExitCode::SUCCESS)
        }
        Command::Other(words) => {
            eprintln!("error: {}", personality::missing_verb(words.first().map(String::as_str).unwrap_or_default()));
            Ok(ExitCode::from(2))
        }
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
