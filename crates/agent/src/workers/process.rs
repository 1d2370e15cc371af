//! A worker's process: a child of the agent, or of its kind's zygote.

use super::zygote::Forked;
use std::process::ExitStatus;

pub(crate) enum Process {
    /// Killed when dropped (`kill_on_drop`).
    Spawned(tokio::process::Child),
    /// Killed when dropped.
    Forked(Forked),
}

impl Process {
    /// Its pid while it runs.
    pub fn id(&self) -> Option<u32> {
        match self {
            Process::Spawned(child) => child.id(),
            Process::Forked(forked) => forked.id(),
        }
    }

    /// How it ended, once it has.
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        match self {
            Process::Spawned(child) => child.try_wait(),
            Process::Forked(forked) => Ok(forked.status()),
        }
    }

    pub fn start_kill(&mut self) -> std::io::Result<()> {
        match self {
            Process::Spawned(child) => child.start_kill(),
            Process::Forked(forked) => forked.start_kill(),
        }
    }

    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self {
            Process::Spawned(child) => child.wait().await,
            Process::Forked(forked) => Ok(forked.wait().await),
        }
    }

    /// Whether it still runs (an error reading its state counts as ended).
    pub fn running(&mut self) -> bool {
        matches!(self.try_wait(), Ok(None))
    }
}
