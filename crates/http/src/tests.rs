use super::*;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use oxray_types::{NodeId, NodeState, ResourceSet};
use tower::ServiceExt;

struct FixedView(Vec<NodeInfo>);

#[async_trait::async_trait]
impl ClusterView for FixedView {
    fn nodes(&self) -> Vec<NodeInfo> {
        self.0.clone()
    }
    fn pending(&self) -> Vec<String> {
        Vec::new()
    }
    fn events(&self, _limit: usize) -> Vec<oxray_api_types::Event> {
        Vec::new()
    }
    fn state_rows(&self, kind: oxray_api_types::state::StateKind) -> (Vec<serde_json::Value>, String) {
        use oxray_api_types::state::StateKind;
        let rows = match kind {
            StateKind::Tasks => vec![
                serde_json::json!({ "task_id": "b", "attempt_number": 0, "name": "f", "func_or_class_name": "f",
                                    "type": "NORMAL_TASK", "state": "FINISHED", "events": [] }),
                serde_json::json!({ "task_id": "a", "attempt_number": 0, "name": "g", "func_or_class_name": "g",
                                    "type": "NORMAL_TASK", "state": "RUNNING", "events": [] }),
            ],
            _ => Vec::new(),
        };
        (rows, String::new())
    }
    async fn node_log(&self, node_id: &str, _max_bytes: u64) -> Result<String, oxray_api_types::ApiError> {
        Err(oxray_api_types::ApiError::NotFound(format!("Node {node_id} does not exist")))
    }
    fn user_metrics(&self) -> String {
        "# TYPE ray_app_requests counter\nray_app_requests_total{node_id=\"n\",pid=\"1\"} 2\n".into()
    }
    fn node_usage(&self) -> Vec<(String, oxray_api_types::usage::NodeUsage)> {
        self.0.iter().map(|n| (n.node_id.hex(), oxray_api_types::usage::NodeUsage::default())).collect()
    }
    fn usage_history(
        &self,
        _node_id: Option<&str>,
    ) -> std::collections::HashMap<String, Vec<oxray_api_types::usage::NodeUsage>> {
        Default::default()
    }
    async fn worker_rows(&self, _timeout: std::time::Duration) -> (Vec<serde_json::Value>, String) {
        (Vec::new(), String::new())
    }
    async fn object_rows(&self, _timeout: std::time::Duration) -> (Vec<serde_json::Value>, String) {
        (Vec::new(), String::new())
    }
    async fn list_logs(&self, node: &NodeInfo, _glob: &str) -> Result<Vec<String>, oxray_api_types::ApiError> {
        Err(oxray_api_types::ApiError::Internal(format!("node {} has no agent here", node.node_id)))
    }
    async fn read_log(
        &self,
        target: &oxray_api_types::logs::LogTarget,
    ) -> Result<crate::ByteStream, oxray_api_types::ApiError> {
        Err(oxray_api_types::ApiError::Internal(format!("node {} has no agent here", target.node_id)))
    }
}

/// Knows no job and no package.
struct NoJobs;

#[async_trait::async_trait]
impl JobsApi for NoJobs {
    async fn submit(&self, request: oxray_api_types::SubmitRequest) -> Result<String, oxray_api_types::ApiError> {
        Ok(request.submission_id.unwrap_or_else(|| "raysubmit_new".into()))
    }
    fn job(&self, _id: &str) -> Option<oxray_api_types::JobDetails> {
        None
    }
    fn jobs(&self) -> Vec<oxray_api_types::JobDetails> {
        Vec::new()
    }
    async fn stop(&self, id: &str) -> Result<bool, oxray_api_types::ApiError> {
        Err(oxray_api_types::not_found(id))
    }
    async fn delete(&self, id: &str) -> Result<(), oxray_api_types::ApiError> {
        Err(oxray_api_types::not_found(id))
    }
    async fn logs(&self, id: &str, _follow: bool) -> Result<ByteStream, oxray_api_types::ApiError> {
        Err(oxray_api_types::not_found(id))
    }
    async fn wait_terminal(&self, _id: &str, _timeout: std::time::Duration) {}
    fn package_exists(&self, _name: &str) -> bool {
        false
    }
    async fn put_package(&self, _name: &str, _body: ByteStream, _limit: u64) -> Result<(), oxray_api_types::ApiError> {
        Ok(())
    }
}

fn node(state: NodeState, head: bool) -> NodeInfo {
    let mut total = ResourceSet::new();
    total.set("CPU", 4.0).unwrap();
    total.set("node:127.0.0.1", 1.0).unwrap();
    NodeInfo {
        node_id: NodeId::random(),
        node_ip: "127.0.0.1".into(),
        node_name: "n".into(),
        is_head_node: head,
        state,
        state_message: None,
        resources_available: total.clone(),
        resources_total: total,
        labels: Default::default(),
        start_time_ms: 5,
        end_time_ms: 0,
        pid: 1,
        agent_port: 0,
    }
}

fn app() -> Router {
    router(
        ApiState {
            view: Arc::new(FixedView(vec![node(NodeState::Alive, true), node(NodeState::Dead, false)])),
            jobs: Arc::new(NoJobs),
            token: Token::parse("s3cret").unwrap(),
            session_name: "session_x".into(),
            max_package_bytes: crate::MAX_PACKAGE_BYTES,
        },
        crate::Documented::new(true),
    )
}

async fn get(uri: &str, header: Option<(&str, &str)>) -> (StatusCode, String) {
    send(Request::get(uri), header, Body::empty()).await
}

async fn send(mut req: axum::http::request::Builder, header: Option<(&str, &str)>, body: Body) -> (StatusCode, String) {
    if let Some((k, v)) = header {
        req = req.header(k, v);
    }
    let resp = app().oneshot(req.body(body).unwrap()).await.unwrap();
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

const AUTH: Option<(&str, &str)> = Some(("authorization", "Bearer s3cret"));

#[tokio::test]
async fn version_and_health_need_no_token() {
    let (status, body) = get("/api/version", None).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["version"], "4");
    assert_eq!(v["ray_version"], "2.60.0");
    assert_eq!(get("/api/ray/version", None).await, (StatusCode::OK, body));
    assert_eq!(get("/api/gcs_healthz", None).await, (StatusCode::OK, "success".into()));
}

#[tokio::test]
async fn everything_else_needs_the_token() {
    for uri in ["/api/v0/nodes", "/api/cluster_status", "/metrics"] {
        assert_eq!(get(uri, None).await.0, StatusCode::UNAUTHORIZED, "{uri}");
        assert_eq!(get(uri, Some(("authorization", "Bearer nope"))).await.0, StatusCode::FORBIDDEN, "{uri}");
        assert_eq!(get(uri, AUTH).await.0, StatusCode::OK, "{uri}");
    }
    assert_eq!(get("/api/nowhere", None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(get("/api/nowhere", AUTH).await.0, StatusCode::NOT_FOUND);
    let proxied = get("/api/v0/nodes", Some(("x-ray-authorization", "Bearer s3cret"))).await;
    assert_eq!(proxied.0, StatusCode::OK);
    let cookie = get("/metrics", Some(("cookie", "a=b; ray-authentication-token=s3cret"))).await;
    assert_eq!(cookie.0, StatusCode::OK);
}

#[tokio::test]
async fn nodes_follow_rays_envelope_and_filters() {
    let (status, body) =
        get("/api/v0/nodes?limit=100&detail=True&filter_keys=state&filter_predicates=%3D&filter_values=alive", AUTH)
            .await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["result"], true);
    let list = &v["data"]["result"];
    assert_eq!((list["total"].as_u64(), list["num_filtered"].as_u64()), (Some(2), Some(1)));
    let row = &list["result"][0];
    assert_eq!(row["state"], "ALIVE");
    assert_eq!(row["is_head_node"], true);
    assert_eq!(row["start_time_ms"], 5);
    assert_eq!(row["resources_total"]["CPU"], 4.0);
}

#[tokio::test]
async fn bad_node_queries_are_400_with_reason() {
    for uri in [
        "/api/v0/nodes?limit=0",
        "/api/v0/nodes?limit=20000",
        "/api/v0/nodes?filter_keys=color&filter_predicates=%3D&filter_values=red",
        "/api/v0/nodes?detail=maybe",
    ] {
        let (status, body) = get(uri, AUTH).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["result"], false);
        assert!(!v["msg"].as_str().unwrap().is_empty());
    }
}

#[tokio::test]
async fn metrics_count_nodes_by_state() {
    let (_, body) = get("/metrics", AUTH).await;
    assert!(body.contains("oxray_cluster_nodes{state=\"ALIVE\"} 1"), "{body}");
    assert!(body.contains("oxray_cluster_nodes{state=\"DEAD\"} 1"), "{body}");
    assert!(body.contains("oxray_node_resources_total{"), "{body}");
    assert!(!body.contains("node:127.0.0.1"), "{body}");
    assert!(body.contains("oxray_tasks{state=\"RUNNING\",name=\"g\"} 1"), "{body}");
}

#[tokio::test]
async fn jobs_endpoints_answer_as_rays() {
    assert_eq!(get("/api/jobs/", None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(get("/api/jobs/", AUTH).await, (StatusCode::OK, "[]".into()));
    assert_eq!(get("/api/jobs/nope", AUTH).await, (StatusCode::NOT_FOUND, "Job nope does not exist".into()));
    let (status, body) =
        send(Request::post("/api/jobs/"), AUTH, Body::from(r#"{"entrypoint": "echo", "submission_id": "abc"}"#)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        serde_json::json!({"job_id": "abc", "submission_id": "abc"})
    );
    let (status, body) = send(Request::post("/api/jobs/"), AUTH, Body::from(r#"{"entrypoint": 1}"#)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("entrypoint must be a string"), "{body}");
}

#[tokio::test]
async fn autoscaling_is_turned_on_and_off_with_a_checked_body() {
    let put = |body: &'static str| {
        send(Request::put("/api/autoscaling").header("content-type", "application/json"), AUTH, Body::from(body))
    };
    let (status, body) = put(r#"{"enabled": true}"#).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("Autoscaling is on."), "{body}");
    for bad in [r#"{"enabled": "yes"}"#, r#"{}"#, r#"{"enabled": true, "x": 1}"#, "not json"] {
        let (status, body) = put(bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(body.contains(r#"expected {\"enabled\": true or false}"#), "{body}");
    }
    let (status, _) = send(Request::put("/api/autoscaling"), None, Body::from(r#"{"enabled": true}"#)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (_, status) = get_json("/api/cluster_status").await;
    assert_eq!(status["data"]["autoscaling_enabled"], false, "the fixed view is not autoscaled");
}

#[tokio::test]
async fn package_names_are_checked() {
    assert_eq!(get("/api/packages/gcs/_ray_pkg_ab.zip", AUTH).await.0, StatusCode::NOT_FOUND);
    assert_eq!(get("/api/packages/gcs/evil.sh", AUTH).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(get("/api/packages/s3/_ray_pkg_ab.zip", AUTH).await.0, StatusCode::BAD_REQUEST);
    let (status, _) = send(Request::put("/api/packages/gcs/..zip"), AUTH, Body::from("x")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_page_is_public_and_the_data_is_not() {
    let (status, page) = get("/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("/static/app.js"));
    assert_eq!(get("/static/app.js", None).await.0, StatusCode::OK);
    assert_eq!(get("/static/nope.js", None).await.0, StatusCode::NOT_FOUND);
    for uri in ["/api/ui/jobs", "/api/ui/events", "/api/cluster_status"] {
        assert_eq!(get(uri, None).await.0, StatusCode::UNAUTHORIZED, "{uri}");
    }
}

#[tokio::test]
async fn signing_in_sets_the_token_cookie() {
    let (status, _) =
        send(Request::post("/api/authenticate"), Some(("authorization", "Bearer wrong")), Body::empty()).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let resp = app()
        .oneshot(
            Request::post("/api/authenticate").header("authorization", "Bearer s3cret").body(Body::empty()).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.starts_with("ray-authentication-token=s3cret;") && cookie.contains("HttpOnly"), "{cookie}");
    let page = get("/api/ui/jobs?limit=5", Some(("cookie", "ray-authentication-token=s3cret"))).await;
    assert_eq!(page.0, StatusCode::OK);
    assert!(page.1.contains("\"total\":0"), "{}", page.1);
}

async fn get_json(uri: &str) -> (StatusCode, serde_json::Value) {
    let (status, body) = get(uri, AUTH).await;
    (status, serde_json::from_str(&body).unwrap())
}

#[tokio::test]
async fn task_lists_filter_and_summarize_in_rays_envelope() {
    let (status, body) = get_json(
        "/api/v0/tasks?limit=10&detail=False&filter_keys=STATE&filter_predicates=%3D&filter_values=running&timeout=24",
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let list = &body["data"]["result"];
    assert_eq!((list["total"].clone(), list["num_filtered"].clone()), (serde_json::json!(2), serde_json::json!(1)));
    assert_eq!(list["result"][0]["task_id"], "a");
    assert!(list["result"][0].get("events").is_none());
    let (status, body) = get_json("/api/v0/tasks?filter_keys=colour&filter_predicates=%3D&filter_values=red").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["result"], false);
    assert!(body["msg"].as_str().unwrap().contains("not supported"));
    let (status, body) = get_json("/api/v0/tasks/summarize?timeout=30").await;
    assert_eq!(status, StatusCode::OK);
    let cluster = &body["data"]["result"]["result"]["node_id_to_summary"]["cluster"];
    assert_eq!(cluster["summary"]["f"]["state_counts"]["FINISHED"], 1);
    let (status, body) = get_json("/api/v0/actors").await;
    assert_eq!((status, body["data"]["result"]["total"].clone()), (StatusCode::OK, serde_json::json!(0)));
}

#[tokio::test]
async fn every_operation_the_document_says_needs_the_token_refuses_a_call_without_it() {
    let (_, body) = get("/api/openapi.json", AUTH).await;
    let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
    let mut checked = 0;
    for (path, methods) in doc["paths"].as_object().unwrap() {
        let uri = path.replace(['{', '}'], "");
        for (method, operation) in methods.as_object().unwrap() {
            if operation.get("security").is_none() {
                continue;
            }
            let request = Request::builder().method(method.to_uppercase().as_str()).uri(&uri);
            let (status, _) = send(request, None, Body::empty()).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
            checked += 1;
        }
    }
    assert!(checked > 30, "{checked} operations");
}
