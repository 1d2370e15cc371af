//! Replica calls over the core's direct actor-call path, as the head's controller and the
//! proxies of every node make them: through a submitter of the core (the owner of the
//! calls, with an object server where their replies arrive), straight to the replica's
//! worker.

use crate::host::{CallError, ReplicaCalls};
use oxray_rpc::Token;
use oxray_worker::{ActorCall, ObjectTable, Outcome, OwnerLinks, Submitter, TaskSpec};
use std::sync::Arc;
use std::time::Duration;

pub struct CoreCaller {
    pub submitter: Arc<Submitter>,
    pub objects: Arc<ObjectTable>,
    /// The object server replies come to.
    pub address: String,
}

impl CoreCaller {
    /// A submitter reaching the cluster through the head's control plane at `control` and
    /// the agent at `agent` (where the leases of the workers it starts are asked), naming
    /// `python` for them, with an object server on `ip`.
    pub async fn start(
        objects: Arc<ObjectTable>,
        links: Arc<OwnerLinks>,
        token: &Token,
        control: &str,
        agent: &str,
        ip: &str,
        python: &str,
    ) -> Result<Self, String> {
        let head = oxray_rpc::connect_head(control, token, Duration::from_secs(10))
            .await
            .map_err(|e| format!("cannot reach the head's control plane at {control}: {e}"))?;
        let submitter = Arc::new(Submitter::new(
            objects.clone(),
            agent,
            token.clone(),
            python.to_string(),
            Some(head),
            Arc::default(),
            links,
        ));
        let actors: Arc<dyn oxray_worker::ActorOwner> = Arc::new(submitter.clone());
        let port =
            oxray_worker::serve_objects(objects.clone(), actors, token.clone()).await.map_err(|e| e.to_string())?;
        let address = format!("{ip}:{port}");
        submitter.set_object_address(address.clone());
        Ok(Self { submitter, objects, address })
    }

    /// A caller with an object table of its own (a node's proxy).
    pub async fn alone(token: &Token, control: &str, agent: &str, ip: &str) -> Result<Self, String> {
        let objects = Arc::new(ObjectTable::default());
        let links = OwnerLinks::new(token.clone(), tokio::runtime::Handle::current());
        objects.set_owners(links.clone());
        Self::start(objects, links, token, control, agent, ip, "python3").await
    }
}

/// The core's description of a call of `method` (or of the creation call) of an actor.
pub fn call_of(actor_id: &str, address: &str, method: &str, creation: bool) -> ActorCall {
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
impl ReplicaCalls for CoreCaller {
    async fn call(&self, actor_id: &str, address: &str, method: &str, args: Vec<u8>) -> Result<Vec<u8>, CallError> {
        let ids =
            self.submitter.submit(&tokio::runtime::Handle::current(), method_call(actor_id, address, method, args));
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
        let spec = TaskSpec { streaming: true, ..method_call(actor_id, address, method, args) };
        let ids = self.submitter.submit(&tokio::runtime::Handle::current(), spec);
        let (items, taken) = tokio::sync::mpsc::channel(16);
        let objects = self.objects.clone();
        let submitter = self.submitter.clone();
        let method = method.to_string();
        tokio::spawn(async move {
            let done = ids[0].clone();
            let mut index = 0;
            loop {
                let item = match submitter.next_item(&done, index, None).await {
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
            submitter.drop_items(&done);
            for id in &ids {
                objects.release(id);
            }
        });
        Ok(taken)
    }
}

/// A call's outcome as Serve sees it.
fn reply(ready: oxray_worker::Ready, method: &str) -> Result<Vec<u8>, CallError> {
    match ready.outcome {
        Outcome::Value => Ok(ready.data.as_ref().clone()),
        Outcome::TaskError => Err(CallError::Failed(format!("the replica's {method} raised an exception"))),
        _ => Err(CallError::Died(String::from_utf8_lossy(&ready.data).into_owned())),
    }
}
