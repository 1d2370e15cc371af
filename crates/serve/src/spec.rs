//! What a caller deploys: an application of deployments, as `serve.run` sends it. The Python
//! parts (the user's class and its bound arguments) are opaque bytes here, made by Python
//! and handed back to Python in each replica.

use crate::autoscale::{ten, thirty, two};
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HttpOptions {
    #[serde(default = "default_host")]
    pub host: String,
    #[serde(default = "default_port")]
    pub port: u16,
    /// Requests running longer get 408 (a request's `x-request-timeout-seconds` overrides it).
    #[serde(default)]
    pub request_timeout_s: Option<f64>,
}

fn default_host() -> String {
    "127.0.0.1".into()
}

fn default_port() -> u16 {
    8000
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self { host: default_host(), port: default_port(), request_timeout_s: None }
    }
}

/// Where Serve runs HTTP proxies (Ray's `ProxyLocation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ProxyLocation {
    /// On the head and on every node that runs a replica.
    #[default]
    EveryNode,
    HeadOnly,
    Disabled,
}

impl ProxyLocation {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "EveryNode" => Some(Self::EveryNode),
            "HeadOnly" => Some(Self::HeadOnly),
            "Disabled" => Some(Self::Disabled),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::EveryNode => "EveryNode",
            Self::HeadOnly => "HeadOnly",
            Self::Disabled => "Disabled",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppSpec {
    /// `None`: reachable through handles only.
    #[serde(default)]
    pub route_prefix: Option<String>,
    pub ingress: String,
    /// The interpreter the replicas run.
    pub python: String,
    #[serde(default)]
    pub http_options: Option<HttpOptions>,
    /// Where proxies run (`serve.start(proxy_location=...)`), taken by the first
    /// application as its HTTP options are.
    #[serde(default)]
    pub proxy_location: Option<ProxyLocation>,
    pub deployments: Vec<DeploymentSpec>,
    /// Whether `POST .../scale` may set its deployments' replica counts.
    #[serde(default)]
    pub external_scaler_enabled: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeploymentSpec {
    pub name: String,
    pub num_replicas: u32,
    #[serde(default = "default_max_ongoing")]
    pub max_ongoing_requests: u32,
    #[serde(default = "unlimited")]
    pub max_queued_requests: i64,
    #[serde(default)]
    pub user_config: Option<serde_json::Value>,
    #[serde(default)]
    pub resources: BTreeMap<String, f64>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default = "ten")]
    pub health_check_period_s: f64,
    #[serde(default = "thirty")]
    pub health_check_timeout_s: f64,
    #[serde(default = "two")]
    pub graceful_shutdown_wait_loop_s: f64,
    #[serde(default = "twenty")]
    pub graceful_shutdown_timeout_s: f64,
    #[serde(default = "twenty_u32")]
    pub max_constructor_retry_count: u32,
    /// Base64 of the pickled user callable and its bound arguments.
    pub definition: String,
    /// Changes when the code, its arguments or its actor options change: replicas of
    /// another version are replaced.
    pub version: String,
    /// The options in effect, in Ray's `DeploymentSchema` shape, for reports.
    #[serde(default)]
    pub config: Option<serde_json::Value>,
    /// With it, `num_replicas` is only the initial count: the load decides.
    #[serde(default)]
    pub autoscaling_config: Option<crate::autoscale::Policy>,
}

fn default_max_ongoing() -> u32 {
    5
}
fn unlimited() -> i64 {
    -1
}
fn twenty() -> f64 {
    20.0
}
fn twenty_u32() -> u32 {
    20
}

impl DeploymentSpec {
    pub fn definition_bytes(&self) -> Result<Vec<u8>, String> {
        base64::engine::general_purpose::STANDARD
            .decode(&self.definition)
            .map_err(|e| format!("deployment {:?}: definition is not base64: {e}", self.name))
    }

    /// Consecutive constructor failures after which the deployment is DEPLOY_FAILED: three
    /// per replica, at most `max_constructor_retry_count`, as Ray counts them.
    pub fn failure_limit(&self) -> u32 {
        (self.num_replicas.max(1) * 3).min(self.max_constructor_retry_count.max(1))
    }
}

/// Ray's route prefix rules: starts with "/", no trailing "/" except the root, no braces.
pub fn check_route_prefix(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') {
        return Err(format!("route_prefix {prefix:?} must start with \"/\""));
    }
    if prefix.len() > 1 && prefix.ends_with('/') {
        return Err(format!("route_prefix {prefix:?} must not end with \"/\" unless it is \"/\""));
    }
    if prefix.contains('{') || prefix.contains('}') {
        return Err(format!("route_prefix {prefix:?} may not contain wildcards"));
    }
    Ok(())
}

fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{what} name must not be empty"));
    }
    if name.contains('#') {
        return Err(format!("{what} name {name:?} must not contain '#'"));
    }
    Ok(())
}

fn positive(deployment: &str, field: &str, value: f64) -> Result<(), String> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(format!("deployment {deployment:?}: {field} must be a positive number, got {value}"))
    }
}

/// Checks one application on its own; names and route prefixes shared with other
/// applications are the controller's to check.
pub fn validate(app: &str, spec: &AppSpec) -> Result<(), String> {
    check_name("application", app)?;
    if let Some(prefix) = &spec.route_prefix {
        check_route_prefix(prefix)?;
    }
    if spec.python.is_empty() {
        return Err("python (the interpreter replicas run) must not be empty".into());
    }
    let mut seen = BTreeSet::new();
    for d in &spec.deployments {
        check_name("deployment", &d.name)?;
        if !seen.insert(d.name.as_str()) {
            return Err(format!("deployment name {:?} is used twice in application {app:?}", d.name));
        }
        if d.max_ongoing_requests == 0 {
            return Err(format!("deployment {:?}: max_ongoing_requests must be at least 1", d.name));
        }
        if d.max_queued_requests < -1 || d.max_queued_requests == 0 {
            return Err(format!("deployment {:?}: max_queued_requests must be -1 or at least 1", d.name));
        }
        for (field, value) in [
            ("health_check_period_s", d.health_check_period_s),
            ("health_check_timeout_s", d.health_check_timeout_s),
            ("graceful_shutdown_wait_loop_s", d.graceful_shutdown_wait_loop_s),
            ("graceful_shutdown_timeout_s", d.graceful_shutdown_timeout_s),
        ] {
            positive(&d.name, field, value)?;
        }
        if let Some((name, amount)) = d.resources.iter().find(|(_, v)| !v.is_finite() || **v < 0.0) {
            return Err(format!(
                "deployment {:?}: resource {name} must be a non-negative number, got {amount}",
                d.name
            ));
        }
        d.definition_bytes()?;
        if d.version.is_empty() {
            return Err(format!("deployment {:?}: version must not be empty", d.name));
        }
    }
    if !seen.contains(spec.ingress.as_str()) {
        return Err(format!("ingress {:?} is not one of the application's deployments", spec.ingress));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn deployment(name: &str) -> DeploymentSpec {
        serde_json::from_value(serde_json::json!({
            "name": name, "num_replicas": 1, "definition": "AAEC", "version": "v1"
        }))
        .unwrap()
    }

    fn app(deployments: Vec<DeploymentSpec>) -> AppSpec {
        AppSpec {
            route_prefix: Some("/".into()),
            ingress: deployments[0].name.clone(),
            python: "python3".into(),
            http_options: None,
            proxy_location: None,
            deployments,
            external_scaler_enabled: false,
        }
    }

    #[test]
    fn defaults_are_rays() {
        let d = deployment("A");
        assert_eq!((d.max_ongoing_requests, d.max_queued_requests), (5, -1));
        assert_eq!((d.health_check_period_s, d.health_check_timeout_s), (10.0, 30.0));
        assert_eq!((d.graceful_shutdown_wait_loop_s, d.graceful_shutdown_timeout_s), (2.0, 20.0));
        assert_eq!(d.definition_bytes().unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn route_prefixes_follow_rays_rules() {
        assert!(check_route_prefix("/").is_ok());
        assert!(check_route_prefix("/a/b").is_ok());
        assert!(check_route_prefix("a").unwrap_err().contains("start with"));
        assert!(check_route_prefix("/a/").unwrap_err().contains("end with"));
        assert!(check_route_prefix("/{x}").unwrap_err().contains("wildcards"));
    }

    #[test]
    fn failure_limit_is_three_per_replica_capped() {
        let mut d = deployment("A");
        assert_eq!(d.failure_limit(), 3);
        d.num_replicas = 10;
        assert_eq!(d.failure_limit(), 20);
        d.max_constructor_retry_count = 5;
        assert_eq!(d.failure_limit(), 5);
    }

    #[test]
    fn validation_names_the_field() {
        assert!(validate("default", &app(vec![deployment("A")])).is_ok());
        assert!(validate("a#b", &app(vec![deployment("A")])).unwrap_err().contains("'#'"));
        assert!(validate("x", &app(vec![deployment("A"), deployment("A")])).unwrap_err().contains("twice"));
        let mut bad = deployment("A");
        bad.max_ongoing_requests = 0;
        assert!(validate("x", &app(vec![bad])).unwrap_err().contains("max_ongoing_requests"));
        let mut bad = deployment("A");
        bad.health_check_period_s = 0.0;
        assert!(validate("x", &app(vec![bad])).unwrap_err().contains("health_check_period_s"));
        let mut bad = deployment("A");
        bad.definition = "not base64!".into();
        assert!(validate("x", &app(vec![bad])).unwrap_err().contains("base64"));
        let mut wrong_ingress = app(vec![deployment("A")]);
        wrong_ingress.ingress = "B".into();
        assert!(validate("x", &wrong_ingress).unwrap_err().contains("ingress"));
    }
}
