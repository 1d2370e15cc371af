//! `oxray job`: submit and manage jobs through the head's Jobs REST API.

pub(crate) mod client;
mod manage;
pub(crate) mod submit;

use anyhow::Result;
use clap::Subcommand;
use serde_json::Value;
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum JobCommand {
    /// Submit a job; follows its logs and exits with its outcome unless --no-wait.
    Submit(submit::SubmitArgs),
    /// Print a job's status.
    Status(manage::JobIdArgs),
    /// Print a job's logs.
    Logs(manage::LogsArgs),
    /// Stop a job: SIGTERM to its process group, SIGKILL after a grace period.
    Stop(manage::StopArgs),
    /// List every job.
    List(manage::ListArgs),
    /// Delete a finished job's record (its log file stays on its node).
    Delete(manage::JobIdArgs),
}

pub fn run(command: JobCommand) -> Result<ExitCode> {
    crate::target::runtime()?.block_on(async {
        match command {
            JobCommand::Submit(a) => submit::run(a).await,
            JobCommand::Status(a) => manage::status(a).await,
            JobCommand::Logs(a) => manage::logs(a).await,
            JobCommand::Stop(a) => manage::stop(a).await,
            JobCommand::List(a) => manage::list(a).await,
            JobCommand::Delete(a) => manage::delete(a).await,
        }
    })
}

fn print_status(id: &str, job: &Value) {
    let status = job["status"].as_str().unwrap_or("UNKNOWN");
    println!("------------------------------------------");
    match status {
        "SUCCEEDED" => println!("Job '{id}' succeeded"),
        "FAILED" => println!("Job '{id}' failed"),
        "STOPPED" => println!("Job '{id}' was stopped"),
        _ => println!("Status for job '{id}': {status}"),
    }
    if let Some(message) = job["message"].as_str() {
        println!("Status message: {message}");
    }
}

/// 1 for a failed job, else 0, as Ray's CLI exits after following a job.
fn finish_code(job: &Value) -> ExitCode {
    if job["status"] == "FAILED" {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
