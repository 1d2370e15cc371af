//! `rayStartParams` as flags of `oxray start`.

use std::collections::BTreeMap;

use crate::names::{PORT_DASHBOARD, PORT_GCS};

/// Flags `oxray start` takes with a value.
const VALUE_FLAGS: &[&str] = &[
    "num-cpus",
    "num-gpus",
    "memory",
    "object-store-memory",
    "resources",
    "labels",
    "port",
    "dashboard-host",
    "dashboard-port",
    "temp-dir",
    "node-death-timeout-s",
];

/// Ray's flags with no meaning here (oxray has no separate dashboard agent, worker port ranges
/// or Redis) or that the operator sets itself; KubeRay manifests carry them, so they are dropped
/// rather than refused.
pub const IGNORED: &[&str] = &[
    "address",
    "block",
    "head",
    "node-ip-address",
    "node-name",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "dashboard-grpc-port",
    "metrics-export-port",
    "include-dashboard",
    "disable-usage-stats",
    "log-color",
    "log-style",
    "verbose",
    "min-worker-port",
    "max-worker-port",
    "worker-port-list",
    "node-manager-port",
    "object-manager-port",
    "runtime-env-agent-port",
    "ray-client-server-port",
    "redis-password",
    "redis-username",
    "num-redis-shards",
    "plasma-directory",
    "object-spilling-directory",
    "system-config",
    "no-monitor",
    "autoscaling-config",
    "enable-object-reconstruction",
    "ray-debugger-external",
    "tracing-startup-hook",
];

/// The flags for the parameters, in a stable order, or the parameters that `oxray start`
/// does not know.
pub fn start_flags(params: &BTreeMap<String, String>) -> Result<Vec<String>, String> {
    let mut flags = Vec::new();
    let mut unknown = Vec::new();
    for (name, value) in params {
        let name = name.trim_start_matches('-');
        if IGNORED.contains(&name) {
            continue;
        }
        if !VALUE_FLAGS.contains(&name) {
            unknown.push(name.to_string());
            continue;
        }
        flags.push(format!("--{name}"));
        flags.push(unquote(value));
    }
    if unknown.is_empty() {
        Ok(flags)
    } else {
        Err(format!(
            "rayStartParams has parameters oxray start does not take: {}; it takes {}",
            unknown.join(", "),
            VALUE_FLAGS.join(", ")
        ))
    }
}

/// A start parameter, written with or without its leading dashes.
pub fn param<'a>(params: &'a BTreeMap<String, String>, name: &str) -> Option<&'a String> {
    params.iter().find(|(key, _)| key.trim_start_matches('-') == name).map(|(_, value)| value)
}

/// A node's labels: `rayStartParams.labels` (`k=v,k2=v2`, or a JSON object), and a group's
/// `labels`, which win.
pub fn node_labels(
    params: &BTreeMap<String, String>,
    labels: &Option<BTreeMap<String, String>>,
) -> Result<BTreeMap<String, String>, String> {
    let mut all = BTreeMap::new();
    if let Some(text) = param(params, "labels").map(|t| unquote(t)) {
        if text.trim_start().starts_with('{') {
            all = serde_json::from_str(&text).map_err(|e| format!("rayStartParams.labels: {e}"))?;
            // They are passed on as `k=v,k2=v2`.
            if let Some((k, v)) = all.iter().find(|(k, v)| format!("{k}{v}").contains([',', '='])) {
                return Err(format!("rayStartParams.labels: {k}={v}: a label may not hold ',' or '='"));
            }
        } else {
            for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let (k, v) = pair
                    .split_once('=')
                    .filter(|(k, _)| !k.trim().is_empty())
                    .ok_or_else(|| format!("rayStartParams.labels: {pair:?} is not key=value"))?;
                all.insert(k.trim().to_string(), v.trim().to_string());
            }
        }
    }
    all.extend(labels.clone().unwrap_or_default());
    Ok(all)
}

/// A node's custom resources: `rayStartParams.resources` (a JSON object) and a group's
/// `resources` (quantities), which win.
pub fn node_resources(
    params: &BTreeMap<String, String>,
    resources: &Option<BTreeMap<String, String>>,
) -> Result<BTreeMap<String, f64>, String> {
    let mut all: BTreeMap<String, f64> = match param(params, "resources") {
        Some(text) => serde_json::from_str(&unquote(text))
            .map_err(|e| format!("rayStartParams.resources: not a JSON object of amounts: {e}"))?,
        None => BTreeMap::new(),
    };
    for (name, amount) in resources.iter().flatten() {
        let value =
            crate::quantity::parse(amount).ok_or_else(|| format!("resources.{name}: {amount:?} is not a quantity"))?;
        all.insert(name.clone(), value);
    }
    Ok(all)
}

/// KubeRay manifests quote JSON values twice (`'"{\"GPU\": 1}"'`), because Ray's command is
/// a shell line; the operator passes arguments without a shell.
pub fn unquote(value: &str) -> String {
    let value = value.trim();
    let inner = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')));
    match inner {
        Some(inner) => inner.replace("\\\"", "\""),
        None => value.to_string(),
    }
}

fn port(params: &BTreeMap<String, String>, name: &str, default: i32) -> Result<i32, String> {
    match params.get(name) {
        None => Ok(default),
        Some(text) => unquote(text)
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .map(i32::from)
            .ok_or_else(|| format!("rayStartParams.{name} must be a port number, got {text:?}")),
    }
}

/// The head's control port, which workers join.
pub fn gcs_port(params: &BTreeMap<String, String>) -> Result<i32, String> {
    port(params, "port", PORT_GCS)
}

pub fn dashboard_port(params: &BTreeMap<String, String>) -> Result<i32, String> {
    port(params, "dashboard-port", PORT_DASHBOARD)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn known_parameters_become_flags_and_ray_only_ones_are_dropped() {
        let p = params(&[("num-cpus", "2"), ("dashboard-agent-listen-port", "52365"), ("block", "true")]);
        assert_eq!(start_flags(&p).unwrap(), vec!["--num-cpus", "2"]);
    }

    #[test]
    fn json_quoted_for_a_shell_is_unquoted() {
        let p = params(&[("resources", r#""{\"accel\": 1}""#)]);
        assert_eq!(start_flags(&p).unwrap(), vec!["--resources", r#"{"accel": 1}"#]);
        assert_eq!(unquote("'0'"), "0");
    }

    #[test]
    fn unknown_parameters_are_named_in_the_error() {
        let err = start_flags(&params(&[("num-cpu", "2")])).unwrap_err();
        assert!(err.contains("num-cpu;"), "{err}");
    }

    #[test]
    fn ports_default_and_are_checked() {
        assert_eq!(gcs_port(&params(&[])).unwrap(), 6379);
        assert_eq!(gcs_port(&params(&[("port", "6380")])).unwrap(), 6380);
        assert!(dashboard_port(&params(&[("dashboard-port", "x")])).is_err());
        assert!(gcs_port(&params(&[("port", "0")])).is_err());
    }
}
