//! The HTTP proxy: takes requests on the Serve port, finds the application by route prefix,
//! and hands each request to a replica of its ingress deployment over the core's direct
//! actor-call path, never more than `max_ongoing_requests` at a replica. Requests wait
//! their turn here, first come first served, for a bounded time.

use crate::host::{CallError, ReplicaCalls};
use crate::plan::AppStatus;
use crate::routes;
use crate::routing::{Route, Routing, Target};
use crate::spec::HttpOptions;
use crate::wire::{self, Arg};
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long a request may wait for a replica with room (Ray waits forever).
pub const QUEUE_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_BODY: usize = 512 * 1024 * 1024;
const TEXT: &str = "text/plain; charset=utf-8";

pub struct Proxy {
    routing: Arc<dyn Routing>,
    host: Arc<dyn ReplicaCalls>,
    request_timeout_s: Option<f64>,
    /// Requests in flight at each replica, from this proxy.
    in_flight: Mutex<HashMap<String, u32>>,
    /// Requests waiting for room, per application (the autoscaler counts them as load).
    waiting: Arc<Mutex<HashMap<String, i64>>>,
    freed: Notify,
}

/// Counts a request at its replica for as long as it runs (also when the client goes away
/// and the request is dropped).
struct Slot {
    proxy: Arc<Proxy>,
    replica: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.proxy.in_flight.lock().expect("in-flight lock");
        if let Some(n) = counts.get_mut(&self.replica) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.replica);
            }
        }
        drop(counts);
        self.proxy.freed.notify_waiters();
    }
}

struct Waiting<'a> {
    proxy: &'a Proxy,
    app: String,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(n) = self.proxy.waiting.lock().expect("waiting lock").get_mut(&self.app) {
            *n -= 1;
        }
    }
}

fn text(status: StatusCode, body: String) -> Response {
    (status, [(axum::http::header::CONTENT_TYPE, TEXT)], body).into_response()
}

fn request_id(headers: &HeaderMap) -> String {
    if let Some(id) = headers.get("x-request-id").and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty()) {
        return id.to_string();
    }
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the system's random source");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// The request's own timeout (`x-request-timeout-seconds`, <= 0 for none), else the
/// proxy's.
pub fn timeout_of(headers: &HeaderMap, default: Option<f64>) -> Option<f64> {
    match headers
        .get("x-request-timeout-seconds")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
    {
        Some(s) if s.is_finite() && s > 0.0 => Some(s),
        Some(_) => None,
        None => default.filter(|s| *s > 0.0),
    }
}

impl Proxy {
    pub fn new(routing: Arc<dyn Routing>, host: Arc<dyn ReplicaCalls>, options: &HttpOptions) -> Arc<Self> {
        Arc::new(Self {
            waiting: routing.waiting(),
            routing,
            host,
            request_timeout_s: options.request_timeout_s,
            in_flight: Mutex::new(HashMap::new()),
            freed: Notify::new(),
        })
    }

    /// Listens on `options`' host and port and serves there until `stop`, in a task of its
    /// own (the head's proxy and every node's start so).
    pub async fn start(
        routing: Arc<dyn Routing>,
        calls: Arc<dyn ReplicaCalls>,
        options: &HttpOptions,
        stop: CancellationToken,
    ) -> Result<tokio::task::JoinHandle<()>, String> {
        let listener = tokio::net::TcpListener::bind((options.host.as_str(), options.port))
            .await
            .map_err(|e| format!("the Serve HTTP proxy cannot listen on {}:{}: {e}", options.host, options.port))?;
        let served = tokio::spawn(Self::new(routing, calls, options).serve(listener, stop));
        tracing::info!("Serve HTTP proxy on {}:{}", options.host, options.port);
        Ok(served)
    }

    /// Serves on `listener` until `shutdown`.
    pub async fn serve(self: Arc<Self>, listener: tokio::net::TcpListener, shutdown: CancellationToken) {
        use axum::serve::ListenerExt;
        let app = axum::Router::new().fallback(handle).with_state(self);
        // A response goes out in pieces (head, then body): without this each later piece
        // waits for the client's delayed ACK (~40 ms).
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!("cannot set TCP_NODELAY on a Serve connection: {e}");
            }
        });
        let served = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!("the Serve HTTP proxy stopped: {e}");
        }
    }

    /// A replica of `route` with room, counted as taken; waits (first come, first served)
    /// while all are full, up to QUEUE_TIMEOUT.
    async fn take(self: &Arc<Self>, app: &str) -> Result<(Route, Target, Slot), Response> {
        let deadline = tokio::time::Instant::now() + QUEUE_TIMEOUT;
        let mut queued: Option<Waiting<'_>> = None;
        loop {
            let freed = self.freed.notified();
            let changed = self.routing.changed().notified();
            tokio::pin!(freed, changed);
            freed.as_mut().enable();
            changed.as_mut().enable();
            let Some(route) = self.routing.route(app) else {
                return Err(text(StatusCode::NOT_FOUND, format!("Application '{app}' does not exist.")));
            };
            match route.status {
                AppStatus::DeployFailed => {
                    return Err(text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("Application '{app}' failed to deploy and cannot take requests."),
                    ))
                }
                AppStatus::Deleting => {
                    return Err(text(StatusCode::SERVICE_UNAVAILABLE, format!("Application '{app}' is being deleted.")))
                }
                _ => {}
            }
            {
                let mut counts = self.in_flight.lock().expect("in-flight lock");
                let loads: Vec<u32> =
                    route.replicas.iter().map(|r| counts.get(&r.replica_id).copied().unwrap_or(0)).collect();
                let mut draw = |n: usize| {
                    let mut b = [0u8; 8];
                    getrandom::fill(&mut b).expect("the system's random source");
                    (u64::from_le_bytes(b) % n as u64) as usize
                };
                if let Some(i) = routes::pick(&loads, route.max_ongoing_requests, &mut draw) {
                    let target = route.replicas[i].clone();
                    *counts.entry(target.replica_id.clone()).or_insert(0) += 1;
                    drop(counts);
                    let slot = Slot { proxy: self.clone(), replica: target.replica_id.clone() };
                    return Ok((route, target, slot));
                }
            }
            if queued.is_none() {
                let mut waiting = self.waiting.lock().expect("waiting lock");
                let n = waiting.entry(app.to_string()).or_insert(0);
                if route.max_queued_requests >= 0 && *n >= route.max_queued_requests {
                    return Err(text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!(
                            "Request dropped due to backpressure (num_queued_requests={n}, max_queued_requests={}).",
                            route.max_queued_requests
                        ),
                    ));
                }
                *n += 1;
                queued = Some(Waiting { proxy: self.as_ref(), app: app.to_string() });
            }
            tokio::select! {
                _ = freed => {}
                _ = changed => {}
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("No replica of application '{app}' had room within {}s.", QUEUE_TIMEOUT.as_secs()),
                    ));
                }
            }
        }
    }

    async fn forward(
        self: &Arc<Self>,
        app: &str,
        prefix: &str,
        request: Request,
        id: &str,
        client: String,
    ) -> Response {
        let (parts, body) = request.into_parts();
        let body = match axum::body::to_bytes(body, MAX_BODY).await {
            Ok(b) => b,
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("cannot read the request body: {e}")),
        };
        let (_route, target, slot) = match self.take(app).await {
            Ok(taken) => taken,
            Err(refused) => return refused,
        };
        let headers: Vec<(Vec<u8>, Vec<u8>)> =
            parts.headers.iter().map(|(k, v)| (k.as_str().as_bytes().to_vec(), v.as_bytes().to_vec())).collect();
        let root_path = if prefix == "/" { String::new() } else { prefix.to_string() };
        let args = wire::args(vec![
            Arg::Str(parts.method.as_str().to_string()),
            Arg::Str(parts.uri.path().to_string()),
            Arg::Bytes(parts.uri.query().unwrap_or("").as_bytes().to_vec()),
            Arg::Pairs(headers),
            Arg::Bytes(body.to_vec()),
            Arg::Str(root_path),
            Arg::Str(id.to_string()),
            Arg::Str(client),
        ]);
        // A response whose body the replica made in one piece comes as one item, so that a
        // replica dying midway is a 500, never a body cut short; others stream: the head
        // with the first piece, then each piece as it is made (a token stream reaches the
        // client token by token).
        let streamed = self.host.stream(&target.actor_id, &target.worker_address, "__serve_http_stream__", args).await;
        let mut items = match streamed {
            Ok(items) => items,
            Err(e) => return self.failed(&target.replica_id, e),
        };
        let (head, whole) = match items.recv().await {
            Some(Ok(data)) => match wire::http_start(&data) {
                Ok(start) => start,
                Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e),
            },
            Some(Err(e)) => return self.failed(&target.replica_id, e),
            None => return text(StatusCode::INTERNAL_SERVER_ERROR, "the replica sent no response".into()),
        };
        let wire::HttpReply { status, headers, body } = head;
        let body = if whole {
            // What the app runs after its response (background tasks) still counts at the
            // replica until its stream ends.
            tokio::spawn(async move {
                let _slot = slot;
                while items.recv().await.is_some() {}
            });
            Body::from(body)
        } else {
            // The request counts at its replica until its last piece is sent (or the client left).
            let pieces = futures_util::stream::unfold((items, slot), |(mut items, slot)| async move {
                match items.recv().await? {
                    Ok(data) => match wire::body_chunk(&data) {
                        Ok(chunk) => Some((Ok::<_, std::io::Error>(bytes::Bytes::from(chunk)), (items, slot))),
                        Err(e) => Some((Err(std::io::Error::other(e)), (items, slot))),
                    },
                    Err(e) => Some((Err(std::io::Error::other(e.to_string())), (items, slot))),
                }
            });
            Body::from_stream(pieces)
        };
        let mut response = Response::new(body);
        *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        for (k, v) in headers {
            if let (Ok(k), Ok(v)) = (HeaderName::from_bytes(&k), HeaderValue::from_bytes(&v)) {
                response.headers_mut().append(k, v);
            }
        }
        response
    }

    fn failed(&self, replica: &str, error: CallError) -> Response {
        match error {
            CallError::Died(e) => {
                self.routing.replica_died(replica);
                text(StatusCode::INTERNAL_SERVER_ERROR, format!("The replica handling the request died: {e}"))
            }
            CallError::Failed(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e),
        }
    }
}

async fn handle(
    State(proxy): State<Arc<Proxy>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let path = request.uri().path().to_string();
    if path == "/-/healthz" {
        return text(StatusCode::OK, "success".into());
    }
    let table = proxy.routing.prefixes();
    if path == "/-/routes" {
        let routes: serde_json::Map<String, serde_json::Value> =
            table.iter().map(|(p, a)| (p.clone(), serde_json::Value::String(a.clone()))).collect();
        return axum::Json(routes).into_response();
    }
    let Some((prefix, app)) = routes::match_route(&table, &path).cloned() else {
        let host = request.headers().get("host").and_then(|h| h.to_str().ok()).unwrap_or("localhost").to_string();
        return text(
            StatusCode::NOT_FOUND,
            format!("Path '{path}' not found. Ping http://{host}/-/routes for available routes."),
        );
    };
    let id = request_id(request.headers());
    let timeout = timeout_of(request.headers(), proxy.request_timeout_s);
    let work = proxy.forward(&app, &prefix, request, &id, peer.to_string());
    let mut response = match timeout {
        Some(s) => match tokio::time::timeout(Duration::from_secs_f64(s), work).await {
            Ok(r) => r,
            Err(_) => text(StatusCode::REQUEST_TIMEOUT, format!("Request {id} timed out after {s}s.")),
        },
        None => work.await,
    };
    if !response.headers().contains_key("x-request-id") {
        if let Ok(v) = HeaderValue::from_str(&id) {
            response.headers_mut().insert("x-request-id", v);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_timeouts_come_from_the_header_first() {
        let mut h = HeaderMap::new();
        assert_eq!(timeout_of(&h, Some(5.0)), Some(5.0));
        assert_eq!(timeout_of(&h, None), None);
        h.insert("x-request-timeout-seconds", HeaderValue::from_static("1.5"));
        assert_eq!(timeout_of(&h, Some(5.0)), Some(1.5));
        h.insert("x-request-timeout-seconds", HeaderValue::from_static("0"));
        assert_eq!(timeout_of(&h, Some(5.0)), None);
    }

    #[test]
    fn request_ids_are_kept_or_made() {
        let mut h = HeaderMap::new();
        let made = request_id(&h);
        assert_eq!(made.len(), 36);
        assert_eq!(made.as_bytes()[14], b'4');
        h.insert("x-request-id", HeaderValue::from_static("abc"));
        assert_eq!(request_id(&h), "abc");
    }
}
