//! Declarative applications: a PUT of Ray's `ServeDeploySchema` replaces the set of
//! declarative applications. Each new or changed application is built by a short-lived
//! Python actor in its runtime_env (it imports `import_path` and answers the same body
//! `serve.run` sends), then deployed by the controller; a build that fails leaves the
//! application DEPLOY_FAILED with the traceback as its message. The last config is kept in
//! the head's database, so a restarted head finishes the builds it had not.

use crate::controller::{Controller, Origin};
use crate::declarative::{self, AppConfig, DeployConfig};
use crate::host::{ActorHost, NewReplica, Placed, StateStore};
use crate::routing::ProxyLocation;
use crate::spec::AppSpec;
use crate::wire::{self, Arg};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a builder that cannot be started is tried again (a cluster still starting).
const START_PATIENCE: Duration = Duration::from_secs(60);

/// An application of the config that is not deployed as it says yet.
#[derive(Debug, Clone)]
pub struct Build {
    pub config: Value,
    generation: u64,
    /// Why it failed; `None` while it runs.
    pub failed: Option<String>,
    /// Why it has not started yet, while it waits.
    pub waiting: Option<String>,
}

impl Build {
    /// A build of `config`, failed for `failed` (for reports made without a controller).
    pub fn new(config: Value, failed: Option<String>) -> Self {
        Self { config, generation: 0, failed, waiting: None }
    }
}

#[derive(Default)]
struct State {
    /// The last config, as parsed; `None` before any PUT (or after a shutdown).
    config: Option<DeployConfig>,
    builds: BTreeMap<String, Build>,
    generation: u64,
}

pub struct Declarative {
    controller: Arc<Controller>,
    host: Arc<dyn ActorHost>,
    store: Arc<dyn StateStore>,
    state: Mutex<State>,
}

/// What the GET of the config reports beside the controller's applications.
pub struct View {
    pub config: Option<DeployConfig>,
    pub builds: BTreeMap<String, Build>,
}

impl Declarative {
    pub fn new(controller: Arc<Controller>, host: Arc<dyn ActorHost>, store: Arc<dyn StateStore>) -> Arc<Self> {
        Arc::new(Self { controller, host, store, state: Mutex::new(State::default()) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("declarative state lock")
    }

    /// After a restart: the stored config, and the builds it still needs.
    pub fn resume(self: &Arc<Self>) {
        let record = match self.store.load_config() {
            Ok(Some(record)) => record,
            Ok(None) => return,
            Err(e) => return tracing::error!("cannot read Serve's declarative config: {e}"),
        };
        match declarative::parse(&record) {
            Ok(config) => {
                self.start_builds(&config);
            }
            Err(e) => tracing::error!("the stored Serve config is unreadable: {e}"),
        }
    }

    /// Applies a PUT: checks it, keeps it, deletes the declarative applications it no
    /// longer lists and builds those it adds or changes (in the background).
    pub fn apply(self: &Arc<Self>, body: &[u8]) -> Result<DeployConfig, String> {
        let config = declarative::parse(body)?;
        let listed: HashSet<&str> = config.applications.iter().map(|a| a.name.as_str()).collect();
        for (name, origin, prefix) in self.controller.origins() {
            if origin != Origin::Imperative || listed.contains(name.as_str()) {
                continue;
            }
            if let Some(app) = config.applications.iter().find(|a| a.route_prefix.is_some() && a.route_prefix == prefix)
            {
                return Err(format!(
                    "Prefix {} is being used by application \"{name}\". Failed to deploy application \"{}\".",
                    prefix.unwrap_or_default(),
                    app.name
                ));
            }
        }
        self.store.save_config(Some(body))?;
        for (name, origin, _) in self.controller.origins() {
            if matches!(origin, Origin::Declarative(_)) && !listed.contains(name.as_str()) {
                self.controller.delete(&name);
            }
        }
        self.start_builds(&config);
        Ok(config)
    }

    fn start_builds(self: &Arc<Self>, config: &DeployConfig) {
        self.controller.set_proxy_location(ProxyLocation::parse(&config.proxy_location).unwrap_or_default());
        let deployed: BTreeMap<String, Origin> =
            self.controller.origins().into_iter().map(|(name, origin, _)| (name, origin)).collect();
        let mut started = Vec::new();
        {
            let mut state = self.lock();
            state.builds.retain(|name, _| config.applications.iter().any(|a| &a.name == name));
            for app in &config.applications {
                let current = deployed.get(&app.name) == Some(&Origin::Declarative(app.raw.clone()));
                let building = state.builds.get(&app.name).is_some_and(|b| b.config == app.raw && b.failed.is_none());
                if current || building {
                    // A changed app that went back to what runs needs no build.
                    if current {
                        state.builds.remove(&app.name);
                    }
                    continue;
                }
                state.generation += 1;
                let generation = state.generation;
                state.builds.insert(
                    app.name.clone(),
                    Build { config: app.raw.clone(), generation, failed: None, waiting: None },
                );
                started.push((app.clone(), generation));
            }
            state.config = Some(config.clone());
        }
        for (app, generation) in started {
            let this = self.clone();
            tokio::spawn(async move {
                let outcome = this.build(&app, generation).await;
                this.finish(&app, generation, outcome);
            });
        }
    }

    async fn build(&self, app: &AppConfig, generation: u64) -> Result<AppSpec, String> {
        let env = declarative::builder_env(&app.runtime_env)?;
        let name = format!("SERVE_BUILDER::{}#{generation}", app.name);
        let builder = NewReplica {
            name: name.clone(),
            class: wire::BUILDER_CLASS,
            methods: wire::BUILDER_METHODS,
            class_name: format!("ServeApplicationBuilder:{}", app.name),
            python: String::new(),
            // As Ray's build task: it holds no CPU while it imports.
            resources: BTreeMap::from([("CPU".to_string(), 0.0)]),
            env,
            max_concurrency: 1,
            args: wire::args(vec![]),
        };
        let placed = self.start_builder(app, generation, builder).await?;
        let mut config = app.raw.clone();
        config["name"] = Value::String(app.name.clone());
        let reply = self
            .host
            .call(&placed.actor_id, &placed.worker_address, "build", wire::args(vec![Arg::Str(config.to_string())]))
            .await;
        self.host.kill(&placed.actor_id, &placed.worker_address, &name).await;
        let reply = wire::json_reply(&reply.map_err(|e| format!("the application's builder failed: {e}"))?)?;
        if let Some(error) = reply.get("error").and_then(Value::as_str) {
            return Err(format!("Deploying the application failed:\n{error}"));
        }
        serde_json::from_value(reply["app"].clone()).map_err(|e| format!("the builder's answer is unreadable: {e}"))
    }

    /// Starts the builder; while the cluster cannot (no node has joined yet, as when a
    /// RayService's head has just started) it tries again for a while, and the application's
    /// message says why it waits.
    async fn start_builder(&self, app: &AppConfig, generation: u64, builder: NewReplica) -> Result<Placed, String> {
        let began = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(200);
        loop {
            let error = match self.host.create(builder.clone()).await {
                Ok(placed) => return Ok(placed),
                Err(e) => format!("cannot start the application's builder: {e}"),
            };
            if began.elapsed() >= START_PATIENCE || !self.note(&app.name, generation, &error) {
                return Err(error);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }

    /// Records why build `generation` of `name` waits; false once it is superseded.
    fn note(&self, name: &str, generation: u64, why: &str) -> bool {
        let mut state = self.lock();
        match state.builds.get_mut(name) {
            Some(b) if b.generation == generation => {
                b.waiting = Some(why.to_string());
                true
            }
            _ => false,
        }
    }

    fn finish(&self, app: &AppConfig, generation: u64, outcome: Result<AppSpec, String>) {
        let mut state = self.lock();
        match state.builds.get(&app.name) {
            Some(b) if b.generation == generation => {}
            // Replaced by a later PUT, or removed.
            _ => return,
        }
        let http = state.config.as_ref().map(|c| c.http_options.clone());
        let deployed = outcome.and_then(|mut spec| {
            spec.http_options = http;
            self.controller
                .deploy_from(&app.name, spec, Origin::Declarative(app.raw.clone()))
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        match deployed {
            Ok(()) => {
                state.builds.remove(&app.name);
            }
            Err(e) => {
                tracing::warn!("Serve application {:?} failed to deploy: {e}", app.name);
                if let Some(b) = state.builds.get_mut(&app.name) {
                    b.failed = Some(e);
                }
            }
        }
    }

    /// Whether a build runs (its application will want the proxy).
    pub fn building(&self) -> bool {
        self.lock().builds.values().any(|b| b.failed.is_none())
    }

    /// Forgets the config (Serve shut down).
    pub fn clear(&self) {
        self.controller.set_proxy_location(ProxyLocation::default());
        let mut state = self.lock();
        state.config = None;
        state.builds.clear();
        if let Err(e) = self.store.save_config(None) {
            tracing::error!("cannot forget Serve's declarative config: {e}");
        }
    }

    pub fn view(&self) -> View {
        let state = self.lock();
        View { config: state.config.clone(), builds: state.builds.clone() }
    }
}
