use crate::output::{amount, table};
use crate::target::{fetch_nodes, runtime, TargetArgs};
use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use oxray_api_types::{list_nodes, NodeFilter, NodeRow, MAX_LIMIT};
use std::process::ExitCode;

#[derive(Subcommand, Debug)]
pub enum ListWhat {
    /// Every node the cluster has seen, alive and dead.
    Nodes(ListNodesArgs),
    /// Actors, alive and recently dead.
    Actors(super::state::StateListArgs),
    /// Task attempts: running, waiting, and the newest ended ones.
    Tasks(super::state::StateListArgs),
    /// Placement groups.
    PlacementGroups(super::state::StateListArgs),
    /// Jobs submitted to the cluster.
    Jobs(super::state::StateListArgs),
    /// Worker processes of every live node: alive, and the newest that ended.
    Workers(super::state::StateListArgs),
    /// Object references every process holds (owned and borrowed).
    Objects(super::state::StateListArgs),
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

/// What every `list` takes besides where the cluster is.
#[derive(Args, Debug)]
pub struct ListOptions {
    /// Output format [default: table, or yaml with --detail]
    #[arg(long)]
    pub format: Option<Format>,
    /// Every column, not only the main ones
    #[arg(long)]
    pub detail: bool,
    /// Keep rows where KEY=VALUE or KEY!=VALUE (string values ignore case)
    #[arg(long = "filter", short = 'f', value_name = "KEY=VALUE")]
    pub filters: Vec<String>,
    /// At most this many rows
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=MAX_LIMIT as i64))]
    pub limit: u32,
}

impl ListOptions {
    pub fn format(&self) -> Format {
        self.format.unwrap_or(if self.detail { Format::Yaml } else { Format::Table })
    }
}

#[derive(Args, Debug)]
pub struct ListNodesArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub list: ListOptions,
}

pub fn run(what: ListWhat) -> Result<ExitCode> {
    use oxray_api_types::state::StateKind;
    let args = match what {
        ListWhat::Nodes(args) => args,
        ListWhat::Actors(args) => return super::state::list(StateKind::Actors, args),
        ListWhat::Tasks(args) => return super::state::list(StateKind::Tasks, args),
        ListWhat::PlacementGroups(args) => return super::state::list(StateKind::PlacementGroups, args),
        ListWhat::Jobs(args) => return super::state::list(StateKind::Jobs, args),
        ListWhat::Workers(args) => return super::state::list(StateKind::Workers, args),
        ListWhat::Objects(args) => return super::state::list(StateKind::Objects, args),
    };
    let options = &args.list;
    let filters = options.filters.iter().map(|f| NodeFilter::parse(f)).collect::<Result<Vec<_>, _>>()?;
    let nodes = runtime()?.block_on(async { fetch_nodes(&mut args.target.connect().await?).await })?;
    let list = list_nodes(&nodes, &filters, options.limit as usize, options.detail);
    let format = options.format();
    let text = match format {
        Format::Json => serde_json::to_string_pretty(&list.result)?,
        Format::Yaml => serde_norway::to_string(&list.result).context("cannot format as YAML")?,
        Format::Table => render_table(&list.result, options.detail),
    };
    println!("{}", text.trim_end());
    if list.total > list.num_after_truncation {
        eprintln!("note: showing {} of {} nodes; raise --limit to see more", list.num_after_truncation, list.total);
    }
    Ok(ExitCode::SUCCESS)
}

fn resources(row: &NodeRow) -> String {
    row.resources_total
        .iter()
        .filter(|(k, _)| !k.starts_with("node:"))
        .map(|(k, v)| format!("{k}: {}", amount(k, *v)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn render_table(rows: &[NodeRow], detail: bool) -> String {
    let mut headers =
        vec!["NODE_ID", "NODE_IP", "IS_HEAD_NODE", "STATE", "STATE_MESSAGE", "NODE_NAME", "RESOURCES_TOTAL", "LABELS"];
    if detail {
        headers.extend(["START_TIME_MS", "END_TIME_MS"]);
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let labels = r.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
            let mut cells = vec![
                r.node_id.clone(),
                r.node_ip.clone(),
                r.is_head_node.to_string(),
                r.state.clone(),
                r.state_message.clone().unwrap_or_default(),
                r.node_name.clone(),
                resources(r),
                labels,
            ];
            if detail {
                cells.push(r.start_time_ms.unwrap_or(0).to_string());
                cells.push(r.end_time_ms.unwrap_or(0).to_string());
            }
            cells
        })
        .collect();
    table(&headers, &cells)
}
