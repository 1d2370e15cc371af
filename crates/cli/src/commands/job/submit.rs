use super::client::{JobClient, JobTarget};
use super::{finish_code, print_status};
use anyhow::{bail, Context, Result};
use clap::Args;
use oxray_runtime_env::pack_dir;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Ray's server refuses larger uploads.
const UPLOAD_LIMIT: u64 = 100 * 1024 * 1024;

#[derive(Args, Debug)]
pub struct SubmitArgs {
    #[command(flatten)]
    pub target: JobTarget,
    /// Return once the job is submitted instead of following its logs
    #[arg(long)]
    pub no_wait: bool,
    /// An id of your choice [default: generated]
    #[arg(long)]
    pub submission_id: Option<String>,
    /// A local directory uploaded and used as the job's working directory
    #[arg(long)]
    pub working_dir: Option<PathBuf>,
    /// runtime_env from a YAML file
    #[arg(long, value_name = "FILE")]
    pub runtime_env: Option<PathBuf>,
    /// runtime_env as JSON (merged over --runtime-env)
    #[arg(long, value_name = "JSON")]
    pub runtime_env_json: Option<String>,
    /// CPUs reserved for the entrypoint
    #[arg(long)]
    pub entrypoint_num_cpus: Option<f64>,
    /// GPUs reserved for the entrypoint (exposed through CUDA_VISIBLE_DEVICES)
    #[arg(long)]
    pub entrypoint_num_gpus: Option<f64>,
    /// Memory in bytes reserved for the entrypoint
    #[arg(long)]
    pub entrypoint_memory: Option<u64>,
    /// Custom resources reserved for the entrypoint, as JSON
    #[arg(long, value_name = "JSON")]
    pub entrypoint_resources: Option<String>,
    /// Metadata as a JSON object of strings
    #[arg(long, value_name = "JSON")]
    pub metadata_json: Option<String>,
    /// The command to run, after `--`
    #[arg(last = true, required = true)]
    pub entrypoint: Vec<String>,
}

fn json_object(flag: &str, text: &str) -> Result<Map<String, Value>> {
    match serde_json::from_str::<Value>(text).with_context(|| format!("invalid {flag}: not JSON"))? {
        Value::Object(o) => Ok(o),
        _ => bail!("invalid {flag}: expected a JSON object"),
    }
}

/// Joins words into one shell command, quoting as Python's `shlex.join` does.
pub fn shell_join(words: &[String]) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./-_".contains(c);
    words
        .iter()
        .map(
            |w| {
                if !w.is_empty() && w.chars().all(safe) {
                    w.clone()
                } else {
                    format!("'{}'", w.replace('\'', "'\"'\"'"))
                }
            },
        )
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_uri(text: &str) -> bool {
    text.contains("://")
}

async fn upload_dir(client: &JobClient, dir: &Path, prefix: Option<&str>, excludes: &[String]) -> Result<String> {
    let (dir, prefix, excludes) = (dir.to_path_buf(), prefix.map(str::to_string), excludes.to_vec());
    let (name, bytes) =
        tokio::task::spawn_blocking(move || pack_dir(&dir, prefix.as_deref(), &excludes, UPLOAD_LIMIT)).await??;
    client.upload(&name, bytes).await?;
    Ok(format!("gcs://{name}"))
}

/// Replaces local paths with uploaded packages, and pip files with their requirements.
pub(crate) async fn resolve_local(client: &JobClient, env: &mut Map<String, Value>, base: &Path) -> Result<()> {
    let excludes: Vec<String> = env
        .get("excludes")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    if let Some(Value::String(dir)) = env.get("working_dir").cloned() {
        if !is_uri(&dir) {
            let uri = upload_dir(client, &base.join(&dir), None, &excludes).await.context("working_dir")?;
            env.insert("working_dir".into(), Value::String(uri));
        }
    }
    if let Some(Value::Array(modules)) = env.get("py_modules").cloned() {
        let mut uris = Vec::new();
        for module in modules {
            let Value::String(m) = module else { bail!("py_modules must be a list of strings") };
            if is_uri(&m) {
                uris.push(Value::String(m));
                continue;
            }
            let path = base.join(&m);
            let uri = if m.ends_with(".whl") {
                let name =
                    path.file_name().and_then(|n| n.to_str()).context("py_modules wheel has no file name")?.to_string();
                client
                    .upload(&name, std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?)
                    .await?;
                format!("gcs://{name}")
            } else {
                let folder = path
                    .canonicalize()
                    .ok()
                    .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .context("py_modules entry must be a directory")?;
                upload_dir(client, &path, Some(&folder), &excludes).await.context("py_modules")?
            };
            uris.push(Value::String(uri));
        }
        env.insert("py_modules".into(), Value::Array(uris));
    }
    if let Some(Value::String(file)) = env.get("pip").cloned() {
        let text = std::fs::read_to_string(base.join(&file))
            .with_context(|| format!("cannot read pip requirements file {file}"))?;
        let packages: Vec<Value> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| Value::String(l.into()))
            .collect();
        env.insert("pip".into(), Value::Array(packages));
    }
    Ok(())
}

/// The runtime_env of `--runtime-env FILE` and `--runtime-env-json`, and the directory its
/// relative paths are relative to: the file's, as in Ray, else the current one.
pub(crate) fn runtime_env_of_flags(file: Option<&Path>, json: Option<&str>) -> Result<(Map<String, Value>, PathBuf)> {
    let mut env = Map::new();
    let mut base = std::env::current_dir()?;
    if let Some(file) = file {
        let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
        let value: Value =
            serde_norway::from_str(&text).with_context(|| format!("invalid YAML in {}", file.display()))?;
        env = value.as_object().cloned().with_context(|| format!("{} must hold a mapping", file.display()))?;
        if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
            base = base.join(dir);
        }
    }
    if let Some(text) = json {
        env.extend(json_object("--runtime-env-json", text)?);
    }
    Ok((env, base))
}

pub async fn run(args: SubmitArgs) -> Result<ExitCode> {
    let (mut env, base) = runtime_env_of_flags(args.runtime_env.as_deref(), args.runtime_env_json.as_deref())?;
    if let Some(dir) = &args.working_dir {
        env.insert("working_dir".into(), Value::String(dir.display().to_string()));
    }
    let metadata =
        args.metadata_json.as_deref().map(|t| json_object("--metadata-json", t)).transpose()?.unwrap_or_default();
    let resources =
        args.entrypoint_resources.as_deref().map(|t| json_object("--entrypoint-resources", t)).transpose()?;

    let client = JobClient::connect(&args.target).await?;
    resolve_local(&client, &mut env, &base).await?;
    let body = json!({
        "entrypoint": shell_join(&args.entrypoint),
        "submission_id": args.submission_id,
        "runtime_env": env,
        "metadata": metadata,
        "entrypoint_num_cpus": args.entrypoint_num_cpus,
        "entrypoint_num_gpus": args.entrypoint_num_gpus,
        "entrypoint_memory": args.entrypoint_memory,
        "entrypoint_resources": resources,
    });
    let reply = client.post("/api/jobs/", &body).await?;
    let id = reply["submission_id"].as_str().context("the cluster answered without a submission id")?.to_string();
    println!("Job '{id}' submitted successfully");
    if args.no_wait {
        println!("Query its logs with `oxray job logs {id}`, its status with `oxray job status {id}`, stop it with `oxray job stop {id}`.");
        return Ok(ExitCode::SUCCESS);
    }
    println!("------------------------------------------\nJob '{id}' logs follow:");
    client.follow(&id).await?;
    let job = client.job(&id).await?;
    print_status(&id, &job);
    Ok(finish_code(&job))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_like_shlex() {
        let words = ["python", "-c", "print('a b')", "x=1", ""].map(String::from);
        assert_eq!(shell_join(&words), r#"python -c 'print('"'"'a b'"'"')' x=1 ''"#);
    }
}
