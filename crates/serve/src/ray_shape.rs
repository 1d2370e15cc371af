//! `GET /api/serve/applications/` in the exact shape of Ray's `ServeInstanceDetails`, which
//! Ray's `serve status`/`serve config` and KubeRay parse strictly (unknown keys are refused).
//! A pure function of the controller's details and the declarative builds.

use crate::builds::View;
use serde_json::{json, Map, Value};

/// Which applications to report (`?api_type=`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source {
    All,
    Imperative,
    Declarative,
}

impl Source {
    pub fn parse(given: Option<&str>) -> Result<Self, String> {
        match given.map(str::to_lowercase).as_deref() {
            None | Some("") => Ok(Self::All),
            Some("imperative") => Ok(Self::Imperative),
            Some("declarative") => Ok(Self::Declarative),
            Some(_) => Err(format!(
                "Invalid 'api_type' value: '{}'. Must be one of: imperative, declarative",
                given.unwrap_or_default()
            )),
        }
    }

    fn admits(self, source: &str) -> bool {
        match self {
            Self::All => true,
            Self::Imperative => source == "imperative",
            Self::Declarative => source == "declarative",
        }
    }
}

/// The node the proxy runs on.
#[derive(Debug, Clone, Default)]
pub struct ProxyNode {
    pub node_id: String,
    pub node_ip: String,
}

fn node_ip(worker_address: &str) -> Value {
    match worker_address.rsplit_once(':') {
        Some((ip, _)) if !ip.is_empty() => Value::String(ip.to_string()),
        _ => Value::Null,
    }
}

fn non_empty(s: &Value) -> Value {
    match s.as_str() {
        Some("") | None => Value::Null,
        Some(_) => s.clone(),
    }
}

fn replica(r: &Value) -> Value {
    let pid = r["pid"].as_u64().filter(|p| *p > 0);
    json!({
        "node_id": non_empty(&r["node_id"]),
        "node_ip": node_ip(r["worker_address"].as_str().unwrap_or("")),
        "actor_id": non_empty(&r["actor_id"]),
        "actor_name": r["actor_name"],
        "replica_id": r["replica_id"],
        "state": r["state"],
        "pid": pid,
        "start_time_s": r["start_time_s"].as_f64().unwrap_or(0.0),
    })
}

fn deployment(d: &Value) -> Value {
    let config = match &d["deployment_config"] {
        Value::Object(c) => Value::Object(c.clone()),
        _ => json!({
            "name": d["name"],
            "num_replicas": d["target_num_replicas"],
            "max_ongoing_requests": d["max_ongoing_requests"],
            "max_queued_requests": d["max_queued_requests"],
            "user_config": d["user_config"],
        }),
    };
    let resources: Map<String, Value> = d["required_resources"]
        .as_object()
        .map(|r| r.iter().filter(|(_, v)| v.as_f64() != Some(0.0)).map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    json!({
        "name": d["name"],
        "status": d["status"],
        "status_trigger": d["status_trigger"],
        "message": d["message"].as_str().unwrap_or(""),
        "deployment_config": config,
        "target_num_replicas": d["target_num_replicas"],
        "required_resources": resources,
        "replicas": d["replicas"].as_array().map(|rs| rs.iter().map(replica).collect::<Vec<_>>()).unwrap_or_default(),
        "recent_dead_replicas": [],
        "autoscaling_detail": d["autoscaling_detail"],
    })
}

fn application(name: &str, a: &Value, build: Option<&crate::builds::Build>) -> Value {
    let deployments: Map<String, Value> = a["deployments"]
        .as_object()
        .map(|ds| ds.iter().map(|(k, d)| (k.clone(), deployment(d))).collect())
        .unwrap_or_default();
    let (status, message, config) = match build {
        // A new config is being applied (or failed to be) over what runs.
        Some(b) => match &b.failed {
            Some(why) => (json!("DEPLOY_FAILED"), json!(why), b.config.clone()),
            None => (json!("DEPLOYING"), json!(b.waiting.as_deref().unwrap_or("")), b.config.clone()),
        },
        None => (a["status"].clone(), a["message"].clone(), a["deployed_app_config"].clone()),
    };
    json!({
        "name": name,
        "route_prefix": a["route_prefix"],
        "docs_path": Value::Null,
        "status": status,
        "message": message.as_str().unwrap_or(""),
        "last_deployed_time_s": a["last_deployed_time_s"].as_f64().unwrap_or(0.0),
        "deployed_app_config": config,
        "source": a["source"],
        "deployments": deployments,
        "external_scaler_enabled": a["external_scaler_enabled"].as_bool().unwrap_or(false),
    })
}

/// An application of the config that has no deployment yet: its build runs or failed.
fn building(name: &str, b: &crate::builds::Build) -> Value {
    let route_prefix = match b.config.get("route_prefix") {
        None => json!("/"),
        Some(p) => p.clone(),
    };
    let (status, message) = match &b.failed {
        Some(why) => ("DEPLOY_FAILED", why.as_str()),
        None => ("DEPLOYING", b.waiting.as_deref().unwrap_or("")),
    };
    json!({
        "name": name,
        "route_prefix": route_prefix,
        "docs_path": Value::Null,
        "status": status,
        "message": message,
        "last_deployed_time_s": crate::controller::now_s(),
        "deployed_app_config": b.config,
        "source": "declarative",
        "deployments": {},
        "external_scaler_enabled": b.config.get("external_scaler_enabled").and_then(Value::as_bool).unwrap_or(false),
    })
}

fn http_options(controller_http: &Value, view: &View) -> Value {
    let given = view.config.as_ref().map(|c| c.http_given.clone()).unwrap_or_default();
    let mut out = json!({
        "host": controller_http["host"], "port": controller_http["port"], "root_path": "",
        "request_timeout_s": controller_http["request_timeout_s"], "keep_alive_timeout_s": 90,
        "ssl_keyfile": null, "ssl_certfile": null, "ssl_keyfile_password": null, "ssl_ca_certs": null,
    });
    // What was asked and is not in force (another proxy runs) still shows as asked for
    // the keys the proxy does not have.
    for (k, v) in given {
        if !matches!(k.as_str(), "host" | "port" | "request_timeout_s") {
            out[k] = v;
        }
    }
    out
}

/// Ray's `ServeInstanceDetails`; `details` is the controller's own report.
/// `proxies`: the head's first (the controller runs beside it), then other nodes'.
/// `location`: where proxies run (Ray's `proxy_location`).
pub fn instance_details(details: &Value, view: &View, source: Source, proxies: &[ProxyNode], location: &str) -> Value {
    let head = proxies.first().cloned().unwrap_or_default();
    let apps = details["applications"].as_object().cloned().unwrap_or_default();
    // Started with no application (`serve start`), Serve runs as well.
    let running = !apps.is_empty() || view.config.is_some() || details["http"].is_object();
    if !running {
        return json!({"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": null});
    }
    let mut applications = Map::new();
    for (name, a) in &apps {
        if source.admits(a["source"].as_str().unwrap_or("imperative")) {
            applications.insert(name.clone(), application(name, a, view.builds.get(name)));
        }
    }
    if source.admits("declarative") {
        for (name, b) in &view.builds {
            if !apps.contains_key(name) {
                applications.insert(name.clone(), building(name, b));
            }
        }
    }
    let http = &details["http"];
    let listed: Vec<&ProxyNode> =
        if http.is_object() { proxies.iter().filter(|p| !p.node_id.is_empty()).collect() } else { Vec::new() };
    let proxies: Map<String, Value> = listed
        .into_iter()
        .map(|p| {
            let row = json!({
                "node_id": p.node_id, "node_ip": p.node_ip,
                "actor_name": format!("SERVE_PROXY_ACTOR-{}", p.node_id), "status": "HEALTHY",
            });
            (p.node_id.clone(), row)
        })
        .collect();
    let config = view.config.as_ref();
    json!({
        "controller_info": {"node_id": non_empty(&json!(head.node_id)), "node_ip": non_empty(&json!(head.node_ip)),
                            "actor_name": "SERVE_CONTROLLER_ACTOR"},
        "proxy_location": location,
        "http_options": if http.is_object() { http_options(http, view) } else { Value::Null },
        "grpc_options": {"port": 9000, "grpc_servicer_functions": []},
        "proxies": proxies,
        "applications": applications,
        "target_capacity": config.and_then(|c| c.target_capacity),
        "restores_unset_config_options": true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builds::Build;
    use std::collections::BTreeMap;

    fn controller_details() -> Value {
        json!({"http": {"host": "0.0.0.0", "port": 8000, "request_timeout_s": null}, "applications": {
            "a": {"name": "a", "source": "declarative", "deployed_app_config": {"import_path": "m:a"},
                  "status": "RUNNING", "message": "", "route_prefix": "/", "ingress": "D",
                  "last_deployed_time_s": 5.0, "deployments": {"D": {
                      "name": "D", "status": "HEALTHY", "status_trigger": "CONFIG_UPDATE_COMPLETED",
                      "message": "", "deployment_config": {"name": "D", "num_replicas": 1},
                      "target_num_replicas": 1, "required_resources": {"CPU": 1.0, "GPU": 0.0},
                      "replicas": [{"replica_id": "r", "actor_name": "SERVE_REPLICA::a#D#r", "actor_id": "x",
                                    "state": "RUNNING", "worker_address": "10.0.0.2:4000", "node_id": "n",
                                    "pid": 7, "start_time_s": 1.0}]}}},
            "b": {"name": "b", "source": "imperative", "deployed_app_config": null, "status": "RUNNING",
                  "message": "", "route_prefix": "/b", "ingress": "E", "last_deployed_time_s": 6.0,
                  "deployments": {}}}})
    }

    fn view(builds: BTreeMap<String, Build>) -> View {
        View { config: None, builds }
    }

    #[test]
    fn nothing_running_is_ray_s_empty_answer() {
        let out = instance_details(
            &json!({"applications": {}, "http": null}),
            &view(BTreeMap::new()),
            Source::All,
            &[ProxyNode::default()],
            "EveryNode",
        );
        assert_eq!(out, json!({"controller_info": {}, "proxies": {}, "applications": {}, "target_capacity": null}));
    }

    #[test]
    fn apps_replicas_and_resources_take_ray_s_shape() {
        let proxies = [
            ProxyNode { node_id: "head".into(), node_ip: "10.0.0.1".into() },
            ProxyNode { node_id: "n2".into(), node_ip: "10.0.0.2".into() },
        ];
        let out = instance_details(&controller_details(), &view(BTreeMap::new()), Source::All, &proxies, "EveryNode");
        assert_eq!(out["controller_info"]["node_ip"], "10.0.0.1");
        assert_eq!(out["proxies"]["n2"]["actor_name"], "SERVE_PROXY_ACTOR-n2");
        let d = &out["applications"]["a"]["deployments"]["D"];
        assert_eq!(d["required_resources"], json!({"CPU": 1.0}));
        assert_eq!(d["replicas"][0]["node_ip"], "10.0.0.2");
        assert_eq!(d["replicas"][0]["pid"], 7);
        assert_eq!(out["applications"]["a"]["deployed_app_config"], json!({"import_path": "m:a"}));
        assert_eq!(out["proxies"]["head"]["status"], "HEALTHY");
        assert_eq!(out["http_options"]["keep_alive_timeout_s"], 90);
    }

    #[test]
    fn api_type_filters_by_source() {
        let all = BTreeMap::new();
        let proxy = [ProxyNode::default()];
        let declarative =
            instance_details(&controller_details(), &view(all.clone()), Source::Declarative, &proxy, "EveryNode");
        assert_eq!(declarative["applications"].as_object().unwrap().keys().collect::<Vec<_>>(), ["a"]);
        let imperative = instance_details(&controller_details(), &view(all), Source::Imperative, &proxy, "EveryNode");
        assert_eq!(imperative["applications"].as_object().unwrap().keys().collect::<Vec<_>>(), ["b"]);
        assert!(Source::parse(Some("bogus")).unwrap_err().contains("Invalid 'api_type' value: 'bogus'"));
        assert_eq!(Source::parse(Some("DECLARATIVE")).unwrap(), Source::Declarative);
    }

    #[test]
    fn builds_show_as_deploying_then_failed_with_the_reason() {
        let mut builds = BTreeMap::new();
        builds.insert("c".to_string(), Build::new(json!({"import_path": "m:c", "route_prefix": "/c"}), None));
        builds.insert("a".to_string(), Build::new(json!({"import_path": "m:a2"}), Some("ImportError: m".into())));
        let out = instance_details(&controller_details(), &view(builds), Source::All, &[], "HeadOnly");
        assert_eq!(out["proxy_location"], "HeadOnly");
        assert_eq!(out["applications"]["c"]["status"], "DEPLOYING");
        assert_eq!(out["applications"]["c"]["route_prefix"], "/c");
        assert_eq!(out["applications"]["a"]["status"], "DEPLOY_FAILED");
        assert_eq!(out["applications"]["a"]["message"], "ImportError: m");
        assert_eq!(out["applications"]["a"]["deployed_app_config"], json!({"import_path": "m:a2"}));
    }
}
