//! `LocalCluster`: a real head and real node agents, each its own `oxray` process, on
//! loopback with free ports and temporary directories, for tests that need a cluster.

use anyhow::{anyhow, bail, Context, Result};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use oxray_config::ready::{self, Ready};
use oxray_proto::v1::ListNodesRequest;
use oxray_rpc::{connect_head, Token};
use oxray_types::NodeInfo;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(20);

pub struct Builder {
    bin: PathBuf,
    agents: usize,
    cpus_per_agent: u32,
    death_timeout: Duration,
    agent_env: Vec<(String, String)>,
    head_env: Vec<(String, String)>,
}

impl Builder {
    /// An environment variable for the head (its flags' `env` fallbacks among them).
    pub fn head_env(mut self, key: &str, value: &str) -> Self {
        self.head_env.push((key.to_string(), value.to_string()));
        self
    }

    /// An environment variable for every agent (and so for the jobs it runs).
    pub fn agent_env(mut self, key: &str, value: &str) -> Self {
        self.agent_env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn agents(mut self, n: usize) -> Self {
        self.agents = n;
        self
    }

    pub fn cpus_per_agent(mut self, n: u32) -> Self {
        self.cpus_per_agent = n;
        self
    }

    pub fn death_timeout(mut self, timeout: Duration) -> Self {
        self.death_timeout = timeout;
        self
    }

    pub fn start(self) -> Result<LocalCluster> {
        let root = tempfile::Builder::new().prefix("oxray-test-").tempdir()?;
        std::fs::create_dir_all(root.path().join("logs"))?;
        let mut cluster = LocalCluster {
            bin: self.bin,
            home: root.path().join("home"),
            storage: root.path().join("head.redb"),
            root,
            token: Token::generate(),
            death_timeout: self.death_timeout,
            cpus_per_agent: self.cpus_per_agent,
            agent_env: self.agent_env,
            head_env: self.head_env,
            head: None,
            ports: (0, 0),
            agents: Vec::new(),
        };
        cluster.start_head()?;
        for _ in 0..self.agents {
            cluster.add_agent(&[])?;
        }
        Ok(cluster)
    }
}

struct Server {
    child: Child,
    ready: Ready,
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn kill(&mut self, signal: Signal) {
        let _ = killpg(Pid::from_raw(self.child.id() as i32), signal);
    }
}

pub struct LocalCluster {
    bin: PathBuf,
    root: tempfile::TempDir,
    home: PathBuf,
    storage: PathBuf,
    token: Token,
    death_timeout: Duration,
    cpus_per_agent: u32,
    agent_env: Vec<(String, String)>,
    head_env: Vec<(String, String)>,
    head: Option<Server>,
    /// Control-plane and dashboard ports, kept so a restarted head comes back on them.
    ports: (u16, u16),
    agents: Vec<Option<Server>>,
}

impl LocalCluster {
    /// `bin` is the `oxray` executable under test (`env!("CARGO_BIN_EXE_oxray")`).
    pub fn builder(bin: impl Into<PathBuf>) -> Builder {
        Builder {
            bin: bin.into(),
            agents: 3,
            cpus_per_agent: 1,
            death_timeout: Duration::from_secs(2),
            agent_env: Vec::new(),
            head_env: Vec::new(),
        }
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.ports.0)
    }

    pub fn dashboard_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.1)
    }

    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The `OXRAY_HOME` every process of this cluster uses.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// Where each process's log goes (`head.log`, `agent-N.log`).
    pub fn log_dir(&self) -> PathBuf {
        self.root.path().join("logs")
    }

    pub fn dir(&self) -> &Path {
        self.root.path()
    }

    /// An `oxray` command aimed at this cluster, isolated from the user's own oxray files.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.env("OXRAY_HOME", &self.home)
            .env("OXRAY_TEMP_DIR", self.root.path().join("sessions"))
            .env("OXRAY_ADDRESS", self.address())
            .env("OXRAY_AUTH_TOKEN", self.token.as_str());
        cmd
    }

    fn spawn(&self, args: &[String], log: &str, token: &str, env: &[(String, String)]) -> Result<Server> {
        let log_path = self.root.path().join("logs").join(log);
        let log_file = std::fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
        let mut child = Command::new(&self.bin)
            .args(args)
            .env("OXRAY_HOME", &self.home)
            .env("OXRAY_AUTH_TOKEN", token)
            .env_remove("OXRAY_ADDRESS")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot run {}", self.bin.display()))?;
        let stdout = child.stdout.take().expect("piped");
        match ready::wait(stdout, READY_TIMEOUT) {
            Ok(ready) => Ok(Server { child, ready }),
            Err(e) => {
                let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
                let _ = child.wait();
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                Err(anyhow!("{e}\n--- {} ---\n{}", log_path.display(), tail.join("\n")))
            }
        }
    }

    fn start_head(&mut self) -> Result<()> {
        let args: Vec<String> = [
            "head",
            "--port",
            &self.ports.0.to_string(),
            "--bind-host",
            "127.0.0.1",
            "--node-ip-address",
            "127.0.0.1",
            "--dashboard-port",
            &self.ports.1.to_string(),
            "--storage",
            &self.storage.display().to_string(),
            "--session-dir",
            &self.root.path().join("head-session").display().to_string(),
            "--node-death-timeout-s",
            &self.death_timeout.as_secs_f64().to_string(),
        ]
        .map(String::from)
        .into();
        let head = self.spawn(&args, "head.log", self.token.as_str(), &self.head_env)?;
        let Ready::Head { port, dashboard_port, .. } = head.ready else { bail!("unexpected readiness from the head") };
        self.ports = (port, dashboard_port);
        self.head = Some(head);
        Ok(())
    }

    /// Starts one more agent; returns its index.
    pub fn add_agent(&mut self, extra: &[&str]) -> Result<usize> {
        let index = self.agents.len();
        let agent = self.spawn_agent(index, extra, self.token.as_str())?;
        self.agents.push(Some(agent));
        Ok(index)
    }

    /// Runs an agent with a given token and waits for it to fail; returns its error.
    pub fn agent_error_with_token(&self, token: &str) -> Result<String> {
        match self.spawn_agent(self.agents.len(), &[], token) {
            Ok(_) => bail!("the agent joined with token {token:?}"),
            Err(e) => Ok(e.to_string()),
        }
    }

    fn spawn_agent(&self, index: usize, extra: &[&str], token: &str) -> Result<Server> {
        let mut args: Vec<String> = [
            "agent",
            "--address",
            &self.address(),
            "--node-ip-address",
            "127.0.0.1",
            "--node-name",
            &format!("agent-{index}"),
            "--num-cpus",
            &self.cpus_per_agent.to_string(),
            "--num-gpus",
            "0",
            "--session-dir",
            &self.root.path().join(format!("agent-{index}")).display().to_string(),
        ]
        .map(String::from)
        .into();
        args.extend(extra.iter().map(|s| s.to_string()));
        self.spawn(&args, &format!("agent-{index}.log"), token, &self.agent_env)
    }

    pub fn agent_pid(&self, index: usize) -> Option<u32> {
        self.agents.get(index)?.as_ref().map(Server::pid)
    }

    /// The node id the agent registered with first.
    pub fn agent_node_id(&self, index: usize) -> Option<String> {
        match &self.agents.get(index)?.as_ref()?.ready {
            Ready::Agent { node_id, .. } => Some(node_id.clone()),
            _ => None,
        }
    }

    pub fn head_pid(&self) -> Option<u32> {
        self.head.as_ref().map(Server::pid)
    }

    /// Sends `signal` to an agent's process group and reaps it.
    pub fn kill_agent(&mut self, index: usize, signal: Signal) {
        if let Some(mut agent) = self.agents.get_mut(index).and_then(Option::take) {
            agent.kill(signal);
            let _ = agent.child.wait();
        }
    }

    /// Stops an agent with SIGSTOP, so it is alive but silent; `resume_agent` continues it.
    pub fn pause_agent(&mut self, index: usize) {
        if let Some(agent) = self.agents.get_mut(index).and_then(Option::as_mut) {
            agent.kill(Signal::SIGSTOP);
        }
    }

    pub fn resume_agent(&mut self, index: usize) {
        if let Some(agent) = self.agents.get_mut(index).and_then(Option::as_mut) {
            agent.kill(Signal::SIGCONT);
        }
    }

    pub fn kill_head(&mut self, signal: Signal) {
        if let Some(mut head) = self.head.take() {
            head.kill(signal);
            let _ = head.child.wait();
        }
    }

    /// Starts the head again on the same ports and database.
    pub fn restart_head(&mut self) -> Result<()> {
        self.kill_head(Signal::SIGKILL);
        self.start_head()
    }

    /// Whether the agent's process still runs (it may be a reaped child of ours only).
    pub fn agent_running(&mut self, index: usize) -> bool {
        match self.agents.get_mut(index).and_then(Option::as_mut) {
            Some(agent) => matches!(agent.child.try_wait(), Ok(None)),
            None => false,
        }
    }

    pub async fn nodes(&self) -> Result<Vec<NodeInfo>> {
        let mut client = connect_head(&self.address(), &self.token, Duration::from_secs(5)).await?;
        let reply = client.list_nodes(ListNodesRequest {}).await?.into_inner();
        reply.nodes.into_iter().map(|n| NodeInfo::try_from(n).map_err(Into::into)).collect()
    }

    /// Polls the node list until `done` holds; fails with the last list seen after `timeout`.
    pub async fn wait_for(&self, timeout: Duration, done: impl Fn(&[NodeInfo]) -> bool) -> Result<Vec<NodeInfo>> {
        let deadline = Instant::now() + timeout;
        loop {
            let nodes = self.nodes().await;
            if let Ok(nodes) = &nodes {
                if done(nodes) {
                    return Ok(nodes.clone());
                }
            }
            if Instant::now() > deadline {
                bail!("condition not met after {timeout:?}; last node list: {nodes:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for server in self.agents.iter_mut().flatten().chain(self.head.as_mut()) {
            server.kill(Signal::SIGKILL);
            let _ = server.child.wait();
        }
    }
}

/// Counts of alive and dead nodes.
pub fn count_states(nodes: &[NodeInfo]) -> (usize, usize) {
    let alive = nodes.iter().filter(|n| n.is_alive()).count();
    (alive, nodes.len() - alive)
}
