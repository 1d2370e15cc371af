use crate::cluster;
use oxray_testkit::count_states;
use std::time::Duration;

#[tokio::test]
async fn http_api_serves_rays_node_shape_behind_the_token() {
    let c = cluster(2);
    c.wait_for(Duration::from_secs(15), |n| count_states(n) == (2, 0)).await.unwrap();
    let http = reqwest::Client::new();
    let url = |path: &str| format!("{}{path}", c.dashboard_url());

    let version: serde_json::Value = http.get(url("/api/version")).send().await.unwrap().json().await.unwrap();
    assert_eq!(version["version"], "4");
    assert_eq!(http.get(url("/api/gcs_healthz")).send().await.unwrap().status(), 200);

    let missing = http.get(url("/api/v0/nodes")).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    let wrong = http.get(url("/api/v0/nodes")).bearer_auth("nope").send().await.unwrap();
    assert_eq!(wrong.status(), 403);

    let body: serde_json::Value = http
        .get(url("/api/v0/nodes?limit=100&detail=False"))
        .bearer_auth(c.token().as_str())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["result"], true);
    let list = &body["data"]["result"];
    assert_eq!(list["total"], 2);
    assert_eq!(list["num_after_truncation"], 2);
    let row = &list["result"][0];
    for key in
        ["node_id", "node_ip", "is_head_node", "state", "state_message", "node_name", "resources_total", "labels"]
    {
        assert!(row.get(key).is_some(), "missing {key} in {row}");
    }
    assert!(row.get("start_time_ms").is_none());
    assert_eq!(row["node_id"].as_str().unwrap().len(), 56);

    let status: serde_json::Value = http
        .get(url("/api/cluster_status"))
        .bearer_auth(c.token().as_str())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["data"]["cluster_status"]["resources_total"]["CPU"], 2.0);

    let metrics = http.get(url("/metrics")).bearer_auth(c.token().as_str()).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("oxray_cluster_nodes{state=\"ALIVE\"} 2"), "{metrics}");
}
