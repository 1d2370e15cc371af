//! Serve's replicas as actors of the core: the head makes them through the same submitter a
//! Python driver uses (so it owns them, and its object server hears of their deaths), names
//! them in its actor directory (so handles in any process find them), calls them directly at
//! their workers, and retires their leases to end them.

use crate::actors::Actors;
use crate::membership::Membership;
use crate::store::Store;
use oxray_proto::v1;
use oxray_rpc::Token;
use oxray_serve::{ActorHost, CallError, NewReplica, Placed, StateStore};
use oxray_worker::{ActorCall, ObjectTable, Outcome, OwnerLinks, RestartPlan, Strategy, Submitter, TaskSpec};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const NAMESPACE: &str = "serve";

/// One submitter per interpreter (a lease names the interpreter its worker runs), each with
/// its object server.
struct Owner {
    submitter: Arc<Submitter>,
    address: String,
}

pub struct CoreHost {
    control: String,
    token: Token,
    ip: String,
    actors: Arc<Actors>,
    membership: Arc<Membership>,
    objects: Arc<ObjectTable>,
    links: tokio::sync::OnceCell<Arc<OwnerLinks>>,
    owners: tokio::sync::Mutex<HashMap<String, Arc<Owner>>>,
    /// Which owner made each actor this head made.
    made_by: Mutex<HashMap<String, Arc<Owner>>>,
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

    async fn owner(&self, python: &str) -> Result<Arc<Owner>, String> {
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
        let head = oxray_rpc::connect_head(&self.control, &self.token, Duration::from_secs(10))
            .await
            .map_err(|e| format!("cannot reach the head's own control plane: {e}"))?;
        let submitter = Arc::new(Submitter::new(
            self.objects.clone(),
            &self.agent()?,
            self.token.clone(),
            python.to_string(),
            Some(head),
            Arc::default(),
            links,
        ));
        let actors: Arc<dyn oxray_worker::ActorOwner> = Arc::new(submitter.clone());
        let port = oxray_worker::serve_objects(self.objects.clone(), actors, self.token.clone())
            .await
            .map_err(|e| e.to_string())?;
        let address = format!("{}:{port}", self.ip);
        submitter.set_object_address(address.clone());
        let owner = Arc::new(Owner { submitter, address });
        owners.insert(python.to_string(), owner.clone());
        Ok(owner)
    }

    /// The owner that made `actor_id`, else any (after a restart the head calls replicas it
    /// did not make; the interpreter only matters for new workers).
    async fn caller(&self, actor_id: &str) -> Result<Arc<Owner>, String> {
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

fn call_of(actor_id: &str, address: &str, method: &str, creation: bool) -> ActorCall {
    ActorCall {
        actor_id: actor_id.to_string(),
        address: address.to_string(),
        owner: None,
        method: method.to_string(),
        creation,
        max_task_retries: 0,
        place: None,
        dead: None,
        gpu_ids: Vec::new(),
    }
}

/// A call of `method` with plain arguments (no ObjectRefs among them).
fn method_call(actor_id: &str, address: &str, method: &str, args: Vec<u8>) -> TaskSpec {
    TaskSpec::actor(
        method.to_string(),
        Vec::new(),
        args,
        Vec::new(),
        Vec::new(),
        call_of(actor_id, address, method, false),
    )
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

    async fn call(&self, actor_id: &str, address: &str, method: &str, args: Vec<u8>) -> Result<Vec<u8>, CallError> {
        let owner = self.caller(actor_id).await.map_err(CallError::Died)?;
        let ids =
            owner.submitter.submit(&tokio::runtime::Handle::current(), method_call(actor_id, address, method, args));
        let ready = self.objects.get(&ids, None).await;
        for id in &ids {
            self.objects.release(id);
        }
        let ready = ready.map_err(|e| CallError::Died(e.to_string()))?;
        let Some(first) = ready.into_iter().next() else { return Err(CallError::Died("no reply".into())) };
        reply(first, method)
    }

    async fn stream(
        &self,
        actor_id: &str,
        address: &str,
        method: &str,
        args: Vec<u8>,
    ) -> Result<tokio::sync::mpsc::Receiver<Result<Vec<u8>, CallError>>, CallError> {
        let owner = self.caller(actor_id).await.map_err(CallError::Died)?;
        let spec = TaskSpec { streaming: true, ..method_call(actor_id, address, method, args) };
        let ids = owner.submitter.submit(&tokio::runtime::Handle::current(), spec);
        let (items, taken) = tokio::sync::mpsc::channel(16);
        let objects = self.objects.clone();
        let method = method.to_string();
        tokio::spawn(async move {
            let done = ids[0].clone();
            let mut index = 0;
            loop {
                let item = match owner.submitter.next_item(&done, index, None).await {
                    Ok(Some(id)) => {
                        index += 1;
                        let read = objects.get(std::slice::from_ref(&id), None).await;
                        objects.release(&id);
                        match read {
                            Ok(mut ready) => reply(ready.remove(0), &method),
                            Err(e) => Err(CallError::Died(e.to_string())),
                        }
                    }
                    // Ended: its result says how.
                    Ok(None) => match objects.get(std::slice::from_ref(&done), None).await {
                        Ok(mut ready) => match reply(ready.remove(0), &method) {
                            Ok(_) => break,
                            Err(e) => Err(e),
                        },
                        Err(e) => Err(CallError::Died(e.to_string())),
                    },
                    Err(e) => Err(CallError::Died(e.to_string())),
                };
                let failed = item.is_err();
                // The receiver gone: the client went away.
                if items.send(item).await.is_err() || failed {
                    break;
                }
            }
            owner.submitter.drop_items(&done);
            for id in &ids {
                objects.release(id);
            }
        });
        Ok(taken)
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

/// A call's outcome as the controller sees it.
fn reply(ready: oxray_worker::Ready, method: &str) -> Result<Vec<u8>, CallError> {
    match ready.outcome {
        Outcome::Value => Ok(ready.data.as_ref().clone()),
        Outcome::TaskError => Err(CallError::Failed(format!("the replica's {method} raised an exception"))),
        _ => Err(CallError::Died(String::from_utf8_lossy(&ready.data).into_owned())),
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
