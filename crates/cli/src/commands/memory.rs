//! `oxray memory`: the objects the cluster's processes hold references to, by node and
//! process, with their sizes and who owns them, beside each node's object store use.

use super::job::client::{JobClient, JobTarget};
use super::list::Format;
use crate::output::{bytes, table};
use anyhow::Result;
use clap::{Args, ValueEnum};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SortBy {
    /// Largest first.
    ObjectSize,
    Pid,
    ObjectId,
}

#[derive(Args, Debug)]
pub struct MemoryArgs {
    #[command(flatten)]
    pub target: JobTarget,
    /// Order of the references within a node
    #[arg(long, value_enum, default_value = "object-size")]
    pub sort_by: SortBy,
    /// Only the totals per node, not every reference
    #[arg(long)]
    pub stats_only: bool,
    /// At most this many references
    #[arg(long, default_value_t = 10_000)]
    pub limit: u32,
    /// Output format (json: the references and the nodes' store use)
    #[arg(long, default_value = "table")]
    pub format: Format,
}

/// A reference as `oxray memory` shows it.
fn reference_row(r: &Value) -> Vec<String> {
    let size = r["object_size"].as_i64().unwrap_or(-1);
    let owned = r["task_status"].as_str() != Some("NIL");
    vec![
        r["pid"].to_string(),
        r["type"].as_str().unwrap_or_default().to_string(),
        r["object_id"].as_str().unwrap_or_default().to_string(),
        if size < 0 { "?".into() } else { bytes(size as f64) },
        if owned { "owner" } else { "borrower" }.into(),
        r["task_status"].as_str().unwrap_or_default().to_string(),
    ]
}

/// References by node address, each node's sorted as asked.
fn by_node(mut refs: Vec<Value>, sort: SortBy) -> BTreeMap<String, Vec<Value>> {
    refs.sort_by(|a, b| match sort {
        SortBy::ObjectSize => b["object_size"].as_i64().cmp(&a["object_size"].as_i64()),
        SortBy::Pid => a["pid"].as_u64().cmp(&b["pid"].as_u64()),
        SortBy::ObjectId => a["object_id"].as_str().cmp(&b["object_id"].as_str()),
    });
    let mut nodes: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for r in refs {
        nodes.entry(r["ip"].as_str().unwrap_or("?").to_string()).or_default().push(r);
    }
    nodes
}

/// One line of totals for a node's references: the objects owned there count once.
fn totals(refs: &[Value]) -> String {
    let owned: Vec<&Value> = refs.iter().filter(|r| r["task_status"].as_str() != Some("NIL")).collect();
    let size: i64 = owned.iter().filter_map(|r| r["object_size"].as_i64()).filter(|s| *s > 0).sum();
    let processes: std::collections::BTreeSet<u64> = refs.iter().filter_map(|r| r["pid"].as_u64()).collect();
    format!(
        "{} references in {} processes; {} objects owned here, {} in all",
        refs.len(),
        processes.len(),
        owned.len(),
        bytes(size as f64)
    )
}

/// The latest reading of each node's store, by node address.
fn stores(usage: &Value, nodes: &Value) -> BTreeMap<String, String> {
    let ips: BTreeMap<&str, &str> = nodes["data"]["result"]["result"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| Some((n["node_id"].as_str()?, n["node_ip"].as_str()?)))
        .collect();
    let mut out = BTreeMap::new();
    for (id, readings) in usage["nodes"].as_object().into_iter().flatten() {
        let (Some(last), Some(ip)) = (readings.as_array().and_then(|r| r.last()), ips.get(id.as_str())) else {
            continue;
        };
        let used = last["object_store_used"].as_f64().unwrap_or(0.0);
        let spilled = last["object_store_spilled"].as_f64().unwrap_or(0.0);
        out.insert(ip.to_string(), format!("object store: {} in memory, {} spilled", bytes(used), bytes(spilled)));
    }
    out
}

pub fn run(args: MemoryArgs) -> Result<ExitCode> {
    let (objects, usage, nodes) = crate::target::runtime()?.block_on(async {
        let client = JobClient::connect(&args.target).await?;
        let objects = client.get(&format!("/api/v0/objects?limit={}&detail=true", args.limit)).await?;
        let usage = client.get("/api/ui/usage").await?;
        let nodes = client.get("/api/v0/nodes?limit=10000").await?;
        anyhow::Ok((objects, usage, nodes))
    })?;
    let list = &objects["data"]["result"];
    let refs = list["result"].as_array().cloned().unwrap_or_default();
    if matches!(args.format, Format::Json | Format::Yaml) {
        let shown = serde_json::json!({ "references": refs, "stores": stores(&usage, &nodes) });
        let text = match args.format {
            Format::Json => serde_json::to_string_pretty(&shown)?,
            _ => serde_norway::to_string(&shown)?,
        };
        println!("{}", text.trim_end());
        return Ok(ExitCode::SUCCESS);
    }
    let stores = stores(&usage, &nodes);
    let grouped = by_node(refs, args.sort_by);
    let mut addresses: Vec<&String> = grouped.keys().chain(stores.keys()).collect();
    addresses.sort();
    addresses.dedup();
    for address in addresses {
        let refs = grouped.get(address).map(Vec::as_slice).unwrap_or_default();
        let store = stores.get(address).map_or(String::new(), |s| format!(" ({s})"));
        println!("--- Node {address}{store} ---");
        println!("{}", totals(refs));
        if !args.stats_only && !refs.is_empty() {
            let rows: Vec<Vec<String>> = refs.iter().map(reference_row).collect();
            println!("{}", table(&["PID", "TYPE", "OBJECT_ID", "SIZE", "HOLDS_AS", "TASK_STATUS"], &rows).trim_end());
        }
        println!();
    }
    for warning in list["warnings"].as_array().into_iter().flatten() {
        eprintln!("note: {}", warning.as_str().unwrap_or_default());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn references_are_grouped_by_node_and_owned_ones_counted_once() {
        let refs = vec![
            json!({"ip": "b", "pid": 2, "object_id": "x", "object_size": 10, "task_status": "FINISHED", "type": "DRIVER"}),
            json!({"ip": "b", "pid": 3, "object_id": "x", "object_size": -1, "task_status": "NIL", "type": "WORKER"}),
            json!({"ip": "a", "pid": 1, "object_id": "y", "object_size": 2048, "task_status": "FINISHED", "type": "DRIVER"}),
        ];
        let grouped = by_node(refs, SortBy::ObjectSize);
        assert_eq!(grouped.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(totals(&grouped["b"]), "2 references in 2 processes; 1 objects owned here, 10B in all");
        assert_eq!(reference_row(&grouped["b"][1])[3..5], ["?".to_string(), "borrower".to_string()]);
        assert_eq!(reference_row(&grouped["a"][0])[3], "2.00KiB");
    }
}
