//! A server tells its launcher it is ready (or why it failed) with one line on stdout.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

const PREFIX: &str = "OXRAY_READY ";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ready {
    Head {
        pid: u32,
        node_ip: String,
        port: u16,
        dashboard_host: String,
        dashboard_port: u16,
        session_name: String,
    },
    Agent {
        pid: u32,
        node_id: String,
        node_ip: String,
        /// The cluster's HTTP API, as the head announced it.
        #[serde(default)]
        dashboard_url: String,
    },
    Failed {
        error: String,
    },
}

/// Prints the readiness line, then points stdout at /dev/null: the launcher stops reading
/// after this line and a later write must not fail on a closed pipe.
pub fn announce(ready: &Ready) {
    let mut out = std::io::stdout().lock();
    let line = serde_json::to_string(ready).expect("ready message serializes");
    let _ = writeln!(out, "{PREFIX}{line}");
    let _ = out.flush();
    drop(out);
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdout(&null);
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitError {
    /// The server said why it failed.
    Reported(String),
    /// It exited without a word, or did not answer in time: its log knows more.
    Silent(String),
}

impl std::fmt::Display for WaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitError::Reported(m) | WaitError::Silent(m) => f.write_str(m),
        }
    }
}

/// Waits for a server's readiness line.
pub fn wait<R: Read + Send + 'static>(stdout: R, timeout: Duration) -> Result<Ready, WaitError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(json) = line.strip_prefix(PREFIX) {
                let _ = tx.send(serde_json::from_str::<Ready>(json).map_err(|e| e.to_string()));
                return;
            }
        }
        let _ = tx.send(Err("the process exited before it was ready".to_string()));
    });
    match rx.recv_timeout(timeout) {
        Ok(Ok(Ready::Failed { error })) => Err(WaitError::Reported(error)),
        Ok(Ok(ready)) => Ok(ready),
        Ok(Err(e)) => Err(WaitError::Silent(e)),
        Err(_) => Err(WaitError::Silent(format!("not ready after {:.1} s", timeout.as_secs_f64()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_ready_line_among_others() {
        let msg =
            Ready::Agent { pid: 1, node_id: "ab".into(), node_ip: "127.0.0.1".into(), dashboard_url: String::new() };
        let text = format!("noise\n{PREFIX}{}\n", serde_json::to_string(&msg).unwrap());
        assert_eq!(wait(std::io::Cursor::new(text), Duration::from_secs(1)).unwrap(), msg);
    }

    #[test]
    fn reports_failures_and_early_exit() {
        let failed = Ready::Failed { error: "port 6379 is in use".into() };
        let text = format!("{PREFIX}{}\n", serde_json::to_string(&failed).unwrap());
        assert_eq!(
            wait(std::io::Cursor::new(text), Duration::from_secs(1)).unwrap_err(),
            WaitError::Reported("port 6379 is in use".into())
        );
        let err = wait(std::io::Cursor::new("crash\n"), Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, WaitError::Silent(m) if m.contains("exited")));
    }
}
