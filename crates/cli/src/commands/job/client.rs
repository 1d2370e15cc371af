//! Talks to the head's Jobs REST API (the same API Ray's `ray job` uses).

use crate::target::{read_current, resolve_token};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use futures_util::{SinkExt, StreamExt};
use oxray_rpc::{root_cause, Token};
use serde_json::Value;
use std::time::Duration;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

#[derive(Args, Debug, Clone)]
pub struct JobTarget {
    /// The cluster: its dashboard URL (http://HEAD:8265) or control address (HEAD:6379)
    /// [default: $OXRAY_ADDRESS, $RAY_ADDRESS, else the cluster started on this machine]
    #[arg(short = 'a', long, env = "OXRAY_ADDRESS")]
    pub address: Option<String>,
    /// The cluster token [default: $OXRAY_AUTH_TOKEN, else the token file]
    #[arg(long, env = "OXRAY_AUTH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

pub struct JobClient {
    base: String,
    http: reqwest::Client,
    token: Token,
}

fn api_error(status: reqwest::StatusCode, body: &str) -> anyhow::Error {
    let body = body.trim();
    match status.as_u16() {
        401 | 403 => anyhow!("the cluster refused the token ({status}): {body}"),
        _ => anyhow!("{body} (HTTP {status})"),
    }
}

/// The address given (flag, $OXRAY_ADDRESS, $RAY_ADDRESS); "auto" names none.
fn given_address(target: &JobTarget) -> Option<String> {
    target
        .address
        .clone()
        .filter(|a| !a.is_empty() && a != "auto")
        .or_else(|| std::env::var("RAY_ADDRESS").ok().filter(|a| !a.is_empty() && a != "auto"))
}

/// Whether `connect` has a cluster to talk to: one given, or one started on this machine.
pub fn names_a_cluster(target: &JobTarget) -> bool {
    given_address(target).is_some() || read_current().and_then(|c| c.dashboard_url).is_some()
}

impl JobClient {
    pub async fn connect(target: &JobTarget) -> Result<Self> {
        let base = match given_address(target) {
            Some(a) if a.starts_with("http://") || a.starts_with("https://") => a.trim_end_matches('/').to_string(),
            Some(a) => dashboard_of(&a, target).await?,
            None => read_current().and_then(|c| c.dashboard_url).ok_or_else(|| {
                anyhow!("no cluster to talk to: pass --address http://HEAD:8265, set OXRAY_ADDRESS, or start one here with `oxray start --head`")
            })?,
        };
        let token = resolve_token(target.token.as_deref(), &base)?;
        let http = crate::tls::http_client()?;
        Ok(Self { base, http, token })
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        let response = request
            .bearer_auth(self.token.as_str())
            .send()
            .await
            .map_err(|e| anyhow!("cannot reach the cluster at {}: {}", self.base, root_cause(&e)))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        Err(api_error(status, &body))
    }

    /// A GET whose answer is read as it comes (a log).
    pub async fn response(&self, path: &str) -> Result<reqwest::Response> {
        self.send(self.http.get(format!("{}{path}", self.base))).await
    }

    pub async fn get(&self, path: &str) -> Result<Value> {
        Ok(self.send(self.http.get(format!("{}{path}", self.base))).await?.json().await?)
    }

    /// A GET of a list, with the total the answer's `TOTAL_JOBS_HEADER` gives.
    pub async fn get_with_total(&self, path: &str) -> Result<(Value, Option<usize>)> {
        let response = self.send(self.http.get(format!("{}{path}", self.base))).await?;
        let total = response.headers().get(oxray_api_types::TOTAL_JOBS_HEADER);
        let total = total.and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
        Ok((response.json().await?, total))
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        Ok(self.send(self.http.post(format!("{}{path}", self.base)).json(body)).await?.json().await?)
    }

    pub async fn delete(&self, path: &str) -> Result<Value> {
        Ok(self.send(self.http.delete(format!("{}{path}", self.base))).await?.json().await?)
    }

    /// A request whose answer is text (or empty), as Serve's REST API gives.
    pub async fn text(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<String> {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        Ok(self.send(request).await?.text().await?)
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub async fn job(&self, id: &str) -> Result<Value> {
        self.get(&format!("/api/jobs/{id}")).await
    }

    /// Uploads a package unless the cluster has it already.
    pub async fn upload(&self, name: &str, bytes: Vec<u8>) -> Result<()> {
        let url = format!("{}/api/packages/gcs/{name}", self.base);
        let head = self
            .http
            .get(&url)
            .bearer_auth(self.token.as_str())
            .send()
            .await
            .map_err(|e| anyhow!("cannot reach the cluster at {}: {}", self.base, root_cause(&e)))?;
        match head.status().as_u16() {
            200 => return Ok(()),
            404 => {}
            _ => {
                let status = head.status();
                bail!(api_error(status, &head.text().await.unwrap_or_default()));
            }
        }
        self.send(self.http.put(&url).body(bytes)).await.with_context(|| format!("cannot upload {name}"))?;
        Ok(())
    }

    /// Prints the job's log as it is written, until the job ends.
    pub async fn follow(&self, id: &str) -> Result<()> {
        let url = format!("{}/api/jobs/{id}/logs/tail", self.base.replacen("http", "ws", 1));
        let mut request = url.as_str().into_client_request()?;
        request.headers_mut().insert("authorization", self.token.bearer().parse()?);
        let connector = crate::tls::websocket_connector()?;
        let (mut socket, _) = tokio_tungstenite::connect_async_tls_with_config(request, None, false, connector)
            .await
            .map_err(|e| anyhow!("cannot follow the logs of job {id}: {e}"))?;
        use std::io::Write;
        let mut out = std::io::stdout();
        while let Some(message) = socket.next().await {
            match message.map_err(|e| anyhow!("the log stream of job {id} broke off: {e}"))? {
                Message::Text(text) => {
                    out.write_all(text.as_bytes())?;
                    out.flush()?;
                }
                Message::Close(frame) => {
                    if let Some(f) = frame.filter(|f| u16::from(f.code) != 1000) {
                        bail!("the log stream of job {id} ended with an error: {}", f.reason);
                    }
                    break;
                }
                Message::Ping(data) => socket.send(Message::Pong(data)).await?,
                _ => {}
            }
        }
        Ok(())
    }
}

/// The dashboard URL of a head given by its control address.
async fn dashboard_of(address: &str, target: &JobTarget) -> Result<String> {
    if let Some(current) = read_current().filter(|c| c.address == address) {
        if let Some(url) = current.dashboard_url {
            return Ok(url);
        }
    }
    let token = resolve_token(target.token.as_deref(), address)?;
    let mut client = oxray_rpc::connect_head(address, &token, Duration::from_secs(10)).await?;
    let info = client
        .get_cluster_info(oxray_proto::v1::GetClusterInfoRequest {})
        .await
        .map_err(|s| anyhow!(oxray_rpc::explain(address, &s)))?
        .into_inner();
    let host = match info.dashboard_host.as_str() {
        "0.0.0.0" | "::" | "" => address.rsplit_once(':').map(|(h, _)| h).unwrap_or(address).to_string(),
        other => other.to_string(),
    };
    let scheme = if info.dashboard_url.starts_with("https://") { "https" } else { "http" };
    Ok(format!("{scheme}://{host}:{}", info.dashboard_port))
}
