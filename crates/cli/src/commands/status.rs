use crate::output::amount;
use crate::target::{fetch_nodes, fetch_pending, runtime, TargetArgs};
use anyhow::Result;
use oxray_api_types::{ClusterStatus, NodeSummary};
use std::fmt::Write;
use std::process::ExitCode;

#[derive(clap::Args, Debug, Clone)]
pub struct StatusArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Accepted as Ray's: the status always shows everything
    #[arg(short, long)]
    pub verbose: bool,
}

/// `ray health-check`: the head answers with its nodes, or the command fails.
pub fn health_check(target: TargetArgs) -> Result<ExitCode> {
    runtime()?.block_on(async { fetch_nodes(&mut target.connect().await?).await })?;
    Ok(ExitCode::SUCCESS)
}

pub fn run(StatusArgs { target, .. }: StatusArgs) -> Result<ExitCode> {
    let (nodes, pending) = runtime()?.block_on(async {
        let mut head = target.connect().await?;
        let nodes = fetch_nodes(&mut head).await?;
        let pending = fetch_pending(&mut head).await?;
        anyhow::Ok((nodes, pending))
    })?;
    let status = ClusterStatus::from_nodes(&nodes, pending);
    print!("{}", render(&status, &humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()));
    Ok(ExitCode::SUCCESS)
}

fn node_line(n: &NodeSummary) -> String {
    let role = if n.is_head_node { ", head" } else { "" };
    let name = if n.node_name != n.node_ip { format!(" {}", n.node_name) } else { String::new() };
    format!(" node_{}{name} ({}{role})", n.node_id, n.node_ip)
}

/// The layout of `ray status`, so its readers find things where they expect them.
pub fn render(status: &ClusterStatus, now: &str) -> String {
    let rule = "-".repeat(64);
    let mut out = String::new();
    let _ = writeln!(out, "======== Cluster status: {now} ========");
    let _ = writeln!(out, "Node status\n{rule}\nAlive:");
    if status.alive.is_empty() {
        out.push_str(" (no alive nodes)\n");
    }
    for n in &status.alive {
        let _ = writeln!(out, "{}", node_line(n));
    }
    out.push_str("Dead:\n");
    if status.dead.is_empty() {
        out.push_str(" (no dead nodes)\n");
    }
    for n in &status.dead {
        let reason = n.state_message.as_deref().unwrap_or("unknown");
        let _ = writeln!(out, "{}: {reason}", node_line(n));
    }
    let _ = writeln!(out, "\nResources\n{rule}\nUsage:");
    for (name, total) in &status.resources_total {
        let used = status.resources_used.get(name).copied().unwrap_or(0.0);
        let _ = writeln!(out, " {}/{} {name}", amount(name, used), amount(name, total.to_owned()));
    }
    out.push_str("\nPending:\n");
    if status.pending.is_empty() {
        out.push_str(" (no pending resource demands)\n");
    }
    for p in &status.pending {
        let _ = writeln!(out, " {p}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn renders_nodes_resources_and_pending() {
        let node = |id: &str, head: bool, msg: Option<&str>| NodeSummary {
            node_id: id.into(),
            node_ip: "10.0.0.1".into(),
            node_name: "10.0.0.1".into(),
            is_head_node: head,
            state_message: msg.map(Into::into),
            resources_used: Default::default(),
            idle_s: None,
        };
        let status = ClusterStatus {
            alive: vec![node("aa", true, None)],
            dead: vec![node("bb", false, Some("no heartbeat"))],
            resources_total: BTreeMap::from([("CPU".into(), 4.0), ("memory".into(), 2048.0)]),
            resources_used: BTreeMap::from([("CPU".into(), 1.0)]),
            pending: vec![],
            pending_resources: vec![],
        };
        let text = render(&status, "now");
        assert!(text.contains(" node_aa (10.0.0.1, head)"), "{text}");
        assert!(text.contains(" node_bb (10.0.0.1): no heartbeat"), "{text}");
        assert!(text.contains(" 1.0/4.0 CPU"), "{text}");
        assert!(text.contains(" 0B/2.00KiB memory"), "{text}");
        assert!(text.contains("(no pending resource demands)"), "{text}");
    }
}
