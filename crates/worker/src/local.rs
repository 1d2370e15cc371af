//! A private cluster for one Python process: `oxray start --head --block` with its own home,
//! stopped when the process lets go of it, or exits in any way (its stdin pipe closes).

use crate::WorkerError;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Default)]
pub struct LocalOptions {
    pub num_cpus: Option<u32>,
    pub num_gpus: Option<u32>,
    /// Custom resources as a JSON object.
    pub resources_json: Option<String>,
    /// Bytes of shared memory for the object store.
    pub object_store_memory: Option<u64>,
    /// The node's labels, as `start --labels` takes them (`k=v,...`).
    pub labels: Option<String>,
}

pub struct LocalCluster {
    child: Child,
    stdin: Option<ChildStdin>,
    dir: tempfile::TempDir,
    pub address: String,
    pub token: String,
}

/// `OXRAY_BIN`, then a binary shipped beside the Python package, then `PATH`.
pub fn find_oxray_binary(beside: Option<&Path>) -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("OXRAY_BIN").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    if let Some(path) = beside.map(|d| d.join("oxray")).filter(|p| p.is_file()) {
        return Some(path);
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join("oxray")).find(|p| p.is_file())
}

const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopping private cluster gets before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

impl LocalCluster {
    pub fn start(bin: &Path, options: &LocalOptions) -> Result<Self, WorkerError> {
        let fail = |e: &dyn std::fmt::Display| WorkerError::Start(e.to_string());
        // What drivers killed outright left behind goes first.
        oxray_config::private_clusters::sweep_stopped();
        let dir =
            tempfile::Builder::new().prefix(oxray_config::private_clusters::PREFIX).tempdir().map_err(|e| fail(&e))?;
        let home = dir.path().join("home");
        let mut args: Vec<String> = [
            "start",
            "--head",
            "--block",
            "--stop-on-stdin-close",
            "--port",
            "0",
            "--dashboard-port",
            "0",
            "--node-ip-address",
            "127.0.0.1",
        ]
        .map(String::from)
        .into();
        if let Some(n) = options.num_cpus {
            args.extend(["--num-cpus".into(), n.to_string()]);
        }
        if let Some(n) = options.num_gpus {
            args.extend(["--num-gpus".into(), n.to_string()]);
        }
        if let Some(bytes) = options.object_store_memory {
            args.extend(["--object-store-memory".into(), bytes.to_string()]);
        }
        if let Some(json) = &options.resources_json {
            args.extend(["--resources".into(), json.clone()]);
        }
        if let Some(labels) = &options.labels {
            args.extend(["--labels".into(), labels.clone()]);
        }
        // A file, not a pipe: the launcher must never die writing to a reader that left.
        let log_path = dir.path().join("start.log");
        let log = std::fs::File::create(&log_path).map_err(|e| fail(&e))?;
        let mut child = Command::new(bin)
            .args(&args)
            .env("OXRAY_HOME", &home)
            .env("OXRAY_TEMP_DIR", dir.path().join("sessions"))
            .env_remove("OXRAY_AUTH_TOKEN")
            .env_remove("OXRAY_ADDRESS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| WorkerError::Start(format!("cannot run {}: {e}", bin.display())))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
            let ready = lines.any(|l| l.starts_with("--block:"));
            let _ = tx.send(ready);
            // Keep draining so the launcher's later output never meets a closed pipe.
            lines.for_each(drop);
        });
        let ready = rx.recv_timeout(READY_TIMEOUT).unwrap_or(false);
        if !ready {
            let _ = child.kill();
            let _ = child.wait();
            let message = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(WorkerError::Start(
                message.trim().lines().last().unwrap_or("it did not become ready").to_string(),
            ));
        }
        let current = std::fs::read(home.join("current_cluster.json")).map_err(|e| fail(&e))?;
        let current: serde_json::Value = serde_json::from_slice(&current).map_err(|e| fail(&e))?;
        let address =
            current["address"].as_str().ok_or_else(|| fail(&"no address in current_cluster.json"))?.to_string();
        let token = std::fs::read_to_string(home.join("auth_token")).map_err(|e| fail(&e))?.trim().to_string();
        let stdin = child.stdin.take();
        Ok(Self { child, stdin, dir, address, token })
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// Closes the pipe, which makes the cluster stop, and waits for it.
    pub fn stop(&mut self) {
        if self.stdin.take().is_none() {
            return;
        }
        // Polled with a growing pause: a cluster that stops in a few milliseconds is seen then.
        let deadline = Instant::now() + STOP_TIMEOUT;
        let mut pause = Duration::from_millis(1);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
