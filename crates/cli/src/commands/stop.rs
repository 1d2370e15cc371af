use crate::launch::stop_node;
use anyhow::Result;
use clap::Args;
use nix::sys::signal::Signal;
use oxray_config::{paths, procs};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct StopArgs {
    /// Kill at once (SIGKILL) instead of asking processes to stop
    #[arg(long, short)]
    pub force: bool,
    /// Seconds to wait for a graceful stop before killing
    #[arg(long, short = 'g', default_value_t = 16)]
    pub grace_period: u64,
    #[command(flatten)]
    pub ray: crate::ray_flags::RayLogFlags,
}

pub fn run(args: StopArgs) -> Result<ExitCode> {
    if let Some(note) = args.ray.note() {
        eprintln!("{note}");
    }
    let home = paths::oxray_home();
    let records = procs::list_running(&home);
    if records.is_empty() {
        println!("No oxray processes are running on this machine.");
        let _ = std::fs::remove_file(paths::current_cluster_file(&home));
        return Ok(ExitCode::SUCCESS);
    }
    let signal = if args.force { Signal::SIGKILL } else { Signal::SIGTERM };
    let stopped = stop_node(records, signal, Duration::from_secs(args.grace_period), &home);
    let _ = std::fs::remove_file(paths::current_cluster_file(&home));
    println!("Stopped {stopped} oxray process{}.", if stopped == 1 { "" } else { "es" });
    Ok(ExitCode::SUCCESS)
}
