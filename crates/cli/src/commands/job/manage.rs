use super::client::{JobClient, JobTarget};
use super::print_status;
use crate::commands::list::Format;
use crate::output::table;
use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct JobIdArgs {
    #[command(flatten)]
    pub target: JobTarget,
    /// The job's submission id
    pub id: String,
}

#[derive(Args, Debug)]
pub struct LogsArgs {
    #[command(flatten)]
    pub job: JobIdArgs,
    /// Keep printing new output until the job ends
    #[arg(long, short)]
    pub follow: bool,
}

#[derive(Args, Debug)]
pub struct StopArgs {
    #[command(flatten)]
    pub job: JobIdArgs,
    /// Return once the stop is requested instead of waiting for the job to end
    #[arg(long)]
    pub no_wait: bool,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub target: JobTarget,
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Show only the newest this many jobs (0: all)
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
}

pub async fn status(args: JobIdArgs) -> Result<ExitCode> {
    let client = JobClient::connect(&args.target).await?;
    print_status(&args.id, &client.job(&args.id).await?);
    Ok(ExitCode::SUCCESS)
}

pub async fn logs(args: LogsArgs) -> Result<ExitCode> {
    let client = JobClient::connect(&args.job.target).await?;
    if args.follow {
        client.job(&args.job.id).await?;
        client.follow(&args.job.id).await?;
    } else {
        let reply = client.get(&format!("/api/jobs/{}/logs", args.job.id)).await?;
        print!("{}", reply["logs"].as_str().unwrap_or_default());
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn stop(args: StopArgs) -> Result<ExitCode> {
    let client = JobClient::connect(&args.job.target).await?;
    let id = &args.job.id;
    let reply = client.post(&format!("/api/jobs/{id}/stop"), &Value::Null).await?;
    if reply["stopped"] != Value::Bool(true) {
        let job = client.job(id).await?;
        println!("Job '{id}' has already ended.");
        print_status(id, &job);
        return Ok(ExitCode::SUCCESS);
    }
    println!("Requested the stop of job '{id}'.");
    if args.no_wait {
        return Ok(ExitCode::SUCCESS);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let job = client.job(id).await?;
        let status = job["status"].as_str().unwrap_or_default();
        if ["STOPPED", "SUCCEEDED", "FAILED"].contains(&status) {
            print_status(id, &job);
            return Ok(ExitCode::SUCCESS);
        }
        if Instant::now() > deadline {
            anyhow::bail!("job '{id}' is still {status} a minute after the stop request");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub async fn delete(args: JobIdArgs) -> Result<ExitCode> {
    let client = JobClient::connect(&args.target).await?;
    client.delete(&format!("/api/jobs/{}", args.id)).await?;
    println!("Job '{}' deleted successfully", args.id);
    Ok(ExitCode::SUCCESS)
}

fn time(ms: &Value) -> String {
    ms.as_u64()
        .map(|ms| humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms)).to_string())
        .unwrap_or_default()
}

pub async fn list(args: ListArgs) -> Result<ExitCode> {
    let client = JobClient::connect(&args.target).await?;
    let path = if args.limit == 0 { "/api/jobs/".to_string() } else { format!("/api/jobs/?limit={}", args.limit) };
    let (jobs, total) = client.get_with_total(&path).await?;
    let rows = jobs.as_array().context("the cluster answered with something other than a list")?;
    if let Some(total) = total.filter(|t| *t > rows.len()) {
        eprintln!("The newest {} of {total} jobs; --limit 0 lists them all.", rows.len());
    }
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&jobs)?,
        Format::Yaml => serde_norway::to_string(&jobs)?,
        Format::Table => {
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|j| {
                    let s = |k: &str| j[k].as_str().unwrap_or_default().to_string();
                    let (start, end) = (time(&j["start_time"]), time(&j["end_time"]));
                    vec![s("job_id"), s("submission_id"), s("type"), s("status"), start, end, s("entrypoint")]
                })
                .collect();
            table(&["JOB_ID", "SUBMISSION_ID", "TYPE", "STATUS", "START_TIME", "END_TIME", "ENTRYPOINT"], &cells)
        }
    };
    println!("{}", text.trim_end());
    Ok(ExitCode::SUCCESS)
}
