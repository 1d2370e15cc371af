//! Calls to a cluster's head over its HTTP API (the dashboard port): which nodes run work,
//! the Jobs REST API that RayJobs use, and the Serve REST API that RayServices use.

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde::Deserialize;
use serde_json::Value;

use crate::context::Context;
use crate::crd::RayCluster;
use crate::error::{Error, Result};
use crate::names::{token_secret, PORT_DASHBOARD};

pub struct Head<'a> {
    pub http: &'a reqwest::Client,
    /// `http://host:port`
    pub url: String,
    pub token: String,
}

/// Work of one shape waiting for room, `count` times, as the head reports it, with the
/// labels its node must have.
#[derive(Clone, Debug, PartialEq)]
pub struct Waiting {
    pub resources: BTreeMap<String, f64>,
    pub count: u32,
    pub label_selector: BTreeMap<String, String>,
}

/// The head's demand, as `Head::demand` reads it.
pub struct Demand {
    pub idle: HashMap<String, Option<f64>>,
    pub waiting: Vec<Waiting>,
    pub autoscaling: Option<bool>,
}

#[derive(Deserialize, Debug, Clone, PartialEq)]
pub struct JobInfo {
    pub status: String,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub start_time: Option<u64>,
    #[serde(default)]
    pub end_time: Option<u64>,
}

impl<'a> Head<'a> {
    /// The head of RayCluster `name`, reached at its pod address with the cluster token;
    /// None until it has both.
    pub async fn of_cluster(ctx: &'a Context, namespace: &str, name: &str) -> Result<Option<Head<'a>>> {
        let Some(cluster) = Api::<RayCluster>::namespaced(ctx.client.clone(), namespace).get_opt(name).await? else {
            return Ok(None);
        };
        let Some(ip) = cluster.status.as_ref().and_then(|s| s.head.as_ref()).and_then(|h| h.pod_ip.clone()) else {
            return Ok(None);
        };
        let secret_name = cluster
            .spec
            .auth_options
            .as_ref()
            .and_then(|a| a.secret_name.clone())
            .unwrap_or_else(|| token_secret(name));
        let Some(secret) = Api::<Secret>::namespaced(ctx.client.clone(), namespace).get_opt(&secret_name).await? else {
            return Ok(None);
        };
        let port =
            crate::params::dashboard_port(&cluster.spec.head_group_spec.ray_start_params).unwrap_or(PORT_DASHBOARD);
        Ok(secret_token(&secret).map(|token| Head { http: &ctx.http, url: format!("http://{ip}:{port}"), token }))
    }

    /// Serve's declarative applications (Ray's `ServeInstanceDetails`).
    pub async fn serve_details(&self) -> Result<Value> {
        let url = format!("{}/api/serve/applications/?api_type=declarative", self.url);
        let (status, body) = self.call(self.http.get(url)).await?;
        if !status.is_success() {
            return Err(self.error(format!("Serve details answered {status}: {body}")));
        }
        Ok(body)
    }

    /// Sends a Serve config; a refusal (400) comes back as its reason, to be reported.
    pub async fn put_serve_config(&self, config: &Value) -> Result<std::result::Result<(), String>> {
        let url = format!("{}/api/serve/applications/", self.url);
        let (status, body) = self.call(self.http.put(url).json(config)).await?;
        match status.as_u16() {
            200..=299 => Ok(Ok(())),
            400 => Ok(Err(body.as_str().map(String::from).unwrap_or_else(|| body.to_string()))),
            _ => Err(self.error(format!("Serve config answered {status}: {body}"))),
        }
    }

    fn error(&self, reason: impl ToString) -> Error {
        Error::Head { url: self.url.clone(), reason: reason.to_string() }
    }

    async fn call(&self, request: reqwest::RequestBuilder) -> Result<(reqwest::StatusCode, Value)> {
        let response = request.bearer_auth(&self.token).send().await.map_err(|e| self.error(e))?;
        let status = response.status();
        let body = response.text().await.map_err(|e| self.error(e))?;
        let value = serde_json::from_str(&body).unwrap_or(Value::String(body));
        Ok((status, value))
    }

    /// The `data` of `/api/cluster_status`: `cluster_status` (nodes, demand) and
    /// `autoscaling_enabled`.
    async fn cluster_status(&self) -> Result<Value> {
        let (status, body) = self.call(self.http.get(format!("{}/api/cluster_status", self.url))).await?;
        if !status.is_success() {
            return Err(self.error(format!("cluster status answered {status}: {body}")));
        }
        match body.get("data") {
            Some(data) if data["cluster_status"]["alive"].is_array() => Ok(data.clone()),
            _ => Err(self.error(format!("cluster status without nodes: {body}"))),
        }
    }

    /// Whether the head lets work no node can hold wait for nodes an autoscaler adds; None
    /// from a head that does not say.
    pub async fn autoscaling(&self) -> Result<Option<bool>> {
        Ok(self.cluster_status().await?["autoscaling_enabled"].as_bool())
    }

    /// Turns the head's autoscaling on or off, for `enableInTreeAutoscaling` changed on a
    /// live cluster.
    pub async fn set_autoscaling(&self, on: bool) -> Result<()> {
        let request = self.http.put(format!("{}/api/autoscaling", self.url)).json(&serde_json::json!({"enabled": on}));
        let (status, body) = self.call(request).await?;
        if !status.is_success() {
            return Err(self.error(format!("turning autoscaling {}: {status} {body}", if on { "on" } else { "off" })));
        }
        Ok(())
    }

    /// Names of alive nodes with any resource in use. Nodes are named after their pods.
    pub async fn busy_nodes(&self) -> Result<HashSet<String>> {
        let data = self.cluster_status().await?;
        let nodes = data["cluster_status"]["alive"].as_array().into_iter().flatten();
        Ok(nodes.filter(|n| node_is_busy(n)).filter_map(|n| n["node_name"].as_str().map(String::from)).collect())
    }

    /// What the autoscaler reads: the alive nodes by name, with how long each has held
    /// nothing (None while busy), the work waiting for room, and whether the head lets work
    /// no node can hold wait.
    pub async fn demand(&self) -> Result<Demand> {
        let data = self.cluster_status().await?;
        let cluster = &data["cluster_status"];
        let nodes = cluster["alive"].as_array().into_iter().flatten();
        let idle = nodes.filter_map(|n| Some((n["node_name"].as_str()?.to_string(), n["idle_s"].as_f64()))).collect();
        let waiting = cluster["pending_resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let resources = serde_json::from_value(p["resources"].clone()).ok()?;
                let label_selector = serde_json::from_value(p["label_selector"].clone()).unwrap_or_default();
                Some(Waiting { resources, count: p["count"].as_u64()? as u32, label_selector })
            })
            .collect();
        Ok(Demand { idle, waiting, autoscaling: data["autoscaling_enabled"].as_bool() })
    }

    /// The job, or None when the head does not know it.
    pub async fn job(&self, id: &str) -> Result<Option<JobInfo>> {
        let (status, body) = self.call(self.http.get(format!("{}/api/jobs/{id}", self.url))).await?;
        match status.as_u16() {
            404 => Ok(None),
            200 => serde_json::from_value(body).map(Some).map_err(|e| self.error(e)),
            _ => Err(self.error(format!("job {id}: {status} {body}"))),
        }
    }

    /// Submits the job; a job already there with this id counts as submitted, so a retried
    /// reconcile never runs it twice.
    pub async fn submit(&self, request: &Value) -> Result<()> {
        let id = request["submission_id"].as_str().unwrap_or_default().to_string();
        let (status, body) = self.call(self.http.post(format!("{}/api/jobs/", self.url)).json(request)).await?;
        if status.is_success() || (status == 400 && body.to_string().contains("already exists")) {
            return Ok(());
        }
        if self.job(&id).await?.is_some() {
            return Ok(());
        }
        Err(self.error(format!("submitting job {id}: {status} {body}")))
    }

    pub async fn stop(&self, id: &str) -> Result<()> {
        let (status, body) = self.call(self.http.post(format!("{}/api/jobs/{id}/stop", self.url))).await?;
        if status.is_success() || status == 404 {
            Ok(())
        } else {
            Err(self.error(format!("stopping job {id}: {status} {body}")))
        }
    }
}

/// A node runs work when some of its resources are taken.
fn node_is_busy(node: &Value) -> bool {
    node["resources_used"].as_object().is_some_and(|used| used.values().any(|v| v.as_f64().unwrap_or(1.0) > 1e-9))
}

/// The cluster token a Secret holds under "token", in `data` or `stringData`.
pub fn secret_token(secret: &Secret) -> Option<String> {
    let from_data = secret.data.as_ref().and_then(|d| d.get("token")).and_then(|b| String::from_utf8(b.0.clone()).ok());
    from_data
        .or_else(|| secret.string_data.as_ref().and_then(|d| d.get("token").cloned()))
        .map(|t| t.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_node_is_busy_while_any_resource_is_taken() {
        assert!(!node_is_busy(&json!({"node_name": "a"})));
        assert!(!node_is_busy(&json!({"node_name": "a", "resources_used": {}})));
        assert!(node_is_busy(&json!({"node_name": "a", "resources_used": {"CPU": 1.0}})));
    }
}
