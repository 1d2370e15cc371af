//! The controller's loop against a double of the actor host: replicas started, failed
//! constructors counted, health checks, user_config updates, rolling updates and deletion.

use oxray_serve::controller::Controller;
use oxray_serve::plan::AppStatus;
use oxray_serve::{ActorHost, AppSpec, CallError, NewReplica, Placed, ReplicaCalls, StateStore};
use serde_pickle::{SerOptions, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Fake {
    created: Mutex<Vec<NewReplica>>,
    killed: Mutex<Vec<String>>,
    calls: Mutex<Vec<(String, String)>>,
    /// Replies by method; `__serve_ready__` defaults to ok.
    replies: Mutex<HashMap<String, serde_json::Value>>,
    dead: Mutex<Vec<String>>,
    /// Creations refused before one succeeds (a cluster with no node yet).
    refusals: Mutex<u32>,
}

fn pickled(text: String) -> Vec<u8> {
    serde_pickle::value_to_vec(&Value::String(text), SerOptions::new()).unwrap()
}

#[async_trait::async_trait]
impl ActorHost for Fake {
    async fn create(&self, replica: NewReplica) -> Result<Placed, String> {
        {
            let mut refusals = self.refusals.lock().unwrap();
            if *refusals > 0 {
                *refusals -= 1;
                return Err("no alive node can run replicas".into());
            }
        }
        let mut created = self.created.lock().unwrap();
        created.push(replica);
        Ok(Placed { actor_id: format!("actor{}", created.len()), worker_address: "w".into(), node_id: "n".into() })
    }
    async fn kill(&self, actor_id: &str, _address: &str, _name: &str) {
        self.killed.lock().unwrap().push(actor_id.to_string());
    }
}

#[async_trait::async_trait]
impl ReplicaCalls for Fake {
    async fn call(&self, actor_id: &str, _address: &str, method: &str, _args: Vec<u8>) -> Result<Vec<u8>, CallError> {
        self.calls.lock().unwrap().push((actor_id.to_string(), method.to_string()));
        if self.dead.lock().unwrap().iter().any(|d| d == actor_id) {
            return Err(CallError::Died("gone".into()));
        }
        let reply =
            self.replies.lock().unwrap().get(method).cloned().unwrap_or(serde_json::json!({"ok": true, "pid": 7}));
        Ok(pickled(reply.to_string()))
    }
    async fn stream(
        &self,
        _actor_id: &str,
        _address: &str,
        _method: &str,
        _args: Vec<u8>,
    ) -> Result<tokio::sync::mpsc::Receiver<Result<Vec<u8>, CallError>>, CallError> {
        Err(CallError::Failed("the controller never streams".into()))
    }
}

#[derive(Default)]
struct Memory(Mutex<BTreeMap<String, Vec<u8>>>);

impl StateStore for Memory {
    fn save_app(&self, name: &str, record: &[u8]) -> Result<(), String> {
        self.0.lock().unwrap().insert(name.into(), record.to_vec());
        Ok(())
    }
    fn delete_app(&self, name: &str) -> Result<(), String> {
        self.0.lock().unwrap().remove(name);
        Ok(())
    }
    fn load_apps(&self) -> Result<Vec<(String, Vec<u8>)>, String> {
        Ok(self.0.lock().unwrap().iter().filter(|(k, _)| !k.is_empty()).map(|(k, v)| (k.clone(), v.clone())).collect())
    }
    fn save_config(&self, record: Option<&[u8]>) -> Result<(), String> {
        let mut map = self.0.lock().unwrap();
        match record {
            Some(r) => map.insert(String::new(), r.to_vec()),
            None => map.remove(""),
        };
        Ok(())
    }
    fn load_config(&self) -> Result<Option<Vec<u8>>, String> {
        Ok(self.0.lock().unwrap().get("").cloned())
    }
}

fn app(replicas: u32, version: &str, user_config: serde_json::Value) -> AppSpec {
    serde_json::from_value(serde_json::json!({
        "route_prefix": "/", "ingress": "D", "python": "python3",
        "deployments": [{"name": "D", "num_replicas": replicas, "definition": "AAEC", "version": version,
                         "user_config": user_config, "health_check_period_s": 0.05}]
    }))
    .unwrap()
}

async fn settle(controller: &Arc<Controller>, until: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    for _ in 0..200 {
        controller.reconcile();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let details = controller.details();
        if until(&details) {
            return details;
        }
    }
    panic!("never settled: {}", controller.details());
}

fn status(d: &serde_json::Value) -> String {
    d["applications"]["a"]["status"].as_str().unwrap_or("").to_string()
}

fn replica_states(d: &serde_json::Value) -> Vec<String> {
    d["applications"]["a"]["deployments"]["D"]["replicas"]
        .as_array()
        .map(|rs| rs.iter().map(|r| r["state"].as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn replicas_start_and_the_app_runs_then_deletion_stops_them() {
    let host = Arc::new(Fake::default());
    let store = Arc::new(Memory::default());
    let c = Controller::open(host.clone(), store.clone()).unwrap();
    c.deploy("a", app(2, "v1", serde_json::Value::Null)).unwrap();
    let d = settle(&c, |d| status(d) == "RUNNING").await;
    assert_eq!(replica_states(&d), vec!["RUNNING", "RUNNING"]);
    assert_eq!(host.created.lock().unwrap().len(), 2);
    assert_eq!(c.route("a").unwrap().replicas.len(), 2);
    assert_eq!(c.routes(), vec![("/".to_string(), "a".to_string())]);
    assert!(store.0.lock().unwrap().contains_key("a"));

    assert!(c.delete("a"));
    settle(&c, |d| d["applications"].as_object().unwrap().is_empty()).await;
    let calls = host.calls.lock().unwrap().clone();
    assert_eq!(calls.iter().filter(|(_, m)| m == "__serve_stop__").count(), 2, "{calls:?}");
    assert_eq!(host.killed.lock().unwrap().len(), 2);
    assert!(store.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_failing_constructor_ends_in_deploy_failed_after_three_tries() {
    let host = Arc::new(Fake::default());
    host.replies
        .lock()
        .unwrap()
        .insert("__serve_ready__".into(), serde_json::json!({"ok": false, "error": "ZeroDivisionError"}));
    let c = Controller::open(host.clone(), Arc::new(Memory::default())).unwrap();
    c.deploy("a", app(1, "v1", serde_json::Value::Null)).unwrap();
    let d = settle(&c, |d| status(d) == "DEPLOY_FAILED").await;
    assert!(d["applications"]["a"]["message"].as_str().unwrap().contains("ZeroDivisionError"), "{d}");
    // No fourth try, and each failed replica was ended.
    for _ in 0..20 {
        c.reconcile();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(host.created.lock().unwrap().len(), 3);
    assert_eq!(host.killed.lock().unwrap().len(), 3);
    assert_eq!(c.route("a").unwrap().status, AppStatus::DeployFailed);
}

#[tokio::test]
async fn a_replica_failing_health_checks_is_replaced() {
    let host = Arc::new(Fake::default());
    let c = Controller::open(host.clone(), Arc::new(Memory::default())).unwrap();
    c.deploy("a", app(1, "v1", serde_json::Value::Null)).unwrap();
    settle(&c, |d| status(d) == "RUNNING").await;
    host.replies.lock().unwrap().insert("__serve_health__".into(), serde_json::json!({"ok": false, "error": "sick"}));
    settle(&c, |_| host.killed.lock().unwrap().len() == 1).await;
    host.replies.lock().unwrap().remove("__serve_health__");
    let d = settle(&c, |d| status(d) == "RUNNING").await;
    assert_eq!(host.created.lock().unwrap().len(), 2);
    assert_eq!(d["applications"]["a"]["deployments"]["D"]["replicas"][0]["actor_id"], "actor2");
}

#[tokio::test]
async fn a_dead_replica_is_replaced() {
    let host = Arc::new(Fake::default());
    let c = Controller::open(host.clone(), Arc::new(Memory::default())).unwrap();
    c.deploy("a", app(1, "v1", serde_json::Value::Null)).unwrap();
    settle(&c, |d| status(d) == "RUNNING").await;
    host.dead.lock().unwrap().push("actor1".into());
    let d = settle(&c, |d| {
        d["applications"]["a"]["deployments"]["D"]["replicas"][0]["actor_id"] == "actor2" && status(d) == "RUNNING"
    })
    .await;
    assert_eq!(replica_states(&d), vec!["RUNNING"]);
}

#[tokio::test]
async fn user_config_changes_in_place_and_new_code_rolls() {
    let host = Arc::new(Fake::default());
    let c = Controller::open(host.clone(), Arc::new(Memory::default())).unwrap();
    c.deploy("a", app(1, "v1", serde_json::json!({"t": 1}))).unwrap();
    settle(&c, |d| status(d) == "RUNNING").await;
    c.deploy("a", app(1, "v1", serde_json::json!({"t": 2}))).unwrap();
    settle(&c, |_| host.calls.lock().unwrap().iter().any(|(_, m)| m == "__serve_reconfigure__")).await;
    settle(&c, |d| status(d) == "RUNNING").await;
    assert_eq!(host.created.lock().unwrap().len(), 1, "no restart for a user_config change");

    c.deploy("a", app(1, "v2", serde_json::json!({"t": 2}))).unwrap();
    let d = settle(&c, |d| status(d) == "RUNNING" && replica_states(d).len() == 1).await;
    assert_eq!(host.created.lock().unwrap().len(), 2);
    assert_eq!(host.killed.lock().unwrap().clone(), vec!["actor1".to_string()]);
    assert_eq!(d["applications"]["a"]["deployments"]["D"]["replicas"][0]["actor_id"], "actor2");
}

#[tokio::test]
async fn state_survives_a_restart_and_prefixes_stay_unique() {
    let host = Arc::new(Fake::default());
    let store = Arc::new(Memory::default());
    let c = Controller::open(host.clone(), store.clone()).unwrap();
    c.deploy("a", app(1, "v1", serde_json::Value::Null)).unwrap();
    settle(&c, |d| status(d) == "RUNNING").await;
    let err = c.deploy("b", app(1, "v1", serde_json::Value::Null)).unwrap_err();
    assert!(err.to_string().contains("Prefix / is being used by application \"a\""), "{err}");

    let again = Controller::open(host.clone(), store).unwrap();
    let d = settle(&again, |d| status(d) == "RUNNING").await;
    assert_eq!(replica_states(&d), vec!["RUNNING"]);
    assert_eq!(d["applications"]["a"]["deployments"]["D"]["replicas"][0]["actor_id"], "actor1");
    assert_eq!(host.created.lock().unwrap().len(), 1, "the running replica is kept");
}

#[tokio::test]
async fn a_replica_whose_reconfigure_fails_is_ended_and_replaced() {
    let host = Arc::new(Fake::default());
    let c = Controller::open(host.clone(), Arc::new(Memory::default())).unwrap();
    c.deploy("a", app(1, "v1", serde_json::json!({"t": 1}))).unwrap();
    settle(&c, |d| status(d) == "RUNNING").await;
    host.replies
        .lock()
        .unwrap()
        .insert("__serve_reconfigure__".into(), serde_json::json!({"ok": false, "error": "KeyError"}));
    c.deploy("a", app(1, "v1", serde_json::json!({"t": 2}))).unwrap();
    settle(&c, |_| host.killed.lock().unwrap().contains(&"actor1".to_string())).await;
    host.replies.lock().unwrap().remove("__serve_reconfigure__");
    let d = settle(&c, |d| status(d) == "RUNNING").await;
    assert_eq!(d["applications"]["a"]["deployments"]["D"]["replicas"][0]["actor_id"], "actor2");
}

#[tokio::test]
async fn an_autoscaling_deployment_follows_its_load_within_bounds() {
    let host = Arc::new(Fake::default());
    host.replies.lock().unwrap().insert("__serve_metrics__".into(), serde_json::json!({"in_flight": 3}));
    let c = Controller::open(host.clone(), Arc::new(Memory::default())).unwrap();
    let mut spec = app(1, "v1", serde_json::Value::Null);
    spec.deployments[0].autoscaling_config = Some(
        serde_json::from_value(serde_json::json!({
            "min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 1, "upscale_delay_s": 0,
            "downscale_delay_s": 0, "look_back_period_s": 0.3, "metrics_interval_s": 0.1
        }))
        .unwrap(),
    );
    c.deploy("a", spec).unwrap();
    // Each of the replicas answers 3 in flight: the count grows to the bound.
    let d = settle(&c, |d| replica_states(d) == ["RUNNING"; 4]).await;
    assert_eq!(d["applications"]["a"]["deployments"]["D"]["target_num_replicas"], 4);
    host.replies.lock().unwrap().insert("__serve_metrics__".into(), serde_json::json!({"in_flight": 0}));
    settle(&c, |d| replica_states(d) == ["RUNNING"]).await;
}

mod declarative {
    use super::*;
    use oxray_serve::builds::Declarative;
    use oxray_serve::wire::BUILDER_CLASS;

    fn built() -> serde_json::Value {
        serde_json::json!({"app": serde_json::to_value(app(1, "v1", serde_json::Value::Null)).unwrap()})
    }

    fn config(apps: serde_json::Value) -> Vec<u8> {
        serde_json::json!({"applications": apps}).to_string().into_bytes()
    }

    fn builders(host: &Fake) -> usize {
        host.created.lock().unwrap().iter().filter(|r| r.class == BUILDER_CLASS).count()
    }

    async fn until(c: &Arc<Controller>, what: impl Fn() -> bool) {
        for _ in 0..400 {
            c.reconcile();
            tokio::time::sleep(Duration::from_millis(10)).await;
            if what() {
                return;
            }
        }
        panic!("never happened: {}", c.details());
    }

    #[tokio::test]
    async fn a_config_is_built_in_its_runtime_env_then_deployed_and_left_alone_when_unchanged() {
        let host = Arc::new(Fake::default());
        host.replies.lock().unwrap().insert("build".into(), built());
        let store = Arc::new(Memory::default());
        let c = Controller::open(host.clone(), store.clone()).unwrap();
        let d = Declarative::new(c.clone(), host.clone(), store.clone());
        let app_config =
            serde_json::json!({"name": "a", "import_path": "m:app", "runtime_env": {"env_vars": {"K": "v"}}});
        d.apply(&config(serde_json::json!([app_config.clone()]))).unwrap();
        until(&c, || status(&c.details()) == "RUNNING").await;
        let builder = host.created.lock().unwrap()[0].clone();
        assert_eq!(builder.class, BUILDER_CLASS);
        assert_eq!(builder.resources["CPU"], 0.0);
        assert_eq!(builder.env["K"], "v");
        assert!(host.killed.lock().unwrap().contains(&"actor1".to_string()), "the builder is ended");
        let details = c.details();
        assert_eq!(details["applications"]["a"]["source"], "declarative");
        assert_eq!(details["applications"]["a"]["deployed_app_config"], app_config);
        assert!(store.load_config().unwrap().is_some());

        d.apply(&config(serde_json::json!([app_config]))).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(builders(&host), 1, "an unchanged app is not built again");
        assert!(d.view().builds.is_empty());
    }

    #[tokio::test]
    async fn a_builder_the_cluster_cannot_start_yet_is_tried_again() {
        let host = Arc::new(Fake::default());
        host.replies.lock().unwrap().insert("build".into(), built());
        *host.refusals.lock().unwrap() = 2;
        let store = Arc::new(Memory::default());
        let c = Controller::open(host.clone(), store.clone()).unwrap();
        let d = Declarative::new(c.clone(), host.clone(), store);
        d.apply(&config(serde_json::json!([{"name": "a", "import_path": "m:app"}]))).unwrap();
        until(&c, || d.view().builds.get("a").is_some_and(|b| b.waiting.is_some())).await;
        assert!(d.view().builds["a"].waiting.as_ref().unwrap().contains("no alive node"));
        until(&c, || status(&c.details()) == "RUNNING").await;
    }

    #[tokio::test]
    async fn apps_left_out_are_deleted_but_serve_run_s_stay() {
        let host = Arc::new(Fake::default());
        host.replies.lock().unwrap().insert("build".into(), built());
        let store = Arc::new(Memory::default());
        let c = Controller::open(host.clone(), store.clone()).unwrap();
        let d = Declarative::new(c.clone(), host.clone(), store);
        let mut mine = app(1, "v1", serde_json::Value::Null);
        mine.route_prefix = Some("/mine".into());
        c.deploy("mine", mine).unwrap();
        d.apply(&config(serde_json::json!([{"name": "a", "import_path": "m:app"}]))).unwrap();
        until(&c, || status(&c.details()) == "RUNNING").await;
        let err = d.apply(&config(serde_json::json!([{"name": "b", "import_path": "m:b", "route_prefix": "/mine"}])));
        assert!(err.unwrap_err().contains("Prefix /mine is being used by application \"mine\""));
        d.apply(&config(serde_json::json!([]))).unwrap();
        until(&c, || c.details()["applications"].get("a").is_none()).await;
        assert!(c.details()["applications"].get("mine").is_some());
    }

    #[tokio::test]
    async fn a_failed_build_keeps_its_reason_and_a_restart_resumes_what_was_not_built() {
        let host = Arc::new(Fake::default());
        host.replies.lock().unwrap().insert("build".into(), serde_json::json!({"error": "ModuleNotFoundError: m"}));
        let store = Arc::new(Memory::default());
        let c = Controller::open(host.clone(), store.clone()).unwrap();
        let d = Declarative::new(c.clone(), host.clone(), store.clone());
        d.apply(&config(serde_json::json!([{"name": "a", "import_path": "m:app"}]))).unwrap();
        until(&c, || d.view().builds.get("a").is_some_and(|b| b.failed.is_some())).await;
        assert!(d.view().builds["a"].failed.as_ref().unwrap().contains("ModuleNotFoundError: m"));
        assert!(!d.building());

        // A new head over the same store: the stored config is built again, now with success.
        host.replies.lock().unwrap().insert("build".into(), built());
        let c2 = Controller::open(host.clone(), store.clone()).unwrap();
        let d2 = Declarative::new(c2.clone(), host.clone(), store);
        d2.resume();
        until(&c2, || status(&c2.details()) == "RUNNING").await;
        assert_eq!(builders(&host), 2);
        assert!(d2.view().config.is_some());
    }
}

#[tokio::test]
async fn an_external_scaler_sets_the_count_only_where_enabled_until_the_next_deploy() {
    use oxray_serve::controller::ScaleError;
    let host = Arc::new(Fake::default());
    let c = Controller::open(host.clone(), Arc::new(Memory::default())).unwrap();
    c.deploy("a", app(1, "v1", serde_json::Value::Null)).unwrap();
    settle(&c, |d| status(d) == "RUNNING").await;
    assert!(matches!(c.scale("a", "D", 3), Err(ScaleError::NotEnabled(_))));
    assert_eq!(c.scale("a", "nope", 3), Err(ScaleError::NotFound));
    assert_eq!(c.scale("b", "D", 3), Err(ScaleError::NotFound));
    let mut spec = app(1, "v1", serde_json::Value::Null);
    spec.external_scaler_enabled = true;
    c.deploy("a", spec.clone()).unwrap();
    c.scale("a", "D", 3).unwrap();
    settle(&c, |d| replica_states(d) == ["RUNNING"; 3]).await;
    c.deploy("a", spec).unwrap();
    settle(&c, |d| replica_states(d) == ["RUNNING"]).await;
}
