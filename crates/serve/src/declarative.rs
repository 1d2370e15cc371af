//! The declarative config (Ray's `ServeDeploySchema`, as `serve deploy` and KubeRay's
//! RayService send it): checked here, before anything is built. Unknown keys are ignored,
//! as Ray ignores them; each application's config is kept exactly as submitted, since Ray
//! reports it back as `deployed_app_config`.

use crate::spec::{check_route_prefix, HttpOptions};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashSet};

/// What a PUT asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployConfig {
    pub proxy_location: String,
    pub http_options: HttpOptions,
    /// The `http_options` object as given (Ray reports it back with its defaults filled).
    pub http_given: Map<String, Value>,
    pub target_capacity: Option<f64>,
    pub applications: Vec<AppConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AppConfig {
    pub name: String,
    pub route_prefix: Option<String>,
    pub runtime_env: Map<String, Value>,
    /// Exactly as submitted.
    pub raw: Value,
}

const PROXY_LOCATIONS: [&str; 3] = ["EveryNode", "HeadOnly", "Disabled"];

fn object<'a>(value: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    value.as_object().ok_or_else(|| format!("{what} must be an object"))
}

/// Ray's rule for import paths: `module:attr` or `module.attr`, at most one colon, no
/// leading or trailing separator.
pub fn check_import_path(path: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("Got invalid import path \"{path}\": {why}"));
    if path.trim().is_empty() {
        return bad("it is empty");
    }
    if path.matches(':').count() > 1 {
        return bad("an import path may contain at most one colon");
    }
    if path.starts_with([':', '.']) || path.ends_with([':', '.']) {
        return bad("an import path may not start or end with a colon or a period");
    }
    if !path.contains([':', '.']) {
        return bad("it must name a module and an attribute, as 'module.submodule:attribute'");
    }
    Ok(())
}

fn http_options(given: Option<&Value>) -> Result<(HttpOptions, Map<String, Value>), String> {
    let given = match given {
        None | Some(Value::Null) => Map::new(),
        Some(v) => object(v, "http_options")?.clone(),
    };
    // A config file's default host is every interface (serve.run's is loopback).
    let mut options = HttpOptions { host: "0.0.0.0".into(), ..HttpOptions::default() };
    if let Some(host) = given.get("host") {
        options.host = host.as_str().ok_or("http_options.host must be a string")?.to_string();
    }
    if let Some(port) = given.get("port") {
        options.port = port
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| format!("http_options.port must be a port number, got {port}"))?;
    }
    match given.get("request_timeout_s") {
        None | Some(Value::Null) => {}
        Some(v) => {
            let seconds = v.as_f64().filter(|s| *s > 0.0);
            options.request_timeout_s =
                Some(seconds.ok_or_else(|| format!("http_options.request_timeout_s must be > 0, got {v}"))?);
        }
    }
    Ok((options, given))
}

fn application(value: &Value, index: usize) -> Result<AppConfig, String> {
    let app = object(value, &format!("applications[{index}]"))?;
    for key in ["host", "port"] {
        if app.contains_key(key) {
            return Err(format!(
                "Specifying {key} in an application's config is not allowed: every application shares \
                 the proxy's, set in the top-level http_options."
            ));
        }
    }
    let name = match app.get("name") {
        None => "default".to_string(),
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(other) => return Err(format!("applications[{index}].name must be a non-empty string, got {other}")),
    };
    let import_path = match app.get("import_path") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(format!("application {name:?}: import_path must be a string, got {other}")),
        None => return Err(format!("application {name:?}: import_path is required")),
    };
    check_import_path(&import_path).map_err(|e| format!("application {name:?}: {e}"))?;
    let route_prefix = match app.get("route_prefix") {
        None => Some("/".to_string()),
        Some(Value::Null) => None,
        Some(Value::String(p)) => {
            check_route_prefix(p).map_err(|e| format!("application {name:?}: {e}"))?;
            Some(p.clone())
        }
        Some(other) => return Err(format!("application {name:?}: route_prefix must be a string or null, got {other}")),
    };
    let runtime_env = match app.get("runtime_env") {
        None | Some(Value::Null) => Map::new(),
        Some(v) => object(v, &format!("application {name:?}: runtime_env"))?.clone(),
    };
    match app.get("args") {
        None | Some(Value::Null) | Some(Value::Object(_)) => {}
        Some(other) => return Err(format!("application {name:?}: args must be an object, got {other}")),
    }
    if let Some(deployments) = app.get("deployments") {
        let list = deployments.as_array().ok_or_else(|| format!("application {name:?}: deployments must be a list"))?;
        let mut seen = HashSet::new();
        for d in list {
            let dep_name = d
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| format!("application {name:?}: every entry of deployments needs a name, got {d}"))?;
            if !seen.insert(dep_name) {
                return Err(format!("application {name:?}: deployment {dep_name:?} is listed twice"));
            }
        }
    }
    Ok(AppConfig { name, route_prefix, runtime_env, raw: value.clone() })
}

/// Checks a PUT body; the error is the text of the 400 answer.
pub fn parse(body: &[u8]) -> Result<DeployConfig, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("the config is not valid JSON: {e}"))?;
    let top = object(&value, "the config")?;
    let proxy_location = match top.get("proxy_location") {
        None | Some(Value::Null) => "EveryNode".to_string(),
        Some(Value::String(s)) if PROXY_LOCATIONS.contains(&s.as_str()) => s.clone(),
        Some(other) => return Err(format!("proxy_location must be one of {PROXY_LOCATIONS:?}, got {other}")),
    };
    let (http_options, http_given) = http_options(top.get("http_options"))?;
    let target_capacity = match top.get("target_capacity") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_f64()
                .filter(|c| (0.0..=100.0).contains(c))
                .ok_or_else(|| format!("target_capacity must be between 0 and 100, got {v}"))?,
        ),
    };
    let list = match top.get("applications") {
        Some(Value::Array(list)) => list,
        Some(_) => return Err("applications must be a list".into()),
        None => return Err("applications is required".into()),
    };
    let applications: Vec<AppConfig> =
        list.iter().enumerate().map(|(i, a)| application(a, i)).collect::<Result<_, _>>()?;
    let mut names = HashSet::new();
    let mut prefixes = HashSet::new();
    for app in &applications {
        if !names.insert(app.name.as_str()) {
            return Err(format!("Found multiple configs for application \"{}\".", app.name));
        }
        if let Some(prefix) = &app.route_prefix {
            if !prefixes.insert(prefix.as_str()) {
                return Err(format!("Found duplicate route prefix \"{prefix}\" across applications."));
            }
        }
    }
    Ok(DeployConfig { proxy_location, http_options, http_given, target_capacity, applications })
}

/// The environment of the process that builds an application (and of what it starts,
/// which inherits it as its job's runtime_env): `env_vars` as variables, the rest for the
/// node to prepare, as a driver would send them.
pub fn builder_env(runtime_env: &Map<String, Value>) -> Result<BTreeMap<String, String>, String> {
    let mut env = BTreeMap::new();
    if let Some(vars) = runtime_env.get("env_vars").filter(|v| !v.is_null()) {
        for (k, v) in object(vars, "runtime_env.env_vars")? {
            let v = v.as_str().ok_or_else(|| format!("runtime_env.env_vars[{k:?}] must be a string"))?;
            env.insert(k.clone(), v.to_string());
        }
    }
    let rest: Map<String, Value> = ["working_dir", "py_modules", "pip"]
        .into_iter()
        .filter_map(|k| runtime_env.get(k).filter(|v| !v.is_null()).map(|v| (k.to_string(), v.clone())))
        .collect();
    if !rest.is_empty() {
        env.insert(RUNTIME_ENV_KEY.into(), Value::Object(rest.clone()).to_string());
    }
    if !runtime_env.is_empty() {
        let mut inherited = rest;
        inherited.insert("env_vars".into(), runtime_env.get("env_vars").cloned().unwrap_or(Value::Object(Map::new())));
        env.insert(JOB_RUNTIME_ENV.into(), Value::Object(inherited).to_string());
    }
    Ok(env)
}

/// Where a lease's runtime_env rides among its variables (the core's convention).
const RUNTIME_ENV_KEY: &str = "=runtime_env";
/// What a worker reads as its job's runtime_env, which its tasks and actors inherit.
const JOB_RUNTIME_ENV: &str = "OXRAY_JOB_RUNTIME_ENV";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_json(v: Value) -> Result<DeployConfig, String> {
        parse(v.to_string().as_bytes())
    }

    #[test]
    fn defaults_fill_what_is_left_out() {
        let c = parse_json(json!({"applications": [{"import_path": "m:app"}]})).unwrap();
        assert_eq!(c.proxy_location, "EveryNode");
        assert_eq!((c.http_options.host.as_str(), c.http_options.port), ("0.0.0.0", 8000));
        assert_eq!(c.applications[0].name, "default");
        assert_eq!(c.applications[0].route_prefix.as_deref(), Some("/"));
        assert_eq!(c.applications[0].raw, json!({"import_path": "m:app"}));
    }

    #[test]
    fn a_null_route_prefix_means_no_http() {
        let c = parse_json(json!({"applications": [{"import_path": "m.app", "route_prefix": null}]})).unwrap();
        assert_eq!(c.applications[0].route_prefix, None);
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        let cases = [
            (json!({}), "applications is required"),
            (json!({"applications": [{}]}), "import_path is required"),
            (json!({"applications": [{"import_path": "a:b:c"}]}), "at most one colon"),
            (json!({"applications": [{"import_path": "a.b:"}]}), "start or end"),
            (json!({"applications": [{"import_path": "m:a", "name": ""}]}), "non-empty"),
            (json!({"applications": [{"import_path": "m:a", "port": 1}]}), "http_options"),
            (json!({"applications": [{"import_path": "m:a", "route_prefix": "x"}]}), "must start with"),
            (json!({"applications": [{"import_path": "m:a"}, {"import_path": "m:b"}]}), "multiple configs"),
            (
                json!({"applications": [{"import_path": "m:a", "name": "a"}, {"import_path": "m:b", "name": "b"}]}),
                "duplicate route prefix",
            ),
            (json!({"proxy_location": "Nowhere", "applications": []}), "proxy_location"),
            (json!({"http_options": {"port": 70000}, "applications": []}), "port"),
            (json!({"applications": [{"import_path": "m:a", "deployments": [{"num_replicas": 2}]}]}), "needs a name"),
            (json!({"target_capacity": 101, "applications": []}), "target_capacity"),
        ];
        for (config, expected) in cases {
            let err = parse_json(config.clone()).unwrap_err();
            assert!(err.contains(expected), "{config}: {err}");
        }
        assert!(parse(b"not json").unwrap_err().contains("not valid JSON"));
    }

    #[test]
    fn unknown_keys_are_ignored() {
        let c = parse_json(json!({"grpc_options": {"port": 9000}, "logging_config": {}, "applications": [
            {"import_path": "m:a", "external_scaler_enabled": false, "whatever": 1}]}));
        assert!(c.is_ok());
    }

    #[test]
    fn the_builder_inherits_the_runtime_env_as_its_job_s() {
        let env =
            builder_env(json!({"working_dir": "gcs://_ray_pkg_x.zip", "env_vars": {"A": "1"}}).as_object().unwrap())
                .unwrap();
        assert_eq!(env["A"], "1");
        assert_eq!(env[RUNTIME_ENV_KEY], r#"{"working_dir":"gcs://_ray_pkg_x.zip"}"#);
        let job: Value = serde_json::from_str(&env[JOB_RUNTIME_ENV]).unwrap();
        assert_eq!(job, json!({"working_dir": "gcs://_ray_pkg_x.zip", "env_vars": {"A": "1"}}));
        assert!(builder_env(&Map::new()).unwrap().is_empty());
        assert!(builder_env(json!({"env_vars": {"A": 1}}).as_object().unwrap()).is_err());
    }
}
