//! Serve's replicas as actors of the core: the head makes them through the same submitter a
//! Python driver uses (so it owns them, and its object server hears of their deaths), names
//! them in its actor directory (so handles in any process find them), calls them directly at
//! their workers, and retires their leases to end them.

use crate::actors::Actors;
use crate::membership::Membership;
use crate::store::Store;
use oxray_proto::v1;
use oxray_rpc::Token;
use oxray_serve::core_calls::{call_of, CoreCaller};
use oxray_serve::{ActorHost, CallError, NewReplica, Placed, ReplicaCalls, StateStore};
use oxray_worker::{ObjectTable, OwnerLinks, RestartPlan, Strategy, TaskSpec};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const NAMESPACE: &str = "serve";

pub struct CoreHost {
    control: String,
    token: Token,
    ip: String,
    actors: Arc<Actors>,
    membership: Arc<Membership>,
    objects: Arc<ObjectTable>,
    links: tokio::sync::OnceCell<Arc<OwnerLinks>>,
    /// One submitter per interpreter (a lease names the interpreter its worker runs).
    owners: tokio::sync::Mutex<HashMap<String, Arc<CoreCaller>>>,
    /// Which owner made each actor this head made.
    made_by: Mutex<HashMap<String, Arc<CoreCaller>>>,
}

impl CoreHost {
    pub fn new(control: String, token: Token, ip: String, actors: Arc<Actors>, membership: Arc<Membership>) -> Self {
        Self {
            control,
            token,
            ip,
            actors,
            membership,
            objects: Arc::new(ObjectTable::default()),
            links: tokio::sync::OnceCell::new(),
            owners: tokio::sync::Mutex::new(HashMap::new()),
            made_by: Mutex::new(HashMap::new()),
        }
    }

    /// The agent the submitter asks first: the head node's, else any alive one.
    fn agent(&self) -> Result<String, String> {
        let nodes = self.membership.snapshot();
        let usable: Vec<_> = nodes.iter().filter(|n| n.is_alive() && n.agent_port != 0).collect();
        usable
            .iter()
            .find(|n| n.is_head_node)
            .or_else(|| usable.first())
            .map(|n| n.agent_address())
            .ok_or_else(|| "no alive node can run replicas".to_string())
    }

    fn node_of(&self, agent: &str) -> String {
        self.membership
            .snapshot()
            .into_iter()
            .find(|n| n.agent_address() == agent)
            .map(|n| n.node_id.hex())
            .unwrap_or_default()
    }

    async fn owner(&self, python: &str) -> Result<Arc<CoreCaller>, String> {
        let mut owners = self.owners.lock().await;
        if let Some(o) = owners.get(python) {
            return Ok(o.clone());
        }
        let links = self
            .links
            .get_or_init(|| async {
                let links = OwnerLinks::new(self.token.clone(), tokio::runtime::Handle::current());
                self.objects.set_owners(links.clone());
                links
            })
            .await
            .clone();
        let owner = CoreCaller::start(
            self.objects.clone(),
            links,
            &self.token,
            &self.control,
            &self.agent()?,
            &self.ip,
            python,
        )
        .await
        .map(Arc::new)?;
        owners.insert(python.to_string(), owner.clone());
        Ok(owner)
    }

    /// The owner that made `actor_id`, else any (after a restart the head calls replicas it
    /// did not make; the interpreter only matters for new workers).
    async fn caller(&self, actor_id: &str) -> Result<Arc<CoreCaller>, String> {
        if let Some(o) = self.made_by.lock().expect("owners lock").get(actor_id) {
            return Ok(o.clone());
        }
        let any = self.owners.lock().await.values().next().cloned();
        match any {
            Some(o) => Ok(o),
            None => self.owner("python3").await,
        }
    }
}

#[async_trait::async_trait]
impl ActorHost for CoreHost {
    async fn create(&self, r: NewReplica) -> Result<Placed, String> {
        let owner = self.owner(&r.python).await?;
        let actor_id = oxray_worker::new_id();
        let options = serde_json::json!({
            "max_concurrency": r.max_concurrency,
            "actor_id": actor_id,
            "name": r.name,
            "namespace": NAMESPACE,
            "owner": owner.address,
            "class_name": r.class_name,
            "methods": r.methods,
            "resources": r.resources,
        });
        let resources = oxray_types::ResourceSet::try_from(r.resources.clone()).map_err(|e| e.to_string())?;
        // Replicas spread over the nodes, as Ray's do.
        let plan =
            RestartPlan { resources, env: r.env.clone(), strategy: Strategy::Spread, detached: true, restarts_left: 0 };
        let spec = TaskSpec::actor(
            r.class_name.clone(),
            oxray_serve::wire::blueprint(r.class, &options),
            r.args,
            Vec::new(),
            Vec::new(),
            call_of(&actor_id, "", "", true),
        );
        let created =
            owner.submitter.create_actor(&tokio::runtime::Handle::current(), &actor_id, spec, plan, NAMESPACE);
        self.made_by.lock().expect("owners lock").insert(actor_id.clone(), owner.clone());
        let placed = owner.submitter.actor_placement(&actor_id).await;
        // Nothing reads the creation call's result: calls queue behind it on their own.
        self.objects.release(&created);
        let placed = placed.map_err(|e| e.to_string())?;
        let named = v1::NamedActor {
            name: r.name.clone(),
            namespace: NAMESPACE.into(),
            actor_id: actor_id.clone(),
            worker_address: placed.worker_address.clone(),
            agent_address: placed.agent_address.clone(),
            lease_id: placed.lease_id,
            class_name: r.class_name,
            methods: r.methods.iter().map(|m| m.to_string()).collect(),
            detached: true,
            owner: owner.address.clone(),
            max_task_retries: 0,
        };
        if let Err(e) = self.actors.register(named).await {
            let _ = owner.submitter.kill_actor(&actor_id, true).await;
            return Err(e.to_string());
        }
        Ok(Placed { actor_id, worker_address: placed.worker_address, node_id: self.node_of(&placed.agent_address) })
    }

    async fn kill(&self, actor_id: &str, _address: &str, name: &str) {
        let made = self.made_by.lock().expect("owners lock").remove(actor_id);
        match made {
            Some(owner) => {
                if let Err(e) = owner.submitter.kill_actor(actor_id, true).await {
                    tracing::warn!("cannot end replica {name}: {e}");
                }
            }
            // Made by the head before it restarted: its lease is in the directory.
            None => match (self.actors.get(name, NAMESPACE), self.caller(actor_id).await) {
                (Ok(named), Ok(owner)) => {
                    if let Err(e) = owner.submitter.retire(&named.agent_address, &named.lease_id).await {
                        tracing::warn!("cannot end replica {name}: {e}");
                    }
                }
                _ => tracing::warn!("cannot end replica {name}: its lease is not known"),
            },
        }
        let _ = self.actors.remove(name, NAMESPACE).await;
    }
}

#[async_trait::async_trait]
impl ReplicaCalls for CoreHost {
    async fn call(&self, actor_id: &str, address: &str, method: &str, args: Vec<u8>) -> Result<Vec<u8>, CallError> {
        self.caller(actor_id).await.map_err(CallError::Died)?.call(actor_id, address, method, args).await
    }

    async fn stream(
        &self,
        actor_id: &str,
        address: &str,
        method: &str,
        args: Vec<u8>,
    ) -> Result<tokio::sync::mpsc::Receiver<Result<Vec<u8>, CallError>>, CallError> {
        self.caller(actor_id).await.map_err(CallError::Died)?.stream(actor_id, address, method, args).await
    }
}

/// The controller's records in the head's database.
pub struct ServeStore(pub Arc<Store>);

impl StateStore for ServeStore {
    fn save_app(&self, name: &str, record: &[u8]) -> Result<(), String> {
        self.0.put_serve_app(name, record).map_err(|e| e.to_string())
    }
    fn delete_app(&self, name: &str) -> Result<(), String> {
        self.0.delete_serve_app(name).map_err(|e| e.to_string())
    }
    fn load_apps(&self) -> Result<Vec<(String, Vec<u8>)>, String> {
        self.0.load_serve_apps().map_err(|e| e.to_string())
    }
    fn save_config(&self, record: Option<&[u8]>) -> Result<(), String> {
        self.0.put_serve_config(record).map_err(|e| e.to_string())
    }
    fn load_config(&self) -> Result<Option<Vec<u8>>, String> {
        self.0.serve_config().map_err(|e| e.to_string())
    }
}
