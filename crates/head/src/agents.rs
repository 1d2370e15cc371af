//! The node agents as the head reaches them: one client per node, and what the state API
//! reads from them (their workers, their log files).

use crate::membership::Membership;
use futures_util::StreamExt;
use oxray_api_types::logs::LogTarget;
use oxray_api_types::ApiError;
use oxray_proto::v1;
use oxray_rpc::Token;
use oxray_rpc::{connect_agent_lazy, AgentClient};
use oxray_types::{NodeId, NodeInfo};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Agents {
    membership: Arc<Membership>,
    token: Token,
    clients: Mutex<HashMap<NodeId, AgentClient>>,
}

fn unreachable(node: &NodeInfo, what: &str, status: tonic::Status) -> ApiError {
    let message = format!("cannot {what} on node {} ({}): {}", node.node_id, node.node_ip, status.message());
    match status.code() {
        tonic::Code::NotFound => ApiError::NotFound(message),
        tonic::Code::InvalidArgument => ApiError::BadRequest(message),
        _ => ApiError::Internal(message),
    }
}

impl Agents {
    pub fn new(membership: Arc<Membership>, token: Token) -> Self {
        Self { membership, token, clients: Mutex::new(HashMap::new()) }
    }

    pub fn client(&self, node: &NodeInfo) -> Result<AgentClient, ApiError> {
        let mut clients = self.clients.lock().expect("agent clients lock");
        if let Some(client) = clients.get(&node.node_id) {
            return Ok(client.clone());
        }
        let address = node.agent_address();
        let client = connect_agent_lazy(&address, &self.token, Duration::from_secs(30))
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        clients.insert(node.node_id.clone(), client.clone());
        Ok(client)
    }

    fn node(&self, id: &str) -> Result<NodeInfo, ApiError> {
        let id: NodeId = id.parse().map_err(|e: oxray_types::IdError| ApiError::NotFound(e.to_string()))?;
        self.membership.get(&id).ok_or_else(|| ApiError::NotFound(format!("Node {id} does not exist")))
    }

    /// Ray's worker rows of every live node; the warning names the nodes that did not answer.
    pub async fn worker_rows(&self, timeout: Duration) -> (Vec<Value>, String) {
        let nodes: Vec<NodeInfo> =
            self.membership.snapshot().into_iter().filter(|n| n.is_alive() && n.agent_port > 0).collect();
        let asks = nodes.iter().map(|node| async move {
            let mut client = self.client(node).map_err(|e| e.to_string())?;
            let reply = tokio::time::timeout(timeout, client.list_workers(v1::ListWorkersRequest {})).await;
            match reply {
                Ok(Ok(reply)) => Ok(reply.into_inner().workers.iter().map(|w| worker_row(node, w)).collect::<Vec<_>>()),
                Ok(Err(status)) => Err(status.message().to_string()),
                Err(_) => Err(format!("no answer within {timeout:?}")),
            }
        });
        let mut rows = Vec::new();
        let mut missing = Vec::new();
        for (node, result) in nodes.iter().zip(futures_util::future::join_all(asks).await) {
            match result {
                Ok(mut r) => rows.append(&mut r),
                Err(e) => missing.push(format!("{} ({e})", node.node_id)),
            }
        }
        let warning = if missing.is_empty() {
            String::new()
        } else {
            format!("the workers of these nodes are missing: {}", missing.join(", "))
        };
        (rows, warning)
    }

    /// The names of a node's log files that match `glob`.
    pub async fn list_logs(&self, node: &NodeInfo, glob: &str) -> Result<Vec<String>, ApiError> {
        let mut client = self.client(node)?;
        let reply = client
            .list_logs(v1::ListLogsRequest { glob: glob.to_string() })
            .await
            .map_err(|s| unreachable(node, "list the log files", s))?;
        Ok(reply.into_inner().files)
    }

    /// A log file, streamed from its node.
    pub async fn read_log(&self, target: &LogTarget) -> Result<oxray_http::ByteStream, ApiError> {
        let node = self.node(&target.node_id)?;
        let mut client = self.client(&node)?;
        let request = v1::ReadLogRequest {
            filename: target.filename.clone(),
            pid: target.pid,
            suffix: target.suffix.clone(),
            lines: target.lines,
            follow: target.follow,
            start_offset: target.start,
            end_offset: target.end,
        };
        let stream = client.read_log(request).await.map_err(|s| unreachable(&node, "read the log", s))?;
        Ok(stream.into_inner().map(|chunk| chunk.map(|c| c.data.into()).map_err(|s| s.message().to_string())).boxed())
    }
}

/// A worker as Ray's state API shows it (`WorkerState`).
fn worker_row(node: &NodeInfo, w: &v1::WorkerState) -> Value {
    let or_null = |s: &str| if s.is_empty() { Value::Null } else { json!(s) };
    json!({
        "worker_id": w.worker_id,
        "is_alive": w.is_alive,
        "worker_type": "WORKER",
        "exit_type": or_null(&w.exit_type),
        "node_id": node.node_id.hex(),
        "ip": node.node_ip,
        "pid": w.pid,
        "exit_detail": or_null(&w.exit_detail),
        "worker_launch_time_ms": w.launch_time_ms,
        "worker_launched_time_ms": w.launch_time_ms,
        "start_time_ms": w.start_time_ms,
        "end_time_ms": w.end_time_ms,
        "debugger_port": 0,
        "num_paused_threads": 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_rows_have_ray_columns_and_nulls_while_alive() {
        let node = oxray_types::NodeInfo { node_ip: "10.1.2.3".into(), ..crate::membership::tests::sample_node("n") };
        let alive = v1::WorkerState { worker_id: "w".into(), is_alive: true, pid: 7, ..Default::default() };
        let row = worker_row(&node, &alive);
        assert_eq!(
            (row["worker_type"].clone(), row["ip"].clone(), row["pid"].clone()),
            (json!("WORKER"), json!("10.1.2.3"), json!(7))
        );
        assert!(row["exit_type"].is_null() && row["exit_detail"].is_null());
        let dead = v1::WorkerState { exit_type: "SYSTEM_ERROR".into(), exit_detail: "code 1".into(), ..alive };
        assert_eq!(worker_row(&node, &dead)["exit_type"], "SYSTEM_ERROR");
    }
}
