//! The server roles, run in the foreground: what `start` launches as daemons and what the
//! test kit starts directly.

use crate::resources::{node_ip_towards, ResourceArgs};
use crate::target::resolve_token;
use anyhow::{Context, Result};
use clap::Args;
use oxray_config::ready::{announce, Ready};
use oxray_config::session::SessionDir;
use oxray_config::{paths, procs, secret};
use oxray_rpc::Token;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Args, Debug)]
pub struct HeadArgs {
    #[arg(long, default_value_t = oxray_config::DEFAULT_PORT)]
    pub port: u16,
    /// Interface the control plane listens on
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_host: String,
    #[arg(long)]
    pub node_ip_address: Option<String>,
    #[arg(long, default_value = "127.0.0.1")]
    pub dashboard_host: String,
    #[arg(long, default_value_t = oxray_config::DEFAULT_DASHBOARD_PORT)]
    pub dashboard_port: u16,
    /// The head's database [default: head.redb in the session directory]
    #[arg(long)]
    pub storage: Option<PathBuf>,
    #[command(flatten)]
    pub dirs: SessionArgs,
    /// Seconds without a heartbeat before a node is declared dead
    #[arg(long, default_value_t = 5.0, value_parser = positive_seconds)]
    pub node_death_timeout_s: f64,
    #[command(flatten)]
    pub state: StateArgs,
    /// An autoscaler adds nodes for waiting work (the operator sets it for a RayCluster with
    /// enableInTreeAutoscaling): a task or actor no node can hold waits for one, rather than
    /// failing
    #[arg(long, env = "OXRAY_AUTOSCALING", action = clap::ArgAction::SetTrue,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub autoscaling: bool,
}

/// What the head keeps across restarts, and how much it takes in, shared by `start` and
/// the `head` role.
#[derive(Args, Debug, Clone)]
pub struct StateArgs {
    /// Seconds a dead node's record is kept before it is forgotten
    #[arg(long, default_value_t = 86_400.0, value_parser = positive_seconds)]
    pub dead_node_retention_s: f64,
    /// Ended task attempts and dead actors the state API keeps, newest first (Ray's
    /// task_events_max_num_task_in_gcs)
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub max_ended_tasks: u64,
    /// Largest package (working_dir, py_modules) the head takes, in MiB; larger uploads get
    /// HTTP 413 (Ray's limit is 100)
    #[arg(long, default_value_t = 100, env = "OXRAY_MAX_PACKAGE_MB",
          value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub max_package_mb: u64,
    /// Start the head with an empty database; the previous one is kept beside it as
    /// `<storage>.previous`
    #[arg(long)]
    pub fresh: bool,
}

impl StateArgs {
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            "--dead-node-retention-s".to_string(),
            self.dead_node_retention_s.to_string(),
            "--max-ended-tasks".to_string(),
            self.max_ended_tasks.to_string(),
            "--max-package-mb".to_string(),
            self.max_package_mb.to_string(),
        ];
        if self.fresh {
            v.push("--fresh".into());
        }
        v
    }
}

/// Moves a database (and its packages) aside so the head starts empty; the one set aside
/// before is replaced.
fn set_aside(storage: &Path) -> Result<()> {
    for from in [storage.to_path_buf(), storage.with_extension("packages")] {
        if !from.exists() {
            continue;
        }
        let mut to = from.clone().into_os_string();
        to.push(".previous");
        let to = PathBuf::from(to);
        if to.is_dir() {
            std::fs::remove_dir_all(&to)
        } else {
            std::fs::remove_file(&to)
                .or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) })
        }
        .with_context(|| format!("cannot remove {}", to.display()))?;
        std::fs::rename(&from, &to).with_context(|| format!("cannot move {} aside", from.display()))?;
    }
    Ok(())
}

#[derive(Args, Debug, Clone)]
pub struct SessionArgs {
    /// Use this session directory instead of creating one
    #[arg(long)]
    pub session_dir: Option<PathBuf>,
    /// Where new session directories go
    #[arg(long, env = "OXRAY_TEMP_DIR")]
    pub temp_dir: Option<PathBuf>,
}

impl SessionArgs {
    pub fn open(&self) -> Result<SessionDir> {
        let result = match &self.session_dir {
            Some(dir) => SessionDir::open(dir),
            None => SessionDir::create(&self.temp_dir.clone().unwrap_or_else(paths::default_temp_dir)),
        };
        result.context("cannot create the session directory")
    }
}

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// The head's control-plane address HOST:PORT
    #[arg(long)]
    pub address: String,
    #[command(flatten)]
    pub resources: ResourceArgs,
    /// A name for this node [default: its IP address]
    #[arg(long)]
    pub node_name: Option<String>,
    /// This agent runs beside the head
    #[arg(long)]
    pub head_node: bool,
    #[command(flatten)]
    pub dirs: SessionArgs,
    #[arg(long, env = "OXRAY_AUTH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Seconds to keep trying an unreachable head before giving up
    #[arg(long, default_value_t = 5.0, value_parser = positive_seconds)]
    pub join_timeout_s: f64,
    /// Port of this agent's service (jobs, logs) [default: any free port]
    #[arg(long, default_value_t = 0)]
    pub agent_port: u16,
    #[command(flatten)]
    pub memory_monitor: crate::monitor::MemoryMonitorArgs,
}

pub fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 => Ok(s),
        _ => Err(format!("expected a positive number of seconds, got {text:?}")),
    }
}

/// Logs to stderr (the daemon's log file, which rotates at its size cap).
pub fn init_logging() {
    oxray_config::log_rotation::watch_stdout_and_stderr();
    let filter = tracing_subscriber::EnvFilter::try_from_env("OXRAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,h2=warn,tower=warn,hyper=warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).init();
}

/// Reports the failure to the launcher and the log, and gives the exit code.
fn fail(error: anyhow::Error) -> Result<ExitCode> {
    let error = format!("{error:#}");
    tracing::error!("{error}");
    announce(&Ready::Failed { error });
    Ok(ExitCode::FAILURE)
}

/// Cancels the token on SIGTERM or SIGINT.
fn on_signals(shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("cannot listen for SIGTERM: {e}");
                return;
            }
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received; shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received; shutting down"),
        }
        shutdown.cancel();
    });
}

/// The head's token: explicit, else the user's token file, else a new one. The first head
/// start creates it; every start leaves a copy in the session directory.
fn head_token(explicit: Option<&str>, home: &Path, session: &SessionDir) -> Result<Token> {
    let file = paths::token_file(home);
    let token = match explicit {
        Some(text) => Token::parse(text).context("invalid OXRAY_AUTH_TOKEN")?,
        // Ray's `~/.ray/auth_token` too: a token made with `ray get-auth-token --generate`.
        None => match paths::read_token(home)? {
            Some((text, from)) => {
                Token::parse(&text).with_context(|| format!("invalid token in {}", from.display()))?
            }
            None => Token::generate(),
        },
    };
    if secret::read_trimmed(&file)?.as_deref() != Some(token.as_str()) {
        secret::write_private(&file, &format!("{}\n", token.as_str()))
            .with_context(|| format!("cannot write {}", file.display()))?;
    }
    secret::write_private(&session.token_file(), &format!("{}\n", token.as_str()))?;
    Ok(token)
}

pub fn run_head(args: HeadArgs) -> Result<ExitCode> {
    init_logging();
    let home = paths::oxray_home();
    let setup = || -> Result<oxray_head::HeadConfig> {
        let session = args.dirs.open()?;
        let explicit = std::env::var("OXRAY_AUTH_TOKEN").ok().filter(|t| !t.is_empty());
        let token = head_token(explicit.as_deref(), &home, &session)?;
        let node_ip = args.node_ip_address.clone().unwrap_or_else(crate::resources::detect_node_ip);
        oxray_rpc::tls::init(&token, &format!("{node_ip}:{}", args.port)).map_err(anyhow::Error::msg)?;
        let storage = args.storage.clone().unwrap_or_else(|| session.default_storage());
        if args.state.fresh {
            set_aside(&storage)?;
        }
        Ok(oxray_head::HeadConfig {
            bind_host: args.bind_host.clone(),
            port: args.port,
            node_ip,
            dashboard_host: args.dashboard_host.clone(),
            dashboard_port: args.dashboard_port,
            storage,
            session,
            token,
            node_death_timeout: Duration::from_secs_f64(args.node_death_timeout_s),
            dead_node_retention: Duration::from_secs_f64(args.state.dead_node_retention_s),
            max_ended_tasks: args.state.max_ended_tasks as usize,
            max_package_bytes: args.state.max_package_mb << 20,
            autoscaling: args.autoscaling,
        })
    };
    let config = match setup() {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let record = procs::register_self(&home, "head", config.session.path())?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let code = runtime.block_on(async {
        let head = match oxray_head::Head::bind(config.clone()).await {
            Ok(h) => h,
            Err(e) => return fail(e.into()),
        };
        announce(&Ready::Head {
            pid: record.pid,
            node_ip: config.node_ip.clone(),
            port: head.control_addr().port(),
            dashboard_host: config.dashboard_host.clone(),
            dashboard_port: head.dashboard_addr().port(),
            session_name: config.session.name(),
        });
        let shutdown = CancellationToken::new();
        on_signals(shutdown.clone());
        match head.run(shutdown).await {
            Ok(()) => Ok(ExitCode::SUCCESS),
            Err(e) => fail(e.into()),
        }
    });
    procs::unregister(&home, record.pid);
    code
}

pub fn run_agent(args: AgentArgs) -> Result<ExitCode> {
    init_logging();
    let home = paths::oxray_home();
    let setup = || -> Result<(oxray_agent::AgentConfig, SessionDir)> {
        args.resources.validate()?;
        let session = args.dirs.open()?;
        let token = resolve_token(args.token.as_deref(), &args.address)?;
        oxray_rpc::tls::init(&token, &args.address).map_err(anyhow::Error::msg)?;
        let node_ip = match &args.resources.node_ip_address {
            Some(ip) => ip.clone(),
            None => node_ip_towards(&args.address),
        };
        let config = oxray_agent::AgentConfig {
            head_address: args.address.clone(),
            token,
            node_name: args.node_name.clone().unwrap_or_else(|| node_ip.clone()),
            resources: args.resources.resolve(&node_ip, args.head_node)?,
            labels: args.resources.labels()?,
            is_head_node: args.head_node,
            node_ip,
            join_timeout: Duration::from_secs_f64(args.join_timeout_s),
            port: args.agent_port,
            session_dir: session.path().to_path_buf(),
            memory_monitor: args.memory_monitor.config(),
        };
        Ok((config, session))
    };
    let (config, session) = match setup() {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let record = procs::register_self(&home, "agent", session.path())?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let code = runtime.block_on(async {
        let agent = match oxray_agent::join(config).await {
            Ok(a) => a,
            Err(e) => return fail(e.into()),
        };
        announce(&Ready::Agent {
            pid: record.pid,
            node_id: agent.node_id().hex(),
            node_ip: agent.node_ip().to_string(),
            dashboard_url: agent.dashboard_url(),
        });
        let shutdown = CancellationToken::new();
        on_signals(shutdown.clone());
        agent.run(shutdown).await;
        Ok(ExitCode::SUCCESS)
    });
    procs::unregister(&home, record.pid);
    code
}
