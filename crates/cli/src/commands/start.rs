use crate::commands::roles::{positive_seconds, SessionArgs, StateArgs};
use crate::launch::{spawn_role, stop_node, Launched};
use crate::resources::ResourceArgs;
use crate::target::CurrentCluster;
use anyhow::{bail, Context, Result};
use clap::Args;
use nix::sys::signal::Signal;
use oxray_config::ready::Ready;
use oxray_config::session::SessionDir;
use oxray_config::{paths, procs, secret};
use oxray_rpc::tls::Mode;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("role").required(true).args(["head", "address"]))]
pub struct StartArgs {
    /// Start the head of a new cluster on this machine
    #[arg(long)]
    pub head: bool,
    /// Join the cluster whose head listens at HOST:PORT
    #[arg(long)]
    pub address: Option<String>,
    /// Control-plane port of the head
    #[arg(long, default_value_t = oxray_config::DEFAULT_PORT)]
    pub port: u16,
    /// Interface the dashboard and HTTP API listen on
    #[arg(long, default_value = "127.0.0.1")]
    pub dashboard_host: String,
    #[arg(long, default_value_t = oxray_config::DEFAULT_DASHBOARD_PORT)]
    pub dashboard_port: u16,
    #[command(flatten)]
    pub resources: ResourceArgs,
    /// Node labels from a YAML file of `key: value` pairs; --labels wins over it
    #[arg(long, value_name = "FILE")]
    pub labels_file: Option<PathBuf>,
    #[command(flatten)]
    pub ray: crate::ray_flags::RayStartFlags,
    /// A name for this node [default: its IP address]
    #[arg(long)]
    pub node_name: Option<String>,
    /// Where session directories (logs, token copy, default database) go [default: /tmp/oxray]
    #[arg(long, env = "OXRAY_TEMP_DIR")]
    pub temp_dir: Option<PathBuf>,
    /// The head's database, kept across restarts [default: <temp-dir>/head-<port>/head.redb]
    #[arg(long)]
    pub storage: Option<PathBuf>,
    #[command(flatten)]
    pub state: StateArgs,
    #[command(flatten)]
    pub memory_monitor: crate::monitor::MemoryMonitorArgs,
    /// Seconds without a heartbeat before a node is declared dead
    #[arg(long, default_value_t = 5.0, value_parser = positive_seconds)]
    pub node_death_timeout_s: f64,
    /// Seconds a joining node keeps trying to reach an unreachable head before it gives up
    /// (on Kubernetes, worker pods may start before their head)
    #[arg(long, default_value_t = 5.0, value_parser = positive_seconds)]
    pub join_timeout_s: f64,
    #[command(flatten)]
    pub tls: crate::tls::TlsArgs,
    /// The cluster token [default: $OXRAY_AUTH_TOKEN, else the token file]
    #[arg(long, env = "OXRAY_AUTH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Stay in the foreground; stop everything on Ctrl-C, SIGTERM or when a process exits.
    /// The node's processes die with this one however it ends (SIGKILL included)
    #[arg(long)]
    pub block: bool,
    /// With --block, also stop when standard input closes: a program that starts a private
    /// cluster keeps the pipe open, and the cluster ends with it however it exits
    #[arg(long, requires = "block", hide = true)]
    pub stop_on_stdin_close: bool,
}

/// Where the head's control plane listens: every interface, for the nodes that join (and
/// for Ray's tools, which dial a loopback address's machine by its own address).
const HEAD_BIND_HOST: &str = "0.0.0.0";
const HEAD_READY_TIMEOUT: Duration = Duration::from_secs(15);
/// How long an agent may take to register once it reaches its head.
const AGENT_READY_MARGIN: Duration = Duration::from_secs(15);

pub fn run(mut args: StartArgs) -> Result<ExitCode> {
    args.ray.validate()?;
    if let Some(file) = &args.labels_file {
        args.resources.labels = Some(labels_with_file(file, args.resources.labels.as_deref())?);
    }
    args.resources.validate()?;
    if let Some(note) = args.ray.note() {
        eprintln!("{note}");
    }
    // Listen before anything starts, so a signal during startup still stops it all cleanly.
    let signals = if args.block { Some(Signals::install()?) } else { None };
    if let Some(address) = &args.address {
        validate_address(address)?;
    }
    // The head's, decided here so that its TLS mode follows it.
    let node_ip = args.resources.node_ip_address.clone().unwrap_or_else(crate::resources::detect_node_ip);
    let tls = if args.head {
        args.tls.mode(&format!("{node_ip}:{}", args.port), None)?
    } else {
        let recorded = crate::target::read_current();
        let recorded = recorded.as_ref().and_then(|c| Some((c.address.as_str(), c.tls.as_deref()?)));
        args.tls.mode(args.address.as_deref().unwrap_or_default(), recorded)?
    };
    let temp_dir = args.temp_dir.clone().unwrap_or_else(paths::default_temp_dir);
    let session = SessionDir::create(&temp_dir)?;
    let session_args = SessionArgs { session_dir: Some(session.path().to_path_buf()), temp_dir: None };
    let tls_env = crate::tls::mode_env(&tls);
    let mut token_env: Vec<(&str, &str)> =
        args.token.as_deref().map(|t| vec![("OXRAY_AUTH_TOKEN", t)]).unwrap_or_default();
    token_env.extend(tls_env.iter().map(|(name, value)| (*name, value.as_str())));

    let mut launched = Vec::new();
    let (address, dashboard_url) = if args.head {
        let head = spawn_role(
            &head_args(&args, &node_ip, &temp_dir, &session_args),
            &token_env,
            &session.logs().join("head.log"),
            HEAD_READY_TIMEOUT,
            args.block,
        )?;
        let Ready::Head { node_ip, port, dashboard_host, dashboard_port, .. } = head.ready.clone() else {
            bail!("the head answered with an unexpected readiness message");
        };
        launched.push(head);
        let address = format!("{node_ip}:{port}");
        let token = args.token.clone().or_else(|| Some(paths::read_token(&paths::oxray_home()).ok()??.0));
        let weak = token.and_then(|token| crate::tls::weak_token_warning(&tls, &token));
        for warning in crate::tls::exposure_warnings(&tls, HEAD_BIND_HOST, &dashboard_host).into_iter().chain(weak) {
            eprintln!("warning: {warning}");
        }
        let shown_host = if dashboard_host == "0.0.0.0" { node_ip } else { dashboard_host };
        let scheme = if matches!(tls, Mode::Files(_)) { "https" } else { "http" };
        (address, Some(format!("{scheme}://{shown_host}:{dashboard_port}")))
    } else {
        (args.address.clone().unwrap_or_default(), None)
    };
    let head_dashboard = dashboard_url.clone();

    let agent = spawn_role(
        &agent_args(&args, &address, &session_args),
        &token_env,
        &session.logs().join("agent.log"),
        Duration::from_secs_f64(args.join_timeout_s) + AGENT_READY_MARGIN,
        args.block,
    );
    let agent = match agent {
        Ok(a) => a,
        Err(e) => {
            stop_launched(&launched);
            return Err(e);
        }
    };
    let dashboard_url = match &agent.ready {
        Ready::Agent { dashboard_url, .. } if head_dashboard.is_none() && !dashboard_url.is_empty() => {
            Some(dashboard_url.clone())
        }
        _ => head_dashboard,
    };
    launched.push(agent);

    let current = CurrentCluster {
        address: address.clone(),
        dashboard_url: dashboard_url.clone(),
        session_dir: session.path().display().to_string(),
        tls_ca: match &tls {
            Mode::Files(files) => Some(files.ca.display().to_string()),
            _ => None,
        },
        tls: Some(tls.name().to_string()),
    };
    secret::write_json(&paths::current_cluster_file(&paths::oxray_home()), &current)?;

    if args.head {
        print_head_banner(&address, dashboard_url.as_deref().unwrap_or_default(), &session, &tls);
    } else {
        print_node_banner(&address, &launched[0].ready);
    }
    match signals {
        Some(signals) => block(launched, signals, args.stop_on_stdin_close),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// `--labels` as the agent takes it, with the labels of a `--labels-file` (Ray's YAML map)
/// put first so that `--labels` wins.
fn labels_with_file(file: &std::path::Path, flag: Option<&str>) -> Result<String> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read --labels-file {}", file.display()))?;
    let map: std::collections::BTreeMap<String, serde_norway::Value> = serde_norway::from_str(&text)
        .with_context(|| format!("invalid --labels-file {}: expected a YAML map of labels", file.display()))?;
    let mut pairs = Vec::new();
    for (key, value) in map {
        let value = match value {
            serde_norway::Value::String(s) => s,
            serde_norway::Value::Number(n) => n.to_string(),
            serde_norway::Value::Bool(b) => b.to_string(),
            other => bail!("invalid --labels-file {}: label {key:?} is {other:?}, not a string", file.display()),
        };
        if format!("{key}{value}").contains([',', '=']) {
            bail!("invalid --labels-file {}: label {key}={value} holds ',' or '='", file.display());
        }
        pairs.push(format!("{key}={value}"));
    }
    pairs.extend(flag.filter(|f| !f.trim().is_empty()).map(str::to_string));
    Ok(pairs.join(","))
}

fn validate_address(address: &str) -> Result<()> {
    match address.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => Ok(()),
        _ => bail!("invalid --address {address:?}: expected HOST:PORT of the head, e.g. 10.0.0.1:6379"),
    }
}

fn head_args(args: &StartArgs, node_ip: &str, temp_dir: &std::path::Path, session: &SessionArgs) -> Vec<String> {
    let mut v = vec![
        "head".to_string(),
        "--port".into(),
        args.port.to_string(),
        "--bind-host".into(),
        HEAD_BIND_HOST.into(),
        "--node-ip-address".into(),
        node_ip.into(),
        "--dashboard-host".into(),
        args.dashboard_host.clone(),
        "--dashboard-port".into(),
        args.dashboard_port.to_string(),
        "--node-death-timeout-s".into(),
        args.node_death_timeout_s.to_string(),
    ];
    v.extend(session_flags(session));
    let storage = args.storage.clone().or_else(|| paths::stable_head_storage(temp_dir, args.port));
    if let Some(storage) = storage {
        v.extend(["--storage".into(), storage.display().to_string()]);
    }
    v.extend(args.state.to_args());
    v
}

fn agent_args(args: &StartArgs, address: &str, session: &SessionArgs) -> Vec<String> {
    let mut v = vec!["agent".to_string(), "--address".into(), address.to_string()];
    if args.head {
        v.push("--head-node".into());
    }
    if let Some(name) = &args.node_name {
        v.extend(["--node-name".into(), name.clone()]);
    }
    v.extend(["--join-timeout-s".into(), args.join_timeout_s.to_string()]);
    v.extend(session_flags(session));
    v.extend(args.resources.to_args());
    v.extend(args.memory_monitor.to_args());
    v
}

fn session_flags(session: &SessionArgs) -> Vec<String> {
    let dir = session.session_dir.as_ref().expect("start always names the session directory");
    vec!["--session-dir".into(), dir.display().to_string()]
}

fn records(launched: &[Launched]) -> Vec<procs::ProcRecord> {
    launched
        .iter()
        .map(|l| procs::ProcRecord {
            pid: l.child.id(),
            start_ticks: procs::start_ticks(l.child.id()).unwrap_or(0),
            role: if matches!(l.ready, Ready::Agent { .. }) { "agent" } else { "head" }.to_string(),
            session_dir: PathBuf::new(),
        })
        .collect()
}

fn stop_launched(launched: &[Launched]) {
    stop_node(records(launched), Signal::SIGTERM, Duration::from_secs(10), &paths::oxray_home());
}

struct Signals {
    runtime: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        let runtime = crate::target::runtime()?;
        let _guard = runtime.enter();
        Ok(Self { term: signal(SignalKind::terminate())?, int: signal(SignalKind::interrupt())?, runtime })
    }
}

/// Stays until Ctrl-C, SIGTERM or the exit of one of the processes, then stops them all.
fn block(mut launched: Vec<Launched>, signals: Signals, watch_stdin: bool) -> Result<ExitCode> {
    println!("--block: staying in the foreground; Ctrl-C stops this node.");
    let Signals { runtime, mut term, mut int } = signals;
    let (closed_tx, mut stdin_closed) = tokio::sync::oneshot::channel::<()>();
    // Unwatched, the sender lives to the end so the receiver never fires.
    let _unwatched = if watch_stdin {
        // A plain thread: process exit ends it, so it never holds up a shutdown.
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            let _ = closed_tx.send(());
        });
        None
    } else {
        Some(closed_tx)
    };
    let exited = runtime.block_on(async {
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        loop {
            tokio::select! {
                _ = &mut stdin_closed => return Ok::<_, std::io::Error>(None),
                _ = int.recv() => return Ok::<_, std::io::Error>(None),
                _ = term.recv() => return Ok(None),
                _ = tick.tick() => {
                    for l in launched.iter_mut() {
                        if let Some(status) = l.child.try_wait()? {
                            return Ok(Some((l.child.id(), status)));
                        }
                    }
                }
            }
        }
    })?;
    stop_launched(&launched);
    for l in launched.iter_mut() {
        let _ = l.child.wait();
    }
    match exited {
        None => Ok(ExitCode::SUCCESS),
        Some((pid, status)) => {
            bail!("process {pid} exited ({status}); stopped the others on this node")
        }
    }
}

/// What the banner says of encryption.
fn tls_line(mode: &Mode) -> &'static str {
    match mode {
        Mode::Off => "off (connections between machines are not encrypted)",
        Mode::Auto => "on between machines, with an authority derived from the cluster token",
        Mode::Files(_) => "on between machines and on the dashboard, with the given certificates",
    }
}

fn print_head_banner(address: &str, dashboard: &str, session: &SessionDir, tls: &Mode) {
    println!(
        "\
--------------------
oxray runtime started.
--------------------

Next steps
  To add another node to this cluster, run on it
    oxray start --address='{address}' --token=\"$TOKEN\"
  where TOKEN is what `oxray get-auth-token` prints here.

  To connect to this cluster from Python:
    import oxray
    oxray.init()

  To submit a job:
    oxray job submit --working-dir . -- python my_script.py

  Dashboard and Jobs API: {dashboard}
  TLS: {tls}
  Logs: {logs}

  To terminate the oxray runtime, run
    oxray stop",
        logs = session.logs().display(),
        tls = tls_line(tls)
    );
}

fn print_node_banner(address: &str, ready: &Ready) {
    let node = match ready {
        Ready::Agent { node_id, node_ip, .. } => format!("{node_id} ({node_ip})"),
        _ => String::new(),
    };
    println!(
        "\
--------------------
oxray runtime started.
--------------------

This node {node} joined the cluster at {address}.

To terminate the oxray runtime, run
  oxray stop"
    );
}
