//! `oxray logs`: the log files of the cluster's nodes, and the output of a worker, actor,
//! task or job by its id, through Ray's log API on the dashboard port (as `ray logs`).

use super::job::client::{JobClient, JobTarget};
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use serde_json::Value;
use std::io::Write;
use std::process::ExitCode;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct LogsArgs {
    #[command(subcommand)]
    pub what: Option<LogsWhat>,
    #[command(flatten)]
    pub files: FilesArgs,
}

#[derive(Subcommand, Debug)]
pub enum LogsWhat {
    /// A node's log files: listed, or printed when the glob names one.
    Cluster(FilesArgs),
    /// An actor's output (its worker's stdout, or stderr with --err).
    Actor(IdArgs),
    /// A task attempt's output. An actor's calls share its worker's log: ask for the actor's.
    Task(TaskArgs),
    /// A worker's output, by its pid on a node.
    Worker(WorkerArgs),
    /// A job driver's output, by its submission id.
    Job(JobArgs),
}

/// Which node: its id or ip [default: the head node].
#[derive(Args, Debug)]
pub struct NodeArgs {
    #[arg(long)]
    pub node_id: Option<String>,
    #[arg(long)]
    pub node_ip: Option<String>,
}

/// How much to read.
#[derive(Args, Debug)]
pub struct ReadArgs {
    /// Keep printing what is written to the log until interrupted
    #[arg(short, long)]
    pub follow: bool,
    /// Only the last N lines (-1: all of it)
    #[arg(long, default_value_t = oxray_api_types::logs::DEFAULT_LINES, allow_negative_numbers = true)]
    pub tail: i64,
    #[command(flatten)]
    pub target: JobTarget,
}

#[derive(Args, Debug)]
pub struct FilesArgs {
    /// A glob of file names, e.g. 'worker-*.err'; one match is printed
    pub glob: Option<String>,
    #[command(flatten)]
    pub node: NodeArgs,
    #[command(flatten)]
    pub read: ReadArgs,
}

#[derive(Args, Debug)]
pub struct IdArgs {
    #[arg(long)]
    pub id: String,
    /// stderr instead of stdout
    #[arg(long)]
    pub err: bool,
    #[command(flatten)]
    pub read: ReadArgs,
}

#[derive(Args, Debug)]
pub struct TaskArgs {
    #[command(flatten)]
    pub id: IdArgs,
    #[arg(long, default_value_t = 0)]
    pub attempt_number: u32,
}

#[derive(Args, Debug)]
pub struct WorkerArgs {
    #[arg(long)]
    pub pid: u32,
    #[command(flatten)]
    pub node: NodeArgs,
    /// stderr instead of stdout
    #[arg(long)]
    pub err: bool,
    #[command(flatten)]
    pub read: ReadArgs,
}

#[derive(Args, Debug)]
pub struct JobArgs {
    #[arg(long)]
    pub id: String,
    #[command(flatten)]
    pub read: ReadArgs,
}

fn suffix(err: bool) -> (&'static str, String) {
    ("suffix", if err { "err" } else { "out" }.into())
}

pub fn run(args: LogsArgs) -> Result<ExitCode> {
    let runtime = crate::target::runtime()?;
    let (read, mut query): (&ReadArgs, Vec<(&str, String)>) = match &args.what {
        None => return runtime.block_on(files(&args.files)),
        Some(LogsWhat::Cluster(files_args)) => return runtime.block_on(files(files_args)),
        Some(LogsWhat::Actor(a)) => (&a.read, vec![("actor_id", a.id.clone()), suffix(a.err)]),
        Some(LogsWhat::Task(t)) => (
            &t.id.read,
            vec![("task_id", t.id.id.clone()), ("attempt_number", t.attempt_number.to_string()), suffix(t.id.err)],
        ),
        Some(LogsWhat::Worker(w)) => {
            let mut q = vec![("pid", w.pid.to_string()), suffix(w.err)];
            q.extend(node_query(&w.node));
            (&w.read, q)
        }
        Some(LogsWhat::Job(j)) => (&j.read, vec![("submission_id", j.id.clone())]),
    };
    runtime.block_on(async {
        let client = JobClient::connect(&read.target).await?;
        if query.iter().any(|(k, _)| *k == "pid") && !query.iter().any(|(k, _)| k.starts_with("node_")) {
            query.push(("node_id", head_node(&client).await?));
        }
        print_log(&client, read, query).await
    })?;
    Ok(ExitCode::SUCCESS)
}

fn node_query(node: &NodeArgs) -> Vec<(&'static str, String)> {
    let mut q = Vec::new();
    if let Some(id) = &node.node_id {
        q.push(("node_id", id.clone()));
    }
    if let Some(ip) = &node.node_ip {
        q.push(("node_ip", ip.clone()));
    }
    q
}

/// The head node's id: where the CLI looks when no node is named, as Ray's does.
async fn head_node(client: &JobClient) -> Result<String> {
    let nodes = client.get("/api/v0/nodes?limit=10000").await?;
    let rows = nodes["data"]["result"]["result"].as_array().cloned().unwrap_or_default();
    let head = rows.iter().find(|n| n["is_head_node"] == Value::Bool(true) && n["state"] == "ALIVE");
    match head.and_then(|n| n["node_id"].as_str()) {
        Some(id) => Ok(id.to_string()),
        None => bail!("the cluster has no live head node to read logs from; name one with --node-id or --node-ip"),
    }
}

async fn files(args: &FilesArgs) -> Result<ExitCode> {
    let client = JobClient::connect(&args.read.target).await?;
    let mut node = node_query(&args.node);
    if node.is_empty() {
        node.push(("node_id", head_node(&client).await?));
    }
    let glob = args.glob.clone().unwrap_or_else(|| "*".into());
    let mut query = node.clone();
    query.push(("glob", glob.clone()));
    let listing = client.get(&format!("/api/v0/logs?{}", serde_urlencoded::to_string(&query)?)).await?;
    if listing["result"] != Value::Bool(true) {
        bail!("{}", listing["msg"].as_str().unwrap_or("the cluster refused the request"));
    }
    let groups = listing["data"]["result"].as_object().cloned().unwrap_or_default();
    let names: Vec<&str> =
        groups.values().flat_map(|g| g.as_array().into_iter().flatten()).filter_map(Value::as_str).collect();
    match (args.glob.is_some(), names.as_slice()) {
        (true, [one]) => {
            let mut query = node;
            query.push(("filename", one.to_string()));
            print_log(&client, &args.read, query).await?;
        }
        (_, []) => bail!("no log file matches {glob:?} on that node"),
        _ => {
            for (group, files) in &groups {
                println!("{group}:");
                for file in files.as_array().into_iter().flatten().filter_map(Value::as_str) {
                    println!("  {file}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Streams a log to stdout as it arrives.
async fn print_log(client: &JobClient, read: &ReadArgs, mut query: Vec<(&str, String)>) -> Result<()> {
    query.push(("lines", read.tail.to_string()));
    let media = if read.follow { "stream" } else { "file" };
    let path = format!("/api/v0/logs/{media}?{}", serde_urlencoded::to_string(&query)?);
    let mut response = client.response(&path).await?;
    let mut out = std::io::stdout();
    while let Some(chunk) = response.chunk().await? {
        out.write_all(&chunk)?;
        out.flush()?;
    }
    Ok(())
}
