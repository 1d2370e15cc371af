//! Serve's controller: keeps every deployment at its replicas, replaces the ones that die
//! or fail their health checks, applies updates (user_config in place, new code by rolling
//! replacement), and answers for the state. Decisions are `plan`'s; this module carries
//! them out through the `ActorHost` and records the outcome.

use crate::host::{ActorHost, CallError, NewReplica, StateStore};
use crate::plan::{self, AppStatus, DeploymentStatus, Replica, ReplicaState, Step};
use crate::routing::{ProxyLocation, Route, Table};
use crate::spec::{self, AppSpec, DeploymentSpec, HttpOptions};
use crate::wire::{self, Arg};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

mod rounds;
mod routing_view;

use routing_view::{prefixes_of, route_of};

/// How often the controller looks at every deployment even when nothing woke it.
const TICK: Duration = Duration::from_millis(200);
/// Health checks failed in a row after which a replica is replaced.
const HEALTH_FAILURES: u32 = 3;
/// A replica that does not say its load within this long counts as idle.
const METRICS_TIMEOUT: Duration = Duration::from_secs(2);
/// A replica not placed after this long is waiting for resources, and its deployment says so.
const UNPLACED_S: f64 = 10.0;

pub fn now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

fn new_replica_id() -> String {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes).expect("the system's random source");
    hex::encode(bytes)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Deployment {
    spec: DeploymentSpec,
    replicas: Vec<Replica>,
    /// Constructor failures in a row.
    failures: u32,
    message: String,
    was_healthy: bool,
    /// No longer in the application: its replicas stop, then it goes.
    #[serde(default)]
    removed: bool,
    /// The replica count the autoscaler, or an external scaler, chose.
    #[serde(default)]
    autoscaled: Option<u32>,
    #[serde(skip)]
    load: crate::autoscale::Load,
    #[serde(skip)]
    busy: HashSet<String>,
    #[serde(skip)]
    checked: HashMap<String, Instant>,
}

impl Deployment {
    fn new(spec: DeploymentSpec) -> Self {
        Self {
            spec,
            replicas: Vec::new(),
            failures: 0,
            message: String::new(),
            was_healthy: false,
            removed: false,
            autoscaled: None,
            load: Default::default(),
            busy: HashSet::new(),
            checked: HashMap::new(),
        }
    }

    fn target(&self, deleting: bool) -> u32 {
        if deleting || self.removed {
            0
        } else {
            self.wanted()
        }
    }

    /// The replicas it should have: the autoscaler's choice within its bounds, else an
    /// external scaler's, else the configured count.
    fn wanted(&self) -> u32 {
        match (&self.spec.autoscaling_config, self.autoscaled) {
            (Some(p), Some(n)) => n.clamp(p.min_replicas, p.max_replicas.max(p.min_replicas)),
            (None, Some(n)) => n,
            _ => self.spec.num_replicas,
        }
    }

    fn status(&self) -> DeploymentStatus {
        plan::deployment_status(
            self.wanted(),
            &self.spec.version,
            &self.spec.user_config,
            &self.replicas,
            self.failures,
            self.spec.failure_limit(),
            self.was_healthy,
        )
    }

    fn replica_mut(&mut self, id: &str) -> Option<&mut Replica> {
        self.replicas.iter_mut().find(|r| r.replica_id == id)
    }
}

/// Where an application came from: `serve.run`, or a declarative config (kept exactly as
/// submitted: Ray reports it back).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    #[default]
    Imperative,
    Declarative(serde_json::Value),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct App {
    spec: AppSpec,
    #[serde(default)]
    origin: Origin,
    deployed_s: f64,
    deleting: bool,
    was_running: bool,
    deployments: BTreeMap<String, Deployment>,
}

impl App {
    fn statuses(&self) -> Vec<DeploymentStatus> {
        self.deployments.values().filter(|d| !d.removed).map(Deployment::status).collect()
    }

    fn status(&self) -> AppStatus {
        plan::app_status(self.deleting, &self.statuses(), self.was_running)
    }

    fn message(&self) -> String {
        let failed: Vec<String> = self
            .deployments
            .values()
            .filter(|d| !d.message.is_empty() && d.status() != DeploymentStatus::Healthy)
            .map(|d| format!("Deployment '{}': {}", d.spec.name, d.message))
            .collect();
        failed.join("\n")
    }
}

#[derive(Default)]
struct State {
    apps: BTreeMap<String, App>,
    http: Option<HttpOptions>,
    location: ProxyLocation,
    /// Started on its own (`serve start`): the proxies run with no application, until a
    /// shutdown.
    started: bool,
}

impl State {
    /// The HTTP options of the running Serve; a Serve not running yet takes `wanted` and
    /// where its proxies run.
    fn options_in_force(
        &mut self,
        wanted: impl FnOnce() -> HttpOptions,
        location: Option<ProxyLocation>,
    ) -> HttpOptions {
        if self.http.is_none() {
            if let Some(location) = location {
                self.location = location;
            }
        }
        self.http.get_or_insert_with(wanted).clone()
    }
}

pub struct Controller {
    host: Arc<dyn ActorHost>,
    store: Arc<dyn StateStore>,
    state: Mutex<State>,
    /// Something changed: the loop looks again now, and waiting requests retry.
    pub(crate) changed: Notify,
    pub(crate) routes_changed: tokio::sync::watch::Sender<u64>,
    /// Requests the HTTP proxy holds waiting for a replica with room, per application.
    pub(crate) queued: Arc<Mutex<HashMap<String, i64>>>,
    /// Requests handles in other processes hold, per deployment.
    pub(crate) handle_queued: Mutex<crate::handle_queues::HandleQueues>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScaleError {
    #[error("Application or Deployment not found")]
    NotFound,
    #[error("{0}")]
    NotEnabled(String),
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DeployError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Proxy(String),
}

impl Controller {
    /// The controller with the applications its store holds. Replicas recorded as running
    /// are checked at once; those that were starting are gone with the old controller.
    pub fn open(host: Arc<dyn ActorHost>, store: Arc<dyn StateStore>) -> Result<Arc<Self>, String> {
        let mut state = State::default();
        for (name, record) in store.load_apps()? {
            match serde_json::from_slice::<App>(&record) {
                Ok(mut app) => {
                    for d in app.deployments.values_mut() {
                        d.replicas.retain(|r| r.state != ReplicaState::Starting);
                    }
                    if state.http.is_none() {
                        state.http = app.spec.http_options.clone();
                        state.location = app.spec.proxy_location.unwrap_or_default();
                    }
                    state.apps.insert(name, app);
                }
                Err(e) => tracing::error!("cannot read the record of Serve application {name:?}: {e}"),
            }
        }
        Ok(Arc::new(Self {
            host,
            store,
            state: Mutex::new(state),
            changed: Notify::new(),
            routes_changed: tokio::sync::watch::Sender::new(0),
            queued: Arc::default(),
            handle_queued: Mutex::default(),
        }))
    }

    /// What a process's handles hold waiting, by (application, deployment); a deployment
    /// with nothing to run them on is looked at now.
    pub fn report_handle_queues(&self, process: &str, counts: &[(String, String, i64)]) {
        self.handle_queued.lock().expect("handle queues lock").report(process, counts, Instant::now());
        if counts.iter().any(|c| c.2 > 0) {
            self.changed.notify_one();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("serve state lock")
    }

    fn persist(&self, name: &str, app: &App) {
        let record = serde_json::to_vec(app).expect("serve state serializes");
        if let Err(e) = self.store.save_app(name, &record) {
            tracing::error!("cannot record Serve application {name:?}: {e}");
        }
    }

    fn touched(&self) {
        self.changed.notify_waiters();
        self.routes_changed.send_modify(|v| *v += 1);
    }

    /// Deploys or updates application `name` for `serve.run`. Returns the HTTP options of
    /// the proxy, to be started if it is not.
    pub fn deploy(&self, name: &str, spec: AppSpec) -> Result<HttpOptions, DeployError> {
        self.deploy_from(name, spec, Origin::Imperative)
    }

    /// Deploys or updates application `name`, recording where it came from.
    pub fn deploy_from(&self, name: &str, spec: AppSpec, origin: Origin) -> Result<HttpOptions, DeployError> {
        spec::validate(name, &spec).map_err(DeployError::Invalid)?;
        let mut state = self.lock();
        if let Some(prefix) = &spec.route_prefix {
            if let Some((other, _)) = state.apps.iter().find(|(other, app)| {
                other.as_str() != name && !app.deleting && app.spec.route_prefix.as_ref() == Some(prefix)
            }) {
                return Err(DeployError::Invalid(format!(
                    "Prefix {prefix} is being used by application \"{other}\". Failed to deploy application \"{name}\"."
                )));
            }
        }
        let http = state.options_in_force(|| spec.http_options.clone().unwrap_or_default(), spec.proxy_location);
        let app = state.apps.entry(name.to_string()).or_insert_with(|| App {
            spec: spec.clone(),
            origin: Origin::Imperative,
            deployed_s: 0.0,
            deleting: false,
            was_running: false,
            deployments: BTreeMap::new(),
        });
        let wanted: HashSet<&str> = spec.deployments.iter().map(|d| d.name.as_str()).collect();
        for d in app.deployments.values_mut() {
            d.removed = !wanted.contains(d.spec.name.as_str());
        }
        for d in &spec.deployments {
            match app.deployments.get_mut(&d.name) {
                Some(existing) => {
                    if existing.spec.version != d.version || existing.status() == DeploymentStatus::DeployFailed {
                        existing.failures = 0;
                        existing.message.clear();
                        existing.was_healthy = false;
                    }
                    // A deploy sets the count again (an external scaler's included), but an
                    // autoscaler keeps the scale it reached.
                    if d.autoscaling_config.is_none() || existing.spec.autoscaling_config.is_none() {
                        existing.autoscaled = None;
                    }
                    existing.spec = d.clone();
                    existing.removed = false;
                }
                None => {
                    app.deployments.insert(d.name.clone(), Deployment::new(d.clone()));
                }
            }
        }
        app.spec = spec;
        app.origin = origin;
        app.deleting = false;
        app.was_running = false;
        app.deployed_s = now_s();
        let app = app.clone();
        self.persist(name, &app);
        drop(state);
        self.touched();
        Ok(http)
    }

    /// Sets the replica count of a deployment, for an external scaler (Ray's
    /// `POST /api/v1/applications/{app}/deployments/{deployment}/scale`); a deploy resets it.
    pub fn scale(&self, app: &str, deployment: &str, replicas: u32) -> Result<(), ScaleError> {
        let mut state = self.lock();
        let Some(a) = state.apps.get_mut(app).filter(|a| !a.deleting) else { return Err(ScaleError::NotFound) };
        let enabled = a.spec.external_scaler_enabled;
        let Some(d) = a.deployments.get_mut(deployment).filter(|d| !d.removed) else {
            return Err(ScaleError::NotFound);
        };
        if !enabled {
            return Err(ScaleError::NotEnabled(format!(
                "External scaling is disabled for application '{app}': deploy it with external_scaler_enabled."
            )));
        }
        d.autoscaled = Some(replicas);
        // Scaling, not a replica lost: UPSCALING/DOWNSCALING until it is there.
        d.was_healthy = false;
        let a = a.clone();
        self.persist(app, &a);
        drop(state);
        self.touched();
        Ok(())
    }

    /// Starts deleting application `name`; false if there is none.
    pub fn delete(&self, name: &str) -> bool {
        let mut state = self.lock();
        let Some(app) = state.apps.get_mut(name) else { return false };
        app.deleting = true;
        let app = app.clone();
        self.persist(name, &app);
        drop(state);
        self.touched();
        true
    }

    /// Starts Serve with no application (`serve start`): the HTTP options in force (those of
    /// a running Serve, else `wanted`) and where proxies run (taken only by a Serve not
    /// running yet, as the options are).
    pub fn start_http(&self, wanted: &HttpOptions, location: Option<ProxyLocation>) -> HttpOptions {
        let options = {
            let mut state = self.lock();
            state.started = true;
            state.options_in_force(|| wanted.clone(), location)
        };
        self.touched();
        options
    }

    /// Starts deleting every application.
    pub fn delete_all(&self) {
        self.lock().started = false;
        let names: Vec<String> = self.lock().apps.keys().cloned().collect();
        for name in names {
            self.delete(&name);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.lock().apps.is_empty()
    }

    pub fn http_options(&self) -> Option<HttpOptions> {
        self.lock().http.clone()
    }

    /// The proxy's HTTP options: those in use, else `wanted`, which are then kept.
    pub fn http_options_or(&self, wanted: &HttpOptions) -> HttpOptions {
        self.lock().options_in_force(|| wanted.clone(), None)
    }

    /// Where each application not being deleted came from, and its route prefix.
    pub fn origins(&self) -> Vec<(String, Origin, Option<String>)> {
        let state = self.lock();
        state
            .apps
            .iter()
            .filter(|(_, a)| !a.deleting)
            .map(|(name, a)| (name.clone(), a.origin.clone(), a.spec.route_prefix.clone()))
            .collect()
    }

    /// Forgets the HTTP options once no application is left (the next deploy sets them).
    pub fn clear_http_if_empty(&self) -> bool {
        let mut state = self.lock();
        if !state.apps.is_empty() || state.started {
            return false;
        }
        if state.http.take().is_some() {
            drop(state);
            self.touched();
        }
        true
    }

    /// Route prefixes and their applications, for HTTP.
    pub fn routes(&self) -> Vec<(String, String)> {
        prefixes_of(&self.lock())
    }

    /// How to reach application `app`'s ingress deployment.
    pub fn route(&self, app: &str) -> Option<Route> {
        route_of(&self.lock(), app)
    }

    /// Where proxies run (Ray's `proxy_location`, from a declarative config).
    pub fn set_proxy_location(&self, location: ProxyLocation) {
        let changed = {
            let mut state = self.lock();
            std::mem::replace(&mut state.location, location) != location
        };
        if changed {
            self.touched();
        }
    }

    pub fn proxy_location(&self) -> ProxyLocation {
        self.lock().location
    }

    /// The routing state, for the proxies of other nodes.
    pub fn table(&self) -> Table {
        let state = self.lock();
        Table {
            http: state.http.clone(),
            location: state.location,
            prefixes: prefixes_of(&state),
            routes: state.apps.keys().filter_map(|name| route_of(&state, name).map(|r| (name.clone(), r))).collect(),
            nodes: state
                .apps
                .values()
                .flat_map(|a| a.deployments.values())
                .flat_map(|d| &d.replicas)
                .filter(|r| r.state == ReplicaState::Running && !r.node_id.is_empty())
                .map(|r| r.node_id.clone())
                .collect(),
            head_ip: String::new(),
        }
    }

    /// Wakes when the routing state may have changed.
    pub fn subscribe_routes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.routes_changed.subscribe()
    }

    /// A call to the replica failed because it is gone: replace it now rather than at its
    /// next health check.
    pub fn replica_died(&self, replica_id: &str) {
        let mut state = self.lock();
        for (name, app) in state.apps.iter_mut() {
            for d in app.deployments.values_mut() {
                if let Some(r) = d.replicas.iter().find(|r| r.replica_id == replica_id).cloned() {
                    d.replicas.retain(|r| r.replica_id != replica_id);
                    d.busy.remove(replica_id);
                    let app = app.clone();
                    self.persist(name, &app);
                    drop(state);
                    self.touched();
                    // Unreachable is not always dead: make sure it does not run on unseen.
                    let host = self.host.clone();
                    tokio::spawn(async move { host.kill(&r.actor_id, &r.worker_address, &r.actor_name).await });
                    return;
                }
            }
        }
    }

    /// The state as JSON: every application, deployment and replica.
    pub fn details(&self) -> serde_json::Value {
        let state = self.lock();
        let apps: serde_json::Map<String, serde_json::Value> = state
            .apps
            .iter()
            .map(|(name, a)| {
                let deployments: serde_json::Map<String, serde_json::Value> = a
                    .deployments
                    .values()
                    .filter(|d| !d.removed)
                    .map(|d| (d.spec.name.clone(), deployment_details(d)))
                    .collect();
                let (source, config) = match &a.origin {
                    Origin::Imperative => ("imperative", None),
                    Origin::Declarative(config) => ("declarative", Some(config)),
                };
                let details = serde_json::json!({
                    "name": name,
                    "source": source,
                    "deployed_app_config": config,
                    "status": a.status(),
                    "message": a.message(),
                    "route_prefix": a.spec.route_prefix,
                    "ingress": a.spec.ingress,
                    "last_deployed_time_s": a.deployed_s,
                    "external_scaler_enabled": a.spec.external_scaler_enabled,
                    "deployments": deployments,
                });
                (name.clone(), details)
            })
            .collect();
        serde_json::json!({ "applications": apps, "http": state.http })
    }
}

fn deployment_details(d: &Deployment) -> serde_json::Value {
    let replicas: Vec<serde_json::Value> = d
        .replicas
        .iter()
        .map(|r| {
            serde_json::json!({
                "replica_id": r.replica_id,
                "actor_name": r.actor_name,
                "actor_id": r.actor_id,
                "state": r.state,
                "worker_address": r.worker_address,
                "node_id": r.node_id,
                "pid": r.pid,
                "start_time_s": r.start_time_s,
            })
        })
        .collect();
    serde_json::json!({
        "name": d.spec.name,
        "status": d.status(),
        "status_trigger": plan::status_trigger(d.status()),
        "deployment_config": d.spec.config,
        "message": d.message,
        "target_num_replicas": d.wanted(),
        "max_ongoing_requests": d.spec.max_ongoing_requests,
        "max_queued_requests": d.spec.max_queued_requests,
        "user_config": d.spec.user_config,
        "required_resources": d.spec.resources,
        "replicas": replicas,
        "autoscaling_detail": d.spec.autoscaling_config.as_ref().map(|p| d.load.detail(p, d.wanted(), now_s())),
    })
}
