//! `oxray serve run`: Ray's `serve run`. Deploys a config file or an import path (its code
//! uploaded from the app directory, as a job's working_dir is), waits until the applications
//! run, then serves until Ctrl-C or SIGTERM and deletes what it deployed. Other applications
//! on the cluster are left as they were. With no cluster to talk to, it starts a local one
//! for the run, as Ray's `serve run` does.

use super::job::client::{names_a_cluster, JobClient, JobTarget};
use super::job::submit::{resolve_local, runtime_env_of_flags};
use super::serve::{config_of_import_path, details, is_config_file, read_config, APPS};
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

const POLL: Duration = Duration::from_millis(300);
/// How long the deleted applications are waited for at the end.
const GONE_WITHIN: Duration = Duration::from_secs(60);

#[derive(Args, Debug)]
pub struct RunArgs {
    /// A config file, or an import path of an application or application builder.
    pub config_or_import_path: String,
    /// Builder arguments (`key=value`), with an import path only.
    pub arguments: Vec<String>,
    /// The application's name, with an import path only [default: default].
    #[arg(long)]
    pub name: Option<String>,
    /// The application's route prefix, with an import path only [default: /].
    #[arg(long)]
    pub route_prefix: Option<String>,
    /// A local directory (uploaded) or a URI the application runs in, with an import path
    /// only [default: the app directory, when the import path's module is there].
    #[arg(long)]
    pub working_dir: Option<String>,
    /// runtime_env from a YAML file, with an import path only.
    #[arg(long, value_name = "FILE")]
    pub runtime_env: Option<PathBuf>,
    /// runtime_env as JSON (merged over --runtime-env), with an import path only.
    #[arg(long, value_name = "JSON")]
    pub runtime_env_json: Option<String>,
    /// Where the import path's module is looked for.
    #[arg(short = 'd', long, default_value = ".")]
    pub app_dir: PathBuf,
    /// Return once the applications run, and leave them running.
    #[arg(long)]
    pub non_blocking: bool,
    #[command(flatten)]
    pub target: JobTarget,
}

/// The names of a config's applications (Ray's default name when one has none).
fn app_names(config: &Value) -> Vec<String> {
    config["applications"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| a["name"].as_str().unwrap_or("default").to_string())
        .collect()
}

/// The declarative applications running now, as they were deployed.
fn deployed_apps(details: &Value) -> Vec<Value> {
    let apps = details["applications"].as_object().cloned().unwrap_or_default();
    apps.values().filter(|a| a["deployed_app_config"].is_object()).map(|a| a["deployed_app_config"].clone()).collect()
}

/// The config to send: the new one, with the declarative applications already deployed
/// that it does not name, so a PUT (which replaces the whole declarative set) keeps them.
fn merged(details: &Value, config: &Value) -> Value {
    let names = app_names(config);
    let mut out = config.clone();
    let mut apps = deployed_apps(details);
    apps.retain(|a| !names.contains(&a["name"].as_str().unwrap_or("default").to_string()));
    apps.extend(config["applications"].as_array().cloned().unwrap_or_default());
    out["applications"] = Value::Array(apps);
    out
}

/// The config without the named applications: what is sent to delete only those.
fn without(details: &Value, names: &[String]) -> Value {
    let mut apps = deployed_apps(details);
    apps.retain(|a| !names.contains(&a["name"].as_str().unwrap_or("default").to_string()));
    json!({ "applications": apps })
}

/// Where the applications answer: None while some still deploy; an error once one failed.
fn readiness(details: &Value, names: &[String], base: &str) -> Result<Option<Vec<String>>> {
    let http = &details["http_options"];
    let host = match http["host"].as_str() {
        Some("0.0.0.0") | Some("::") | None => url_host(base),
        Some(h) => h.to_string(),
    };
    let port = http["port"].as_u64().unwrap_or(8000);
    let mut urls = Vec::new();
    for name in names {
        let app = &details["applications"][name];
        match app["status"].as_str() {
            Some("RUNNING") => {
                let prefix = app["route_prefix"].as_str().unwrap_or("/");
                urls.push(format!("Application '{name}' is ready at http://{host}:{port}{prefix}."));
            }
            Some("DEPLOY_FAILED") => {
                bail!("application '{name}' failed to deploy: {}", app["message"].as_str().unwrap_or(""))
            }
            _ => return Ok(None),
        }
    }
    Ok(Some(urls))
}

fn url_host(base: &str) -> String {
    let rest = base.split("://").nth(1).unwrap_or(base);
    let authority = rest.split('/').next().unwrap_or(rest);
    authority.rsplit_once(':').map(|(h, _)| h).unwrap_or(authority).to_string()
}

/// Whether `dir` holds the top-level module of `import_path` (`mod.py` or a `mod/` package).
fn holds_module(dir: &Path, import_path: &str) -> bool {
    let module = import_path.split([':', '.']).next().unwrap_or_default();
    !module.is_empty() && (dir.join(format!("{module}.py")).is_file() || dir.join(module).is_dir())
}

/// The application's runtime_env from the flags, for an import path, and the directory its
/// relative paths are relative to.
fn runtime_env_of(a: &RunArgs) -> Result<(Map<String, Value>, PathBuf)> {
    let (mut env, base) = runtime_env_of_flags(a.runtime_env.as_deref(), a.runtime_env_json.as_deref())?;
    if let Some(dir) = &a.working_dir {
        env.insert("working_dir".into(), Value::String(dir.clone()));
    } else if !env.contains_key("working_dir") && holds_module(&a.app_dir, &a.config_or_import_path) {
        let app_dir = std::env::current_dir()?.join(&a.app_dir);
        env.insert("working_dir".into(), Value::String(app_dir.display().to_string()));
    }
    Ok((env, base))
}

/// The config to deploy, and the directory its relative paths are relative to.
fn config_of(a: &RunArgs) -> Result<(Value, PathBuf)> {
    let cwd = std::env::current_dir()?;
    if is_config_file(&a.config_or_import_path) {
        let import_only =
            [a.name.is_some(), a.route_prefix.is_some(), a.working_dir.is_some(), a.runtime_env.is_some()];
        if !a.arguments.is_empty() || import_only.contains(&true) || a.runtime_env_json.is_some() {
            bail!("arguments, --name, --route-prefix and runtime_env flags go with an import path; a config file sets them per application");
        }
        let base = Path::new(&a.config_or_import_path).parent().map(|d| cwd.join(d)).unwrap_or(cwd);
        return Ok((read_config(&a.config_or_import_path)?, base));
    }
    let mut config = config_of_import_path(&a.config_or_import_path, &a.arguments, a.name.as_deref())?;
    if let Some(prefix) = &a.route_prefix {
        config["applications"][0]["route_prefix"] = Value::String(prefix.clone());
    }
    let (env, base) = runtime_env_of(a)?;
    if !env.is_empty() {
        config["applications"][0]["runtime_env"] = Value::Object(env);
    }
    Ok((config, base))
}

pub async fn run(a: RunArgs) -> Result<ExitCode> {
    let (mut config, base) = config_of(&a)?;
    let names = app_names(&config);
    if names.is_empty() {
        bail!("the config names no applications");
    }
    let (client, local) = connect_or_start(&a.target).await?;
    for app in config["applications"].as_array_mut().into_iter().flatten() {
        if let Some(env) = app.get_mut("runtime_env").and_then(Value::as_object_mut) {
            resolve_local(&client, env, &base).await?;
        }
    }
    let body = merged(&details(&client).await?, &config);
    client.text(reqwest::Method::PUT, APPS, Some(body)).await.context("the cluster refused the config")?;
    println!("Deploying {}...", names.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", "));
    let ready = loop {
        tokio::select! {
            current = details(&client) => {
                match readiness(&current?, &names, client.base()) {
                    Ok(Some(urls)) => break urls,
                    Ok(None) => {}
                    Err(failed) => {
                        // A run leaves nothing behind, not even what failed.
                        remove(&client, &names).await?;
                        return Err(failed);
                    }
                }
            }
            _ = stop_signal() => {
                println!("Stopped before the applications were ready: deleting them.");
                remove(&client, &names).await?;
                return Ok(ExitCode::FAILURE);
            }
        }
        tokio::time::sleep(POLL).await;
    };
    for line in ready {
        println!("{line}");
    }
    if a.non_blocking {
        if local.is_some() {
            println!("(the local cluster started for this run stops now: --non-blocking needs a running cluster)");
        }
        return Ok(ExitCode::SUCCESS);
    }
    println!("Serving until Ctrl-C.");
    stop_signal().await;
    println!("Shutting down: deleting {}.", names.join(", "));
    remove(&client, &names).await?;
    if let Some(local) = local {
        // Stopping it waits for its processes: not on the runtime's threads.
        tokio::task::spawn_blocking(move || drop(local)).await?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The cluster named by the target, else a local one started for this run (stopped when
/// it is dropped).
async fn connect_or_start(target: &JobTarget) -> Result<(JobClient, Option<oxray_worker::LocalCluster>)> {
    if names_a_cluster(target) {
        return Ok((JobClient::connect(target).await?, None));
    }
    println!("No cluster is running here: starting a local one for this run (it stops when the run ends).");
    let bin = std::env::current_exe().context("cannot find the oxray executable")?;
    let local = tokio::task::spawn_blocking(move || oxray_worker::LocalCluster::start(&bin, &Default::default()))
        .await?
        .context("cannot start a local cluster")?;
    let local_target = JobTarget { address: Some(local.address.clone()), token: Some(local.token.clone()) };
    Ok((JobClient::connect(&local_target).await?, Some(local)))
}

async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Deletes the named applications and waits until they are gone.
async fn remove(client: &JobClient, names: &[String]) -> Result<()> {
    let body = without(&details(client).await?, names);
    client.text(reqwest::Method::PUT, APPS, Some(body)).await?;
    let deadline = tokio::time::Instant::now() + GONE_WITHIN;
    loop {
        let current = details(client).await?;
        if names.iter().all(|n| current["applications"].get(n).is_none()) {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the applications were not deleted within {} s", GONE_WITHIN.as_secs());
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn details() -> Value {
        json!({"http_options": {"host": "0.0.0.0", "port": 8000}, "applications": {
            "kept": {"status": "RUNNING", "route_prefix": "/k", "deployed_app_config": {"name": "kept", "import_path": "m:k"}},
            "mine": {"status": "RUNNING", "route_prefix": "/", "deployed_app_config": {"name": "mine", "import_path": "m:old"}},
            "imperative": {"status": "RUNNING", "route_prefix": "/i", "deployed_app_config": null}}})
    }

    #[test]
    fn a_run_replaces_its_own_apps_and_keeps_the_other_declarative_ones() {
        let config = json!({"applications": [{"name": "mine", "import_path": "m:new"}], "proxy_location": "HeadOnly"});
        let body = merged(&details(), &config);
        assert_eq!(body["proxy_location"], "HeadOnly");
        assert_eq!(
            body["applications"],
            json!([{"name": "kept", "import_path": "m:k"}, {"name": "mine", "import_path": "m:new"}])
        );
        assert_eq!(
            without(&details(), &["mine".into()]),
            json!({"applications": [{"name": "kept", "import_path": "m:k"}]})
        );
        assert_eq!(app_names(&json!({"applications": [{"import_path": "m:a"}]})), ["default"]);
    }

    #[test]
    fn ready_once_every_app_runs_and_failed_once_one_failed() {
        let urls = readiness(&details(), &["mine".into(), "kept".into()], "http://10.0.0.5:8265").unwrap().unwrap();
        assert_eq!(urls[0], "Application 'mine' is ready at http://10.0.0.5:8000/.");
        assert_eq!(urls[1], "Application 'kept' is ready at http://10.0.0.5:8000/k.");
        let mut d = details();
        d["applications"]["mine"]["status"] = json!("DEPLOYING");
        assert!(readiness(&d, &["mine".into()], "http://h:1").unwrap().is_none());
        d["applications"]["mine"]["status"] = json!("DEPLOY_FAILED");
        d["applications"]["mine"]["message"] = json!("No module named 'm'");
        let failed = readiness(&d, &["mine".into()], "http://h:1").unwrap_err().to_string();
        assert!(failed.contains("No module named 'm'"), "{failed}");
        assert!(readiness(&details(), &["absent".into()], "http://h:1").unwrap().is_none());
    }

    #[test]
    fn the_app_dir_is_the_working_dir_when_it_holds_the_module() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("echo_app.py"), "").unwrap();
        assert!(holds_module(dir.path(), "echo_app:app") && holds_module(dir.path(), "echo_app.build"));
        assert!(!holds_module(dir.path(), "other:app"));
        assert_eq!(url_host("http://[::1]:8265/x"), "[::1]");
    }
}
