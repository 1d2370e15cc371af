//! `oxray list actors|tasks|placement-groups|jobs|workers|objects`, `oxray get` and `oxray summary`: clients
//! of Ray's state API on the dashboard port, as Ray's `ray list/get/summary` are.

use super::job::client::{JobClient, JobTarget};
use super::list::{Format, ListOptions};
use crate::output::table;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use oxray_api_types::state::{StateFilter, StateKind};
use oxray_api_types::MAX_LIMIT;
use serde_json::Value;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct StateListArgs {
    #[command(flatten)]
    pub target: JobTarget,
    #[command(flatten)]
    pub list: ListOptions,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum GetWhat {
    Actors,
    Tasks,
    PlacementGroups,
    Jobs,
    Workers,
    Objects,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// What to look up.
    pub what: GetWhat,
    /// Its id (a job's submission id).
    pub id: String,
    #[command(flatten)]
    pub target: JobTarget,
    /// Output format
    #[arg(long, default_value = "yaml")]
    pub format: Format,
}

#[derive(Subcommand, Debug)]
pub enum SummaryWhat {
    /// Tasks by function, with how many are in each state.
    Tasks(SummaryArgs),
    /// Actors by class, with how many are in each state.
    Actors(SummaryArgs),
    /// Object references, with their count and size, by how they are held.
    Objects(SummaryArgs),
}

#[derive(Args, Debug)]
pub struct SummaryArgs {
    #[command(flatten)]
    pub target: JobTarget,
    /// Output format
    #[arg(long, default_value = "table")]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct TimelineArgs {
    /// Only this job's tasks (its submission id)
    #[arg(long)]
    pub job_id: Option<String>,
    /// Where to write the trace [default: oxray-timeline-<time>.json here]
    #[arg(short = 'o', long)]
    pub output: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub target: JobTarget,
}

impl From<GetWhat> for StateKind {
    fn from(what: GetWhat) -> Self {
        match what {
            GetWhat::Actors => StateKind::Actors,
            GetWhat::Tasks => StateKind::Tasks,
            GetWhat::PlacementGroups => StateKind::PlacementGroups,
            GetWhat::Jobs => StateKind::Jobs,
            GetWhat::Workers => StateKind::Workers,
            GetWhat::Objects => StateKind::Objects,
        }
    }
}

/// The query Ray's client would send.
fn list_query(kind: StateKind, filters: &[StateFilter], limit: u32, detail: bool) -> String {
    let mut pairs = vec![("limit", limit.to_string()), ("detail", detail.to_string())];
    for filter in filters {
        let (key, predicate, value) = filter.query_triple();
        pairs.extend([
            ("filter_keys", key.into()),
            ("filter_predicates", predicate.into()),
            ("filter_values", value.into()),
        ]);
    }
    format!("/api/v0/{}?{}", kind.path(), serde_urlencoded::to_string(pairs).unwrap_or_default())
}

/// `data.result` of Ray's envelope, or its message.
async fn fetch(target: &JobTarget, path: &str) -> Result<Value> {
    let client = JobClient::connect(target).await?;
    let text = client.text(reqwest::Method::GET, path, None).await?;
    let body: Value = serde_json::from_str(&text).context("the cluster's answer is not JSON")?;
    if body["result"] != Value::Bool(true) {
        bail!("{}", body["msg"].as_str().unwrap_or("the cluster refused the request"));
    }
    Ok(body["data"]["result"].clone())
}

fn cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn render(rows: &[Value], columns: &[&str], format: Format) -> Result<String> {
    Ok(match format {
        Format::Json => serde_json::to_string_pretty(rows)?,
        Format::Yaml => serde_norway::to_string(rows).context("cannot format as YAML")?,
        Format::Table => {
            let headers: Vec<String> = columns.iter().map(|c| c.to_ascii_uppercase()).collect();
            let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
            let cells: Vec<Vec<String>> = rows.iter().map(|r| columns.iter().map(|c| cell(&r[*c])).collect()).collect();
            table(&headers, &cells)
        }
    })
}

pub fn list(kind: StateKind, args: StateListArgs) -> Result<ExitCode> {
    let options = &args.list;
    let filters = options.filters.iter().map(|f| StateFilter::parse(kind, f)).collect::<Result<Vec<_>, _>>();
    let filters = filters.map_err(|e| anyhow!(e))?;
    let path = list_query(kind, &filters, options.limit, options.detail);
    let list = crate::target::runtime()?.block_on(fetch(&args.target, &path))?;
    let rows = list["result"].as_array().cloned().unwrap_or_default();
    let format = options.format();
    if rows.is_empty() && matches!(format, Format::Table) {
        println!("No {} in the cluster.", kind.noun());
    } else {
        println!("{}", render(&rows, kind.plain_columns(), format)?.trim_end());
    }
    for warning in list["warnings"].as_array().into_iter().flatten() {
        eprintln!("note: {}", cell(warning));
    }
    let (filtered, shown) = (list["num_filtered"].as_u64().unwrap_or(0), rows.len() as u64);
    if filtered > shown {
        eprintln!("note: showing {shown} of {filtered} {}; raise --limit to see more", kind.noun());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn get(args: GetArgs) -> Result<ExitCode> {
    let kind = StateKind::from(args.what);
    let filter = format!("{}={}", kind.id_key(), args.id);
    let parsed = StateFilter::parse(kind, &filter).map_err(|e| anyhow!(e))?;
    let path = list_query(kind, &[parsed], MAX_LIMIT as u32, true);
    let list = crate::target::runtime()?.block_on(fetch(&args.target, &path))?;
    let rows = list["result"].as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        bail!("no {} with id {} in the cluster", kind.noun(), args.id);
    }
    // A task has one row per attempt; everything else one.
    let shown = if rows.len() == 1 { rows[0].clone() } else { Value::Array(rows) };
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&shown)?,
        _ => serde_norway::to_string(&shown).context("cannot format as YAML")?,
    };
    println!("{}", text.trim_end());
    Ok(ExitCode::SUCCESS)
}

/// The columns of a summary table: `(header, field of a group)`; an empty field is the
/// group's own key.
type Columns = &'static [(&'static str, &'static str)];

const TASK_COLUMNS: Columns =
    &[("FUNC_OR_CLASS_NAME", "func_or_class_name"), ("TYPE", "type"), ("STATE_COUNTS", "state_counts")];
const ACTOR_COLUMNS: Columns = &[("CLASS_NAME", "class_name"), ("STATE_COUNTS", "state_counts")];
const OBJECT_COLUMNS: Columns = &[
    ("CALL_SITE", ""),
    ("TOTAL_OBJECTS", "total_objects"),
    ("TOTAL_SIZE_MB", "total_size_mb"),
    ("TASK_STATE_COUNTS", "task_state_counts"),
    ("REF_TYPE_COUNTS", "ref_type_counts"),
];

/// Rows of a summary table: one per group; counts read `STATE: n, ...`.
fn summary_rows(summary: &Value, columns: Columns) -> Vec<Vec<String>> {
    let Some(groups) = summary.as_object() else { return Vec::new() };
    let field = |key: &str, g: &Value, name: &str| match (name, &g[name]) {
        ("", _) => key.to_string(),
        (_, Value::Object(counts)) => counts.iter().map(|(k, n)| format!("{k}: {n}")).collect::<Vec<_>>().join(", "),
        (_, value) => cell(value),
    };
    groups.iter().map(|(key, g)| columns.iter().map(|(_, name)| field(key, g, name)).collect()).collect()
}

pub fn summary(what: SummaryWhat) -> Result<ExitCode> {
    let (args, path, columns) = match what {
        SummaryWhat::Tasks(a) => (a, "/api/v0/tasks/summarize", TASK_COLUMNS),
        SummaryWhat::Actors(a) => (a, "/api/v0/actors/summarize", ACTOR_COLUMNS),
        SummaryWhat::Objects(a) => (a, "/api/v0/objects/summarize", OBJECT_COLUMNS),
    };
    let result = crate::target::runtime()?.block_on(fetch(&args.target, path))?;
    let cluster = &result["result"]["node_id_to_summary"]["cluster"];
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(cluster)?,
        Format::Yaml => serde_norway::to_string(cluster).context("cannot format as YAML")?,
        Format::Table => {
            let totals: Vec<String> = cluster
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| k.starts_with("total"))
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            let headers: Vec<&str> = columns.iter().map(|(h, _)| *h).collect();
            format!("{}\n\n{}", totals.join("\n"), table(&headers, &summary_rows(&cluster["summary"], columns)))
        }
    };
    println!("{}", text.trim_end());
    Ok(ExitCode::SUCCESS)
}

/// `oxray timeline`: the tasks the head knows of as a Chrome trace file.
pub fn timeline(args: TimelineArgs) -> Result<ExitCode> {
    let query = args.job_id.as_deref().map(|j| serde_urlencoded::to_string([("job_id", j)])).transpose()?;
    let path = format!("/api/v0/tasks/timeline?{}", query.unwrap_or_default());
    let trace = crate::target::runtime()?.block_on(async {
        let client = JobClient::connect(&args.target).await?;
        client.text(reqwest::Method::GET, &path, None).await
    })?;
    let events: Value = serde_json::from_str(&trace).context("the cluster's timeline is not JSON")?;
    let output = args.output.unwrap_or_else(|| format!("oxray-timeline-{}.json", oxray_types::now_ms() / 1000).into());
    std::fs::write(&output, &trace).with_context(|| format!("cannot write {}", output.display()))?;
    let count = events.as_array().map_or(0, Vec::len);
    println!(
        "Wrote {count} task events to {} (open it in chrome://tracing or https://ui.perfetto.dev)",
        output.display()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_queries_are_rays() {
        let raw = ["STATE=alive".to_string(), "name!=x".to_string()];
        let filters: Vec<_> = raw.iter().map(|f| StateFilter::parse(StateKind::Actors, f).unwrap()).collect();
        let path = list_query(StateKind::Actors, &filters, 5, false);
        assert_eq!(
            path,
            "/api/v0/actors?limit=5&detail=false&filter_keys=state&filter_predicates=%3D&filter_values=alive\
             &filter_keys=name&filter_predicates=%21%3D&filter_values=x"
        );
    }

    #[test]
    fn summary_rows_count_states() {
        let summary = serde_json::json!({ "f": { "func_or_class_name": "f", "type": "NORMAL_TASK",
                                                 "state_counts": { "FINISHED": 2 } } });
        assert_eq!(summary_rows(&summary, TASK_COLUMNS), vec![vec!["f", "NORMAL_TASK", "FINISHED: 2"]]);
        let objects =
            serde_json::json!({ "disabled": { "total_objects": 3, "ref_type_counts": { "LOCAL_REFERENCE": 3 } } });
        assert_eq!(summary_rows(&objects, &OBJECT_COLUMNS[..3]), vec![vec!["disabled", "3", ""]]);
        assert_eq!(summary_rows(&objects, &OBJECT_COLUMNS[4..]), vec![vec!["LOCAL_REFERENCE: 3"]]);
    }
}
