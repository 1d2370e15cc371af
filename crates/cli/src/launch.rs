//! Starting server roles as daemons and stopping them by process group.

use anyhow::{anyhow, Context, Result};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use oxray_config::procs::{self, ProcRecord};
use oxray_config::ready::{self, Ready, WaitError};
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Launched {
    pub child: Child,
    pub ready: Ready,
}

/// Runs `oxray <args>` in a session of its own (it survives this terminal), with stderr in
/// `log`, and waits for its readiness line. A server that fails or hangs is killed with its
/// whole process group, so nothing half-started is left behind. With `fate_share` the
/// server gets SIGTERM when this process ends in any way, SIGKILL included: a supervisor
/// that kills a foreground `oxray start` stops the node.
pub fn spawn_role(
    args: &[String],
    envs: &[(&str, &str)],
    log: &Path,
    timeout: Duration,
    fate_share: bool,
) -> Result<Launched> {
    let exe = std::env::current_exe().context("cannot find the oxray executable")?;
    let log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open log file {}", log.display()))?;
    let mut command = Command::new(exe);
    command.args(args).envs(envs.iter().copied()).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log_file);
    let parent = std::process::id();
    // SAFETY: setsid, prctl and getppid are async-signal-safe and touch no memory of the parent.
    unsafe {
        command.pre_exec(move || {
            nix::unistd::setsid()?;
            if fate_share {
                nix::sys::prctl::set_pdeathsig(Signal::SIGTERM)?;
                // The parent may have died before the line above: then nobody would signal.
                if nix::unistd::getppid().as_raw() as u32 != parent {
                    return Err(std::io::Error::other("the launching process is gone"));
                }
            }
            Ok(())
        });
    }
    let mut child = command.spawn().context("cannot start an oxray process")?;
    let stdout = child.stdout.take().expect("stdout is piped");
    match ready::wait(stdout, timeout) {
        Ok(ready) => Ok(Launched { child, ready }),
        Err(reason) => {
            signal_group(child.id(), Signal::SIGKILL);
            let _ = child.wait();
            match reason {
                WaitError::Reported(message) => Err(anyhow!(message)),
                WaitError::Silent(message) => Err(anyhow!("{message} (see {})", log.display())),
            }
        }
    }
}

/// Signals a process's whole group; falls back to the process alone when it leads none.
pub fn signal_group(pid: u32, signal: Signal) {
    let pid = Pid::from_raw(pid as i32);
    if killpg(pid, signal).is_err() {
        let _ = kill(pid, signal);
    }
}

/// Waits up to `limit` for the processes to exit and returns those still running. The pause
/// between looks grows, so processes that stop in a few milliseconds are seen then.
fn wait_for_exit(mut left: Vec<ProcRecord>, limit: Duration) -> Vec<ProcRecord> {
    let deadline = Instant::now() + limit;
    let mut pause = Duration::from_millis(1);
    loop {
        left.retain(procs::is_running);
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(25));
    }
}

/// Stops a machine's oxray processes, agents first so they can tell a head still running
/// that they leave. Returns how many were running.
pub fn stop_node(records: Vec<ProcRecord>, first: Signal, grace: Duration, home: &Path) -> usize {
    let (agents, others): (Vec<_>, Vec<_>) = records.into_iter().partition(|r| r.role == "agent");
    stop_all(&agents, first, grace, home) + stop_all(&others, first, grace, home)
}

/// Stops the given processes: `first` signal to each group, then SIGKILL to whatever is left
/// after `grace`. Returns how many were running.
fn stop_all(records: &[ProcRecord], first: Signal, grace: Duration, home: &Path) -> usize {
    for r in records {
        signal_group(r.pid, first);
    }
    let left = wait_for_exit(records.to_vec(), grace);
    for r in &left {
        tracing::warn!(pid = r.pid, role = %r.role, "did not stop in time; killing it");
        signal_group(r.pid, Signal::SIGKILL);
    }
    wait_for_exit(left, Duration::from_secs(5));
    for r in records {
        procs::unregister(home, r.pid);
    }
    records.len()
}
