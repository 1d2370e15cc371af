//! Zygotes: for a kind of worker that preloads modules (Train: torch), one Python process
//! per node loads them once and forks each worker of the kind on request
//! (`oxray._private.zygote`), so that workers start with them loaded: a training group
//! started again after a failure does not wait seconds for torch in every process.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::{oneshot, watch};

/// How long a worker waits for its kind's zygote to load its modules before it is started
/// on its own instead.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the zygote has to answer a fork.
const FORK_TIMEOUT: Duration = Duration::from_secs(10);
/// The wait status of a process killed by SIGKILL: how a child ends when its zygote dies.
const KILLED: i32 = 9;

#[derive(Debug, Clone, PartialEq)]
enum Readiness {
    Loading,
    Ready,
    Unusable(String),
    /// It exited after it was ready (killed): a new one can take its place.
    Gone,
}

/// What the zygote says, one JSON object a line.
#[derive(Debug, PartialEq)]
enum Message {
    Ready,
    Unusable(String),
    Forked { id: String, pid: u32 },
    Failed { id: String, error: String },
    Exited { pid: u32, status: i32 },
}

fn parse(line: &str) -> Option<Message> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let text = |key: &str| v.get(key).and_then(|x| x.as_str()).map(str::to_string);
    let number = |key: &str| v.get(key).and_then(|x| x.as_i64());
    if v.get("ready").and_then(|x| x.as_bool()) == Some(true) {
        return Some(Message::Ready);
    }
    if let Some(why) = text("unusable") {
        return Some(Message::Unusable(why));
    }
    if let Some(id) = text("forked") {
        return Some(Message::Forked { id, pid: u32::try_from(number("pid")?).ok()? });
    }
    if let Some(id) = text("failed") {
        return Some(Message::Failed { id, error: text("error").unwrap_or_default() });
    }
    let pid = u32::try_from(number("exited")?).ok()?;
    Some(Message::Exited { pid, status: i32::try_from(number("status")?).ok()? })
}

/// Whether a zygote goes: when none of its workers lives, none is being asked for, and the
/// last was `unused_for` ago, longer than `idle`.
fn retires(in_use: usize, unused_for: Duration, idle: Duration) -> bool {
    in_use == 0 && unused_for > idle
}

type ForkReply = Result<Forked, String>;

#[derive(Default)]
struct Shared {
    /// Forks asked for, by worker id.
    forks: HashMap<String, oneshot::Sender<ForkReply>>,
    /// The wait status of each forked worker, once it ends, by pid.
    exits: HashMap<u32, watch::Sender<Option<i32>>>,
    /// Workers being asked for now (waiting for the modules to load, or for the fork).
    asking: usize,
    /// When it last had a worker running or asked for.
    used: Option<Instant>,
}

pub(super) struct Zygote {
    /// Killed with the zygote when dropped; its workers die with it.
    _process: tokio::process::Child,
    requests: tokio::sync::Mutex<tokio::process::ChildStdin>,
    ready: Arc<watch::Sender<Readiness>>,
    shared: Arc<Mutex<Shared>>,
    started: Instant,
}

impl Zygote {
    /// Starts one from `command` (the interpreter and environment of its kind); it loads
    /// the modules meanwhile.
    pub(super) fn start(mut command: tokio::process::Command) -> std::io::Result<Zygote> {
        command.args(["-m", "oxray._private.zygote"]).stdin(std::process::Stdio::piped());
        command.stdout(std::process::Stdio::piped());
        let mut process = command.spawn()?;
        let (Some(requests), Some(replies)) = (process.stdin.take(), process.stdout.take()) else {
            return Err(std::io::Error::other("the zygote's pipes are missing"));
        };
        let ready = Arc::new(watch::Sender::new(Readiness::Loading));
        let shared = Arc::new(Mutex::new(Shared::default()));
        tokio::spawn(listen(replies, ready.clone(), shared.clone()));
        Ok(Zygote {
            _process: process,
            requests: tokio::sync::Mutex::new(requests),
            ready,
            shared,
            started: Instant::now(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().expect("zygote lock")
    }

    /// Whether it exited after it was ready: another takes its place.
    pub(super) fn gone(&self) -> bool {
        *self.ready.borrow() == Readiness::Gone
    }

    /// No more forks of it: its workers are started on their own from now on.
    fn give_up(&self, why: String) {
        tracing::warn!("workers of a preloading kind are started one by one here: {why}");
        self.ready.send_if_modified(|r| {
            let usable = matches!(r, Readiness::Loading | Readiness::Ready);
            if usable {
                *r = Readiness::Unusable(why);
            }
            usable
        });
    }

    /// Whether it can go now: no worker of it lives or is being asked for, and the last
    /// was longer than `idle` ago.
    pub(super) fn retires(&self, idle: Duration) -> bool {
        let shared = self.lock();
        let unused_for = shared.used.unwrap_or(self.started).elapsed();
        retires(shared.exits.len() + shared.asking, unused_for, idle)
    }

    /// Marks a worker as being asked for, until the returned guard's fork is done: the
    /// zygote is in use meanwhile (taken under the pool's lock, which retirement holds).
    pub(super) fn ask(self: &Arc<Self>) -> Asking {
        let mut shared = self.lock();
        shared.asking += 1;
        shared.used = Some(Instant::now());
        Asking { zygote: self.clone() }
    }
}

/// A worker being asked of a zygote.
pub(super) struct Asking {
    zygote: Arc<Zygote>,
}

impl Drop for Asking {
    fn drop(&mut self) {
        let mut shared = self.zygote.lock();
        shared.asking -= 1;
        shared.used = Some(Instant::now());
    }
}

/// A fork waiting for its answer: forgotten when it is dropped, answered or not.
struct Pending<'a> {
    zygote: &'a Zygote,
    id: &'a str,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.zygote.lock().forks.remove(self.id);
    }
}

impl Asking {
    /// A new worker process: `env` is added to the zygote's, its output goes to `out` and
    /// `err`. Fails, saying why, when the zygote cannot fork (the caller then spawns one).
    pub(super) async fn fork(
        self,
        id: &str,
        env: &[(String, String)],
        out: &Path,
        err: &Path,
    ) -> Result<Forked, String> {
        let zygote = &*self.zygote;
        let mut ready = zygote.ready.subscribe();
        let deadline = tokio::time::Instant::from_std(zygote.started + READY_TIMEOUT);
        let waited = tokio::time::timeout_at(deadline, ready.wait_for(|r| *r != Readiness::Loading)).await;
        match waited.map(|r| r.map(|r| r.clone())) {
            Ok(Ok(Readiness::Ready)) => {}
            Ok(Ok(Readiness::Unusable(why))) => return Err(why),
            Ok(_) => return Err("the zygote exited".into()),
            Err(_) => {
                let why = format!("the zygote has not loaded its modules within {READY_TIMEOUT:?}");
                zygote.give_up(why.clone());
                return Err(why);
            }
        }
        let (tx, rx) = oneshot::channel();
        zygote.lock().forks.insert(id.to_string(), tx);
        let _pending = Pending { zygote, id };
        let request = serde_json::json!({
            "fork": id,
            "env": env.iter().cloned().collect::<HashMap<_, _>>(),
            "out": out.display().to_string(),
            "err": err.display().to_string(),
        });
        let line = format!("{request}\n");
        let sent =
            tokio::time::timeout(FORK_TIMEOUT, async { zygote.requests.lock().await.write_all(line.as_bytes()).await });
        match sent.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("cannot ask the zygote: {e}")),
            Err(_) => {
                zygote.give_up(format!("the zygote did not take a request within {FORK_TIMEOUT:?}"));
                return Err("the zygote did not take the request".into());
            }
        }
        match tokio::time::timeout(FORK_TIMEOUT, rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err("the zygote exited".into()),
            Err(_) => {
                let why = format!("the zygote did not fork within {FORK_TIMEOUT:?}");
                zygote.give_up(why.clone());
                Err(why)
            }
        }
    }
}

/// Reads what the zygote says until it exits; then it is unusable, and its workers (killed
/// with it) have ended.
async fn listen(
    replies: tokio::process::ChildStdout,
    ready: Arc<watch::Sender<Readiness>>,
    shared: Arc<Mutex<Shared>>,
) {
    let mut lines = tokio::io::BufReader::new(replies).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Some(message) = parse(&line) else {
            tracing::warn!(line, "the zygote said something unexpected");
            continue;
        };
        let mut shared = shared.lock().expect("zygote lock");
        match message {
            Message::Ready => {
                ready.send_replace(Readiness::Ready);
            }
            Message::Unusable(why) => {
                tracing::warn!("workers of a preloading kind are started one by one here: {why}");
                ready.send_replace(Readiness::Unusable(why));
            }
            Message::Forked { id, pid } => {
                let (tx, rx) = watch::channel(None);
                shared.exits.insert(pid, tx);
                let forked = Forked { pid, exit: rx };
                // Nobody waits for it any longer (its lease request went away, or the fork
                // took too long): it goes, as it is dropped.
                if let Some(asker) = shared.forks.remove(&id) {
                    let _ = asker.send(Ok(forked));
                }
            }
            Message::Failed { id, error } => {
                if let Some(asker) = shared.forks.remove(&id) {
                    let _ = asker.send(Err(error));
                }
            }
            Message::Exited { pid, status } => {
                if let Some(exit) = shared.exits.remove(&pid) {
                    exit.send_replace(Some(status));
                    // Idle from its last worker's end on: a group started again after a
                    // failure finds it there.
                    shared.used = Some(Instant::now());
                }
            }
        }
    }
    ready.send_modify(|r| match r {
        Readiness::Loading => *r = Readiness::Unusable("the zygote exited while it loaded its modules".into()),
        Readiness::Ready => *r = Readiness::Gone,
        Readiness::Unusable(_) | Readiness::Gone => {}
    });
    let mut shared = shared.lock().expect("zygote lock");
    for (_, exit) in shared.exits.drain() {
        exit.send_replace(Some(KILLED));
    }
    shared.forks.clear();
}

/// A worker a zygote forked: the zygote reaps it and tells how it ended.
pub(crate) struct Forked {
    pid: u32,
    exit: watch::Receiver<Option<i32>>,
}

impl Forked {
    pub(super) fn id(&self) -> Option<u32> {
        self.status().is_none().then_some(self.pid)
    }

    pub(super) fn status(&self) -> Option<ExitStatus> {
        self.exit.borrow().map(ExitStatus::from_raw)
    }

    /// Sends SIGKILL unless it has ended. (Its pid is free for reuse only once the zygote
    /// reaped it, and the status comes within moments of that.)
    pub(super) fn start_kill(&self) -> std::io::Result<()> {
        if self.status().is_some() {
            return Ok(());
        }
        let pid = nix::unistd::Pid::from_raw(self.pid as i32);
        match nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) async fn wait(&mut self) -> ExitStatus {
        // The sender goes only after the last status was sent.
        let _ = self.exit.wait_for(Option::is_some).await;
        self.status().unwrap_or_else(|| ExitStatus::from_raw(KILLED))
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        let _ = self.start_kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_read_and_anything_else_is_not() {
        assert_eq!(parse(r#"{"ready": true}"#), Some(Message::Ready));
        assert_eq!(parse(r#"{"unusable": "CUDA"}"#), Some(Message::Unusable("CUDA".into())));
        assert_eq!(parse(r#"{"forked": "ab", "pid": 42}"#), Some(Message::Forked { id: "ab".into(), pid: 42 }));
        assert_eq!(
            parse(r#"{"failed": "ab", "error": "no"}"#),
            Some(Message::Failed { id: "ab".into(), error: "no".into() })
        );
        assert_eq!(parse(r#"{"exited": 42, "status": 256}"#), Some(Message::Exited { pid: 42, status: 256 }));
        assert_eq!(parse(r#"{"forked": "ab", "pid": -1}"#), None);
        assert_eq!(parse(r#"{"exited": 42}"#), None);
        assert_eq!(parse("not json"), None);
        assert_eq!(parse(r#"{"ready": false}"#), None);
    }

    #[test]
    fn a_zygote_goes_once_unused_and_childless() {
        let idle = Duration::from_secs(120);
        assert!(retires(0, Duration::from_secs(121), idle));
        assert!(!retires(0, Duration::from_secs(60), idle));
        assert!(!retires(2, Duration::from_secs(600), idle));
    }
}
