//! Ray's `start`, `stop` and `status` flags that mean nothing for oxray (no Redis, no
//! separate dashboard agent or raylet ports, no worker port ranges): scripts and manifests
//! written for Ray pass them, so they are accepted and named once, never silently dropped.
//! Those oxray cannot honour (resource isolation) are refused by name.

use anyhow::{bail, Result};
use clap::Args;

const HEADING: &str = "Ray's flags, accepted with no effect on oxray";

#[derive(Args, Debug, Clone, Default)]
pub struct RayStartFlags {
    #[arg(long, help_heading = HEADING)]
    redis_username: Option<String>,
    #[arg(long, help_heading = HEADING)]
    redis_password: Option<String>,
    #[arg(long, help_heading = HEADING)]
    redis_shard_ports: Option<String>,
    #[arg(long, help_heading = HEADING)]
    num_redis_shards: Option<String>,
    #[arg(long, help_heading = HEADING)]
    object_manager_port: Option<String>,
    #[arg(long, help_heading = HEADING)]
    node_manager_port: Option<String>,
    #[arg(long, help_heading = HEADING)]
    min_worker_port: Option<String>,
    #[arg(long, help_heading = HEADING)]
    max_worker_port: Option<String>,
    #[arg(long, help_heading = HEADING)]
    worker_port_list: Option<String>,
    #[arg(long, help_heading = HEADING)]
    ray_client_server_port: Option<String>,
    /// oxray's dashboard and HTTP API always run in the head
    #[arg(long, help_heading = HEADING)]
    include_dashboard: Option<String>,
    #[arg(long, help_heading = HEADING)]
    dashboard_agent_listen_port: Option<String>,
    #[arg(long, help_heading = HEADING)]
    dashboard_agent_grpc_port: Option<String>,
    #[arg(long, help_heading = HEADING)]
    dashboard_grpc_port: Option<String>,
    #[arg(long, help_heading = HEADING)]
    runtime_env_agent_port: Option<String>,
    #[arg(long, help_heading = HEADING)]
    metrics_export_port: Option<String>,
    #[arg(long, help_heading = HEADING)]
    plasma_directory: Option<String>,
    #[arg(long, help_heading = HEADING)]
    object_spilling_directory: Option<String>,
    #[arg(long, help_heading = HEADING)]
    autoscaling_config: Option<String>,
    #[arg(long, help_heading = HEADING)]
    system_config: Option<String>,
    #[arg(long, help_heading = HEADING)]
    tracing_startup_hook: Option<String>,
    #[arg(long, help_heading = HEADING)]
    include_log_monitor: Option<String>,
    #[arg(long, help_heading = HEADING)]
    proxy_server_url: Option<String>,
    #[arg(long, help_heading = HEADING)]
    no_redirect_output: bool,
    #[arg(long, help_heading = HEADING)]
    enable_object_reconstruction: bool,
    #[arg(long, help_heading = HEADING)]
    no_monitor: bool,
    #[arg(long, help_heading = HEADING)]
    ray_debugger_external: bool,
    #[arg(long, help_heading = HEADING)]
    disable_usage_stats: bool,
    /// Refused: oxray does not reserve CPU and memory for its processes through cgroups
    #[arg(long, help_heading = HEADING)]
    enable_resource_isolation: bool,
    #[arg(long, help_heading = HEADING)]
    system_reserved_cpu: Option<String>,
    #[arg(long, help_heading = HEADING)]
    system_reserved_memory: Option<String>,
    #[arg(long, help_heading = HEADING)]
    cgroup_path: Option<String>,
    #[command(flatten)]
    log: RayLogFlags,
}

/// Ray's output flags, on `start` and `stop`: oxray's output has one style.
#[derive(Args, Debug, Clone, Default)]
pub struct RayLogFlags {
    #[arg(long, help_heading = HEADING)]
    log_style: Option<String>,
    #[arg(long, help_heading = HEADING)]
    log_color: Option<String>,
    #[arg(short, long, action = clap::ArgAction::Count, help_heading = HEADING)]
    verbose: u8,
}

impl RayLogFlags {
    fn given(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        let flags = [("--log-style", self.log_style.is_some()), ("--log-color", self.log_color.is_some())];
        out.extend(flags.iter().filter(|(_, set)| *set).map(|(name, _)| *name));
        if self.verbose > 0 {
            out.push("--verbose");
        }
        out
    }

    /// The line that names the flags given, if any.
    pub fn note(&self) -> Option<String> {
        note(&self.given())
    }
}

impl RayStartFlags {
    /// The flags given that have no effect here, as the user wrote them.
    pub fn given(&self) -> Vec<&'static str> {
        let values = [
            ("--redis-username", &self.redis_username),
            ("--redis-password", &self.redis_password),
            ("--redis-shard-ports", &self.redis_shard_ports),
            ("--num-redis-shards", &self.num_redis_shards),
            ("--object-manager-port", &self.object_manager_port),
            ("--node-manager-port", &self.node_manager_port),
            ("--min-worker-port", &self.min_worker_port),
            ("--max-worker-port", &self.max_worker_port),
            ("--worker-port-list", &self.worker_port_list),
            ("--ray-client-server-port", &self.ray_client_server_port),
            ("--include-dashboard", &self.include_dashboard),
            ("--dashboard-agent-listen-port", &self.dashboard_agent_listen_port),
            ("--dashboard-agent-grpc-port", &self.dashboard_agent_grpc_port),
            ("--dashboard-grpc-port", &self.dashboard_grpc_port),
            ("--runtime-env-agent-port", &self.runtime_env_agent_port),
            ("--metrics-export-port", &self.metrics_export_port),
            ("--plasma-directory", &self.plasma_directory),
            ("--object-spilling-directory", &self.object_spilling_directory),
            ("--autoscaling-config", &self.autoscaling_config),
            ("--system-config", &self.system_config),
            ("--tracing-startup-hook", &self.tracing_startup_hook),
            ("--include-log-monitor", &self.include_log_monitor),
            ("--proxy-server-url", &self.proxy_server_url),
        ];
        let switches = [
            ("--no-redirect-output", self.no_redirect_output),
            ("--enable-object-reconstruction", self.enable_object_reconstruction),
            ("--no-monitor", self.no_monitor),
            ("--ray-debugger-external", self.ray_debugger_external),
            ("--disable-usage-stats", self.disable_usage_stats),
        ];
        let mut out: Vec<&'static str> = values.iter().filter(|(_, v)| v.is_some()).map(|(name, _)| *name).collect();
        out.extend(switches.iter().filter(|(_, on)| *on).map(|(name, _)| *name));
        out.extend(self.log.given());
        out
    }

    /// Refuses what oxray cannot do, by name.
    pub fn validate(&self) -> Result<()> {
        let isolation = [
            ("--enable-resource-isolation", self.enable_resource_isolation),
            ("--system-reserved-cpu", self.system_reserved_cpu.is_some()),
            ("--system-reserved-memory", self.system_reserved_memory.is_some()),
            ("--cgroup-path", self.cgroup_path.is_some()),
        ];
        if let Some((name, _)) = isolation.iter().find(|(_, set)| *set) {
            bail!(
                "{name}: oxray does not reserve resources for its processes through cgroups; leave it out, or \
                 run the node in a container sized for it"
            );
        }
        Ok(())
    }

    /// The line that names the flags given, if any.
    pub fn note(&self) -> Option<String> {
        note(&self.given())
    }
}

fn note(given: &[&str]) -> Option<String> {
    (!given.is_empty()).then(|| format!("note: Ray's {} accepted with no effect on oxray", given.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: RayStartFlags,
    }

    fn parse(args: &[&str]) -> RayStartFlags {
        Cli::try_parse_from(std::iter::once("ray").chain(args.iter().copied())).unwrap().flags
    }

    #[test]
    fn ray_s_flags_are_named_once_in_the_order_given() {
        let flags = parse(&["--include-dashboard=true", "--disable-usage-stats", "--min-worker-port", "10002", "-vv"]);
        assert_eq!(
            flags.given(),
            vec!["--min-worker-port", "--include-dashboard", "--disable-usage-stats", "--verbose"]
        );
        let note = flags.note().unwrap();
        assert!(note.contains("--include-dashboard") && note.contains("no effect"), "{note}");
        assert!(parse(&[]).note().is_none());
    }

    #[test]
    fn resource_isolation_is_refused_by_name() {
        let error = parse(&["--enable-resource-isolation"]).validate().unwrap_err().to_string();
        assert!(error.starts_with("--enable-resource-isolation:"), "{error}");
        let error = parse(&["--cgroup-path", "/sys/fs/cgroup/x"]).validate().unwrap_err().to_string();
        assert!(error.starts_with("--cgroup-path:"), "{error}");
    }

    #[test]
    fn every_flag_kuberay_passes_is_accepted() {
        // The operator drops the flags of `rayStartParams` that mean nothing here; `ray start`
        // in a KubeRay pod must take the same ones.
        let own = ["address", "block", "head", "node-ip-address", "node-name"];
        let switches =
            ["disable-usage-stats", "no-monitor", "enable-object-reconstruction", "ray-debugger-external", "verbose"];
        for name in oxray_operator::params::IGNORED.iter().filter(|n| !own.contains(n)) {
            let flag = format!("--{name}");
            let args: Vec<&str> = if switches.contains(name) { vec![&flag] } else { vec![&flag, "1"] };
            let parsed = Cli::try_parse_from(std::iter::once("ray").chain(args.iter().copied()));
            assert!(parsed.is_ok(), "ray start refuses {flag}");
        }
    }
}
