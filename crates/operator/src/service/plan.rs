//! RayService decisions, without IO: the Serve config to send (from `serveConfigV2`),
//! whether the head needs it again, and the statuses and conditions to report from what
//! the heads say.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::crd::service::{AppStatus, DeploymentStatus};
use crate::crd::Condition;

/// `serveConfigV2` (YAML) as the JSON body of `PUT /api/serve/applications/`.
pub fn serve_config(yaml: &str) -> Result<Value, String> {
    let value: Value = serde_norway::from_str(yaml).map_err(|e| format!("serveConfigV2 is not valid YAML: {e}"))?;
    match value.get("applications") {
        Some(Value::Array(_)) => Ok(value),
        _ => Err("serveConfigV2 needs a list of applications".into()),
    }
}

/// The port Serve's HTTP proxy listens on.
pub fn serve_port(config: &Value) -> i32 {
    config.pointer("/http_options/port").and_then(Value::as_i64).and_then(|p| i32::try_from(p).ok()).unwrap_or(8000)
}

/// The port the Serve Service leads to: where the running Serve listens, as the head's
/// details say (a running Serve keeps its HTTP options, as Ray's does), else where the
/// config asks for.
pub fn serve_port_in_force(details: &Value, config: &Value) -> i32 {
    details
        .pointer("/http_options/port")
        .and_then(Value::as_i64)
        .and_then(|p| i32::try_from(p).ok())
        .unwrap_or_else(|| serve_port(config))
}

/// Whether the head runs other declarative applications than `wanted` lists, or any with
/// another config than listed: then the config is sent (again). Sending an unchanged config
/// is harmless, but each PUT of a changed app rebuilds it.
pub fn needs_put(wanted: &Value, details: &Value) -> bool {
    let apps = details.get("applications").and_then(Value::as_object);
    let wanted_apps = wanted.get("applications").and_then(Value::as_array).cloned().unwrap_or_default();
    let deployed = apps.map(|a| a.len()).unwrap_or(0);
    if deployed != wanted_apps.len() {
        return true;
    }
    wanted_apps.iter().any(|app| {
        let name = app.get("name").and_then(Value::as_str).unwrap_or("default");
        apps.and_then(|a| a.get(name)).and_then(|a| a.get("deployed_app_config")) != Some(app)
    })
}

/// Each application's status and its deployments', as KubeRay reports them.
pub fn application_statuses(details: &Value) -> BTreeMap<String, AppStatus> {
    let Some(apps) = details.get("applications").and_then(Value::as_object) else { return BTreeMap::new() };
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("").to_string();
    apps.iter()
        .map(|(name, app)| {
            let deployments = app
                .get("deployments")
                .and_then(Value::as_object)
                .map(|ds| {
                    ds.iter()
                        .map(|(d, dep)| {
                            let status = DeploymentStatus {
                                status: text(dep, "status"),
                                message: Some(text(dep, "message")).filter(|m| !m.is_empty()),
                            };
                            (d.clone(), status)
                        })
                        .collect()
                })
                .unwrap_or_default();
            let status = AppStatus {
                status: text(app, "status"),
                message: Some(text(app, "message")).filter(|m| !m.is_empty()),
                serve_deployment_statuses: deployments,
            };
            (name.clone(), status)
        })
        .collect()
}

/// A pod of the service's cluster, as the Serve Service's membership sees it.
pub struct ServePod<'a> {
    pub name: &'a str,
    pub ip: &'a str,
    pub head: bool,
}

/// What each pod's `ray.io/serve` label should be: "true" where a healthy Serve proxy runs
/// at the pod's address (the head's too, unless `exclude_head`), else "false". KubeRay asks
/// each pod's `/-/healthz`; the head lists the proxies it knows, with their addresses.
pub fn serve_labels<'a>(pods: &[ServePod<'a>], details: &Value, exclude_head: bool) -> Vec<(&'a str, &'static str)> {
    let healthy: Vec<&str> = details
        .get("proxies")
        .and_then(Value::as_object)
        .map(|proxies| {
            proxies
                .values()
                .filter(|p| p.get("status").and_then(Value::as_str) == Some("HEALTHY"))
                .filter_map(|p| p.get("node_ip").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    // Pods on the head's address (host network) answer with the head's proxy.
    let head_ip = pods.iter().find(|p| p.head).map(|p| p.ip).filter(|ip| !ip.is_empty());
    pods.iter()
        .map(|pod| {
            let left_out = pod.ip.is_empty() || (exclude_head && (pod.head || Some(pod.ip) == head_ip));
            let serves = !left_out && healthy.contains(&pod.ip);
            (pod.name, if serves { "true" } else { "false" })
        })
        .collect()
}

/// The Serve Service's endpoints: the addresses of the pods labelled to serve.
pub fn endpoints(pods: &[ServePod], labels: &[(&str, &str)]) -> i32 {
    let serving: std::collections::BTreeSet<&str> =
        pods.iter().zip(labels).filter(|(_, (_, value))| *value == "true").map(|(pod, _)| pod.ip).collect();
    serving.len() as i32
}

/// Serving: every application of the config is RUNNING.
pub fn all_running(wanted: &Value, statuses: &BTreeMap<String, AppStatus>) -> bool {
    let names: Vec<&str> = wanted
        .get("applications")
        .and_then(Value::as_array)
        .map(|apps| apps.iter().map(|a| a.get("name").and_then(Value::as_str).unwrap_or("default")).collect())
        .unwrap_or_default();
    !names.is_empty() && names.iter().all(|n| statuses.get(*n).is_some_and(|s| s.status == "RUNNING"))
}

/// The Serve Service's port, as the operator makes it.
pub fn serve_ports(port: i32) -> Value {
    serde_json::json!([{"name": "serve", "port": port, "targetPort": port, "protocol": "TCP"}])
}

/// The merge patch that brings an existing Serve Service (`spec`, as JSON) to `selector` and
/// `port`; None when it is right. Selector keys no longer wanted are removed by null, as a
/// merge patch merges maps; the ports list is replaced whole.
pub fn serve_service_patch(spec: &Value, selector: &BTreeMap<String, String>, port: i32) -> Option<Value> {
    let now: BTreeMap<String, String> = serde_json::from_value(spec["selector"].clone()).unwrap_or_default();
    let port_now = |field: &str| spec["ports"][0][field].as_i64();
    let ports_right = spec["ports"].as_array().is_some_and(|p| p.len() == 1)
        && port_now("port") == Some(port.into())
        && (spec["ports"][0]["targetPort"].is_null() || port_now("targetPort") == Some(port.into()));
    let mut patch = serde_json::Map::new();
    if now != *selector {
        let mut keys: serde_json::Map<String, Value> = now.keys().map(|k| (k.clone(), Value::Null)).collect();
        keys.extend(selector.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))));
        patch.insert("selector".into(), Value::Object(keys));
    }
    if !ports_right {
        patch.insert("ports".into(), serve_ports(port));
    }
    (!patch.is_empty()).then(|| serde_json::json!({ "spec": patch }))
}

/// What the `Ready` condition follows.
pub struct Readiness {
    /// What keeps the config from running where it should (a refused or invalid config, a
    /// head that does not answer): its reason and message.
    pub problem: Option<(&'static str, String)>,
    /// A cluster is active (serves, or has served).
    pub serving: bool,
    /// The config's applications all run on the active cluster (taken as so while another
    /// cluster is prepared: the active one runs the previous config).
    pub apps_running: bool,
    pub endpoints: i32,
}

impl Readiness {
    fn ready_condition(&self) -> Condition {
        let (status, reason, message) = match &self.problem {
            Some((reason, message)) => ("False", *reason, message.clone()),
            None if !self.serving => ("False", "Initializing", "the first RayCluster is being prepared".into()),
            None if !self.apps_running => {
                ("False", "ZeroServeEndpoints", "the Serve applications are not all RUNNING".into())
            }
            None if self.endpoints == 0 => {
                ("False", "ZeroServeEndpoints", "no pod of the cluster runs a healthy Serve proxy".into())
            }
            None => ("True", "NonZeroServeEndpoints", String::new()),
        };
        condition("Ready", status, reason, message)
    }

    pub fn ready(&self) -> bool {
        self.ready_condition().status == "True"
    }

    /// `Ready`, then `UpgradeInProgress` (with what the pending cluster waits for).
    pub fn conditions(&self, active: Option<&str>, pending: Option<&str>, waiting: Option<String>) -> Vec<Condition> {
        let upgrade = match (active, pending) {
            (Some(active), Some(pending)) => {
                let mut message = format!("RayCluster {pending} is being prepared to replace {active}");
                if let Some(why) = waiting.filter(|w| !w.is_empty()) {
                    message = format!("{message}: {why}");
                }
                condition("UpgradeInProgress", "True", "BothActivePendingClustersExist", message)
            }
            (Some(_), None) => condition("UpgradeInProgress", "False", "NoPendingCluster", String::new()),
            (None, _) => condition("UpgradeInProgress", "False", "Initializing", String::new()),
        };
        vec![self.ready_condition(), upgrade]
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        last_transition_time: None,
        observed_generation: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_existing_serve_service_follows_the_selector_and_the_serve_port() {
        let selector =
            BTreeMap::from([("ray.io/cluster".to_string(), "c".to_string()), ("ray.io/serve".into(), "true".into())]);
        let right = json!({"selector": {"ray.io/cluster": "c", "ray.io/serve": "true"}, "ports": serve_ports(8000)});
        assert_eq!(serve_service_patch(&right, &selector, 8000), None);
        let moved = serve_service_patch(&right, &selector, 9000).unwrap();
        assert_eq!(moved, json!({"spec": {"ports": serve_ports(9000)}}));
        let old = json!({"selector": {"ray.io/node-type": "head", "ray.io/cluster": "c"}, "ports": serve_ports(8000)});
        let patch = serve_service_patch(&old, &selector, 8000).unwrap();
        assert_eq!(
            patch["spec"]["selector"],
            json!({"ray.io/node-type": null, "ray.io/cluster": "c", "ray.io/serve": "true"})
        );
        assert!(patch["spec"].get("ports").is_none());
        let config = json!({"http_options": {"port": 9000}});
        assert_eq!(serve_port_in_force(&json!({"http_options": {"port": 8000}}), &config), 8000, "what runs");
        assert_eq!(serve_port_in_force(&json!({"http_options": null}), &config), 9000, "nothing runs yet");
    }

    const YAML: &str = "applications:\n  - name: fruit\n    import_path: fruit.app\n    route_prefix: /fruit\n    deployments:\n      - name: Mango\n        user_config: {price: 3}\n";

    #[test]
    fn the_yaml_becomes_the_json_body() {
        let config = serve_config(YAML).unwrap();
        assert_eq!(config["applications"][0]["deployments"][0]["user_config"], json!({"price": 3}));
        assert_eq!(serve_port(&config), 8000);
        assert_eq!(serve_port(&json!({"http_options": {"port": 8123}})), 8123);
        assert!(serve_config("applications: [").unwrap_err().contains("not valid YAML"));
        assert!(serve_config("proxy_location: EveryNode").unwrap_err().contains("list of applications"));
    }

    #[test]
    fn a_config_is_sent_until_the_head_runs_exactly_it() {
        let wanted = serve_config(YAML).unwrap();
        let app = wanted["applications"][0].clone();
        assert!(needs_put(&wanted, &json!({"applications": {}})));
        assert!(!needs_put(&wanted, &json!({"applications": {"fruit": {"deployed_app_config": app.clone()}}})));
        let mut changed = app.clone();
        changed["deployments"][0]["user_config"]["price"] = json!(4);
        assert!(needs_put(&wanted, &json!({"applications": {"fruit": {"deployed_app_config": changed}}})));
        assert!(needs_put(
            &wanted,
            &json!({"applications": {"fruit": {"deployed_app_config": app}, "old": {"deployed_app_config": {}}}})
        ));
    }

    #[test]
    fn pods_serve_where_a_healthy_proxy_runs_and_the_head_can_be_left_out() {
        let details = json!({"proxies": {
            "n1": {"node_ip": "10.0.0.1", "status": "HEALTHY"},
            "n2": {"node_ip": "10.0.0.2", "status": "HEALTHY"},
            "n3": {"node_ip": "10.0.0.3", "status": "UNHEALTHY"}}});
        let pod = |name, ip, head| ServePod { name, ip, head };
        let pods = [
            pod("head", "10.0.0.1", true),
            pod("w1", "10.0.0.2", false),
            pod("w2", "10.0.0.3", false),
            pod("w3", "", false),
        ];
        let labels = serve_labels(&pods, &details, false);
        assert_eq!(labels, [("head", "true"), ("w1", "true"), ("w2", "false"), ("w3", "false")]);
        assert_eq!(serve_labels(&pods, &details, true)[0], ("head", "false"));
        assert_eq!(endpoints(&pods, &labels), 2);
        // A pod sharing the head's address (host network) is the head's proxy too.
        let shared = [pod("head", "10.0.0.1", true), pod("w1", "10.0.0.1", false)];
        assert_eq!(serve_labels(&shared, &details, false), [("head", "true"), ("w1", "true")]);
        assert_eq!(endpoints(&shared, &serve_labels(&shared, &details, false)), 1);
        assert!(serve_labels(&shared, &details, true).iter().all(|(_, v)| *v == "false"));
        assert!(serve_labels(&pods, &json!({}), false).iter().all(|(_, v)| *v == "false"));
    }

    #[test]
    fn statuses_and_readiness_come_from_the_head_s_details() {
        let wanted = serve_config(YAML).unwrap();
        let details = json!({"applications": {"fruit": {"status": "DEPLOYING", "message": "",
            "deployments": {"Mango": {"status": "UPDATING", "message": "waiting"}}}}});
        let statuses = application_statuses(&details);
        assert_eq!(statuses["fruit"].status, "DEPLOYING");
        assert_eq!(statuses["fruit"].serve_deployment_statuses["Mango"].message.as_deref(), Some("waiting"));
        assert!(!all_running(&wanted, &statuses));
        let running = application_statuses(&json!({"applications": {"fruit": {"status": "RUNNING"}}}));
        assert!(all_running(&wanted, &running));
        assert!(!all_running(&json!({"applications": []}), &running));
    }

    #[test]
    fn ready_follows_problems_then_the_active_cluster_and_upgrades_are_told() {
        let base = Readiness { problem: None, serving: true, apps_running: true, endpoints: 1 };
        assert!(base.ready());
        let [ready, upgrade] = base.conditions(Some("a"), None, None).try_into().unwrap();
        assert_eq!((ready.reason.as_str(), upgrade.status.as_str()), ("NonZeroServeEndpoints", "False"));
        let refused = Readiness { problem: Some(("InvalidServeConfig", "no".into())), ..base };
        assert_eq!(refused.conditions(Some("a"), None, None)[0].reason, "InvalidServeConfig");
        let first = Readiness { problem: None, serving: false, apps_running: false, endpoints: 0 };
        assert_eq!(first.conditions(None, Some("b"), None)[0].reason, "Initializing");
        let no_proxy = Readiness { problem: None, serving: true, apps_running: true, endpoints: 0 };
        assert_eq!(
            no_proxy.conditions(Some("a"), None, None)[0].message,
            "no pod of the cluster runs a healthy Serve proxy"
        );
        let upgrading = Readiness { problem: None, serving: true, apps_running: true, endpoints: 2 };
        let conditions = upgrading.conditions(Some("a"), Some("b"), Some("the head is not up yet".into()));
        assert_eq!(conditions[0].status, "True", "the old cluster serves meanwhile");
        assert_eq!(conditions[1].status, "True");
        assert_eq!(conditions[1].message, "RayCluster b is being prepared to replace a: the head is not up yet");
    }
}
