//! `oxray serve start|deploy|run|status|config|shutdown|build`: Ray's `serve` CLI commands of the
//! same names, as clients of Serve's REST API on the dashboard port (`run`: `serve_run.rs`;
//! `build` imports the applications in Python and talks to no cluster).

use super::job::client::{JobClient, JobTarget};
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Map, Value};
use std::io::{BufRead, Write};
use std::process::ExitCode;

pub(crate) const APPS: &str = "/api/serve/applications/";

#[derive(Subcommand, Debug)]
pub enum ServeCommand {
    /// Start Serve on the cluster: its HTTP proxies run from now on (on the head and on
    /// every node with a replica), also with no application, until `serve shutdown`.
    Start(StartArgs),
    /// Deploy applications from a config file (YAML or JSON, Ray's ServeDeploySchema) or
    /// from an import path (`module:app`, with `key=value` builder arguments); returns once
    /// the cluster accepted it (`serve status` shows the progress).
    Deploy(DeployArgs),
    /// Deploy applications (a config file or an import path, whose code is uploaded from
    /// the app directory), wait until they run, then serve until Ctrl-C and delete them.
    Run(super::serve_run::RunArgs),
    /// Print the status of Serve's proxies, applications and deployments (YAML).
    Status(NameArgs),
    /// Print the config each declarative application was deployed with (YAML documents).
    Config(NameArgs),
    /// Delete every application and stop Serve.
    Shutdown(ShutdownArgs),
    /// Write the config file (Ray's ServeDeploySchema, YAML) of applications given by import
    /// path, with the options their code sets: for `serve deploy` or a RayService.
    Build(BuildArgs),
}

#[derive(Args, Debug)]
pub struct StartArgs {
    /// The address the HTTP proxies listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub http_host: String,
    /// The port the HTTP proxies listen on.
    #[arg(long, default_value_t = 8000)]
    pub http_port: u16,
    /// Where HTTP proxies run.
    #[arg(long, default_value = "EveryNode", value_parser = ["EveryNode", "HeadOnly", "Disabled"])]
    pub proxy_location: String,
    #[command(flatten)]
    pub target: JobTarget,
}

#[derive(Args, Debug)]
pub struct BuildArgs {
    /// Import paths of applications (`module:app`), one application each.
    #[arg(required = true)]
    pub import_paths: Vec<String>,
    /// The directory the import paths are found in.
    #[arg(short = 'd', long, default_value = ".")]
    pub app_dir: String,
    /// Where to write the config (else standard output).
    #[arg(short = 'o', long)]
    pub output_path: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
pub struct DeployArgs {
    /// A config file, or an import path of an application or application builder.
    pub config_or_import_path: String,
    /// Builder arguments (`key=value`), with an import path only.
    pub arguments: Vec<String>,
    /// The application's name, with an import path only.
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub target: JobTarget,
}

#[derive(Args, Debug)]
pub struct NameArgs {
    /// Only this application.
    #[arg(short = 'n', long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub target: JobTarget,
}

#[derive(Args, Debug)]
pub struct ShutdownArgs {
    /// Do not ask for confirmation.
    #[arg(short = 'y', long)]
    pub yes: bool,
    #[command(flatten)]
    pub target: JobTarget,
}

pub fn run(command: ServeCommand) -> Result<ExitCode> {
    crate::target::runtime()?.block_on(async {
        match command {
            ServeCommand::Start(a) => start(a).await,
            ServeCommand::Deploy(a) => deploy(a).await,
            ServeCommand::Run(a) => super::serve_run::run(a).await,
            ServeCommand::Status(a) => status(a).await,
            ServeCommand::Config(a) => config(a).await,
            ServeCommand::Shutdown(a) => shutdown(a).await,
            ServeCommand::Build(a) => build(a),
        }
    })
}

/// The config with its keys in the order Ray's `serve build` writes them (the rest after).
fn in_ray_order(config: &Value) -> Result<serde_norway::Value> {
    fn ordered(value: &Value, first: &[&str]) -> Result<serde_norway::Value> {
        let Value::Object(map) = value else { return Ok(serde_norway::to_value(value)?) };
        let mut out = serde_norway::Mapping::new();
        let known = first.iter().filter_map(|k| map.get_key_value(*k));
        for (k, v) in known.chain(map.iter().filter(|(k, _)| !first.contains(&k.as_str()))) {
            let v = match (k.as_str(), v) {
                ("applications", Value::Array(apps)) => {
                    serde_norway::Value::Sequence(apps.iter().map(|a| ordered(a, APP_KEYS)).collect::<Result<_>>()?)
                }
                ("deployments", Value::Array(deps)) => {
                    serde_norway::Value::Sequence(deps.iter().map(|d| ordered(d, &["name"])).collect::<Result<_>>()?)
                }
                _ => serde_norway::to_value(v)?,
            };
            out.insert(serde_norway::Value::String(k.clone()), v);
        }
        Ok(serde_norway::Value::Mapping(out))
    }
    const TOP_KEYS: &[&str] = &["proxy_location", "http_options", "grpc_options", "logging_config", "applications"];
    const APP_KEYS: &[&str] = &["name", "route_prefix", "import_path", "runtime_env", "deployments"];
    ordered(config, TOP_KEYS)
}

/// Imports the applications in the Python that runs oxray's workers, which writes their
/// config as JSON; written here as YAML.
fn build(a: BuildArgs) -> Result<ExitCode> {
    let python = oxray_agent::detect::default_python();
    let out = std::process::Command::new(&python)
        .args(["-m", "oxray.serve._build_config", "--app-dir", &a.app_dir])
        .args(&a.import_paths)
        .output()
        .with_context(|| format!("cannot run {python} (set OXRAY_PYTHON to the Python with oxray installed)"))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let hint = if said.contains("No module named 'oxray'") {
            format!("\n{python} has no oxray package: set OXRAY_PYTHON to the Python oxray is installed in")
        } else {
            String::new()
        };
        bail!("building the config failed:\n{}{hint}", said.trim_end());
    }
    let config: Value = serde_json::from_slice(&out.stdout).context("the config built is not JSON")?;
    let text = format!(
        "# This file was generated using the `oxray serve build` command.\n\n{}",
        serde_norway::to_string(&in_ray_order(&config)?).context("cannot write the config as YAML")?
    );
    match a.output_path {
        Some(path) => {
            std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
            println!("Wrote the config to {}.", path.display());
        }
        None => print!("{text}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether the argument names a file (else it is an import path, as Ray decides).
pub(crate) fn is_config_file(arg: &str) -> bool {
    arg.ends_with(".yaml") || arg.ends_with(".yml") || arg.ends_with(".json") || std::path::Path::new(arg).is_file()
}

/// The config to send for an import path and its `key=value` arguments.
pub(crate) fn config_of_import_path(import_path: &str, arguments: &[String], name: Option<&str>) -> Result<Value> {
    let mut args = Map::new();
    for a in arguments {
        let Some((k, v)) = a.split_once('=') else { bail!("builder arguments are key=value, got {a:?}") };
        args.insert(k.to_string(), Value::String(v.to_string()));
    }
    let mut app = json!({"import_path": import_path, "name": name.unwrap_or("default"), "route_prefix": "/"});
    if !args.is_empty() {
        app["args"] = Value::Object(args);
    }
    Ok(json!({"applications": [app]}))
}

pub(crate) fn read_config(path: &str) -> Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
    // JSON is YAML too.
    serde_norway::from_str(&text).with_context(|| format!("{path} is not a valid YAML or JSON config"))
}

async fn start(a: StartArgs) -> Result<ExitCode> {
    let client = JobClient::connect(&a.target).await?;
    let body = json!({
        "http_options": {"host": a.http_host, "port": a.http_port},
        "proxy_location": a.proxy_location,
    });
    let answer = client
        .text(reqwest::Method::PUT, "/api/oxray/serve/http", Some(body))
        .await
        .context("the cluster could not start Serve")?;
    let answer: Value = serde_json::from_str(&answer).context("the cluster's answer is not JSON")?;
    let running = &answer["http_options"];
    if running["host"] != json!(a.http_host) || running["port"] != json!(a.http_port) {
        eprintln!(
            "Serve is already running with HTTP options {}:{}; the options given are ignored.",
            running["host"].as_str().unwrap_or("?"),
            running["port"]
        );
    }
    println!(
        "Serve is running; its HTTP proxies listen on {}:{}.",
        running["host"].as_str().unwrap_or("?"),
        running["port"]
    );
    Ok(ExitCode::SUCCESS)
}

async fn deploy(a: DeployArgs) -> Result<ExitCode> {
    let body = if is_config_file(&a.config_or_import_path) {
        if !a.arguments.is_empty() || a.name.is_some() {
            bail!("arguments and --name go with an import path, not a config file");
        }
        read_config(&a.config_or_import_path)?
    } else {
        config_of_import_path(&a.config_or_import_path, &a.arguments, a.name.as_deref())?
    };
    let client = JobClient::connect(&a.target).await?;
    client.text(reqwest::Method::PUT, APPS, Some(body)).await.context("the cluster refused the config")?;
    println!("Sent deploy request successfully.");
    println!(" * Use `oxray serve status` to check applications' statuses.");
    println!(" * Use `oxray serve config` to see the current application config(s).");
    Ok(ExitCode::SUCCESS)
}

/// Ray's `ServeInstanceDetails` of the cluster.
pub(crate) async fn details(client: &JobClient) -> Result<Value> {
    let text = client.text(reqwest::Method::GET, APPS, None).await?;
    serde_json::from_str(&text).context("the cluster's Serve details are not JSON")
}

/// Ray's `ServeStatus` of one application.
fn app_status(app: &Value) -> Value {
    let deployments: Map<String, Value> = app["deployments"]
        .as_object()
        .map(|ds| {
            ds.iter()
                .map(|(name, d)| {
                    let mut states = Map::new();
                    for r in d["replicas"].as_array().into_iter().flatten() {
                        let state = r["state"].as_str().unwrap_or("STARTING").to_string();
                        let n = states.get(&state).and_then(Value::as_u64).unwrap_or(0);
                        states.insert(state, json!(n + 1));
                    }
                    let status = json!({"status": d["status"], "status_trigger": d["status_trigger"],
                                        "replica_states": states, "message": d["message"]});
                    (name.clone(), status)
                })
                .collect()
        })
        .unwrap_or_default();
    json!({"status": app["status"], "message": app["message"],
           "last_deployed_time_s": app["last_deployed_time_s"], "deployments": deployments})
}

fn status_of(details: &Value, name: Option<&str>) -> Value {
    let apps = details["applications"].as_object().cloned().unwrap_or_default();
    if let Some(name) = name {
        return apps.get(name).map(app_status).unwrap_or_else(
            || json!({"status": "NOT_STARTED", "message": "", "last_deployed_time_s": 0, "deployments": {}}),
        );
    }
    let proxies: Map<String, Value> = details["proxies"]
        .as_object()
        .map(|ps| ps.iter().map(|(id, p)| (id.clone(), p["status"].clone())).collect())
        .unwrap_or_default();
    let applications: Map<String, Value> = apps.iter().map(|(n, a)| (n.clone(), app_status(a))).collect();
    json!({"proxies": proxies, "applications": applications, "target_capacity": details["target_capacity"]})
}

async fn status(a: NameArgs) -> Result<ExitCode> {
    let details = details(&JobClient::connect(&a.target).await?).await?;
    print!("{}", serde_norway::to_string(&status_of(&details, a.name.as_deref()))?);
    Ok(ExitCode::SUCCESS)
}

/// The declarative configs as YAML documents; `None` when there is none.
fn configs_of(details: &Value, name: Option<&str>) -> Result<Option<String>> {
    let apps = details["applications"].as_object().cloned().unwrap_or_default();
    let mut documents = Vec::new();
    for (app_name, app) in &apps {
        if name.is_some_and(|n| n != app_name) || app["deployed_app_config"].is_null() {
            continue;
        }
        documents.push(serde_norway::to_string(&app["deployed_app_config"])?);
    }
    Ok((!documents.is_empty()).then(|| documents.join("---\n")))
}

async fn config(a: NameArgs) -> Result<ExitCode> {
    let details = details(&JobClient::connect(&a.target).await?).await?;
    match configs_of(&details, a.name.as_deref())? {
        Some(text) => print!("{text}"),
        None => println!("No config has been deployed."),
    }
    Ok(ExitCode::SUCCESS)
}

async fn shutdown(a: ShutdownArgs) -> Result<ExitCode> {
    let client = JobClient::connect(&a.target).await?;
    if !a.yes {
        print!("This will shut down Serve on the cluster at {}. Do you want to continue? [y/N] ", client.base());
        std::io::stdout().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            println!("Aborted.");
            return Ok(ExitCode::FAILURE);
        }
    }
    client.text(reqwest::Method::DELETE, APPS, None).await?;
    println!("Serve is shut down: every application was deleted.");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_import_path_becomes_a_one_app_config() {
        let c = config_of_import_path("m:app", &["greeting=hi".into()], Some("x")).unwrap();
        assert_eq!(
            c,
            json!({"applications": [{"import_path": "m:app", "name": "x", "route_prefix": "/", "args": {"greeting": "hi"}}]})
        );
        assert!(config_of_import_path("m:app", &["oops".into()], None).is_err());
        assert!(is_config_file("serve.yaml") && !is_config_file("pkg.mod:app"));
    }

    fn details() -> Value {
        json!({"proxies": {"n1": {"status": "HEALTHY"}}, "target_capacity": null, "applications": {
            "a": {"status": "RUNNING", "message": "", "last_deployed_time_s": 1.5,
                  "deployed_app_config": {"import_path": "m:a"},
                  "deployments": {"D": {"status": "HEALTHY", "status_trigger": "CONFIG_UPDATE_COMPLETED",
                                        "message": "", "replicas": [{"state": "RUNNING"}, {"state": "RUNNING"}]}}},
            "b": {"status": "RUNNING", "message": "", "last_deployed_time_s": 2.0, "deployed_app_config": null,
                  "deployments": {}}}})
    }

    #[test]
    fn status_counts_replicas_by_state() {
        let s = status_of(&details(), None);
        assert_eq!(s["proxies"]["n1"], "HEALTHY");
        assert_eq!(s["applications"]["a"]["deployments"]["D"]["replica_states"], json!({"RUNNING": 2}));
        assert_eq!(status_of(&details(), Some("zzz"))["status"], "NOT_STARTED");
    }

    #[test]
    fn config_prints_only_declarative_apps() {
        assert_eq!(configs_of(&details(), None).unwrap().unwrap(), "import_path: m:a\n");
        assert_eq!(configs_of(&details(), Some("b")).unwrap(), None);
    }
}
