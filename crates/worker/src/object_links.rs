//! The client side of other processes' object servers: fetching borrowed objects and
//! telling owners which references this process took or dropped.

use crate::objects::{Outcome, Owners, Ready};
use oxray_proto::v1::{self, object_service_client::ObjectServiceClient};
use oxray_rpc::{ClientAuth, Token};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

type Client =
    ObjectServiceClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, ClientAuth>>;
type Update = (Vec<(String, i32)>, oneshot::Sender<()>);

pub struct OwnerLinks {
    token: Token,
    runtime: tokio::runtime::Handle,
    clients: Mutex<HashMap<String, Client>>,
    /// One queue per owner, so its reference changes arrive in the order they were made.
    queues: Mutex<HashMap<String, mpsc::UnboundedSender<Update>>>,
}

impl OwnerLinks {
    pub fn new(token: Token, runtime: tokio::runtime::Handle) -> Arc<Self> {
        Arc::new(Self { token, runtime, clients: Mutex::new(HashMap::new()), queues: Mutex::new(HashMap::new()) })
    }

    pub(crate) fn client(&self, owner: &str) -> Result<Client, String> {
        let mut clients = self.clients.lock().expect("owner clients lock");
        if let Some(c) = clients.get(owner) {
            return Ok(c.clone());
        }
        let _inside = self.runtime.enter();
        let channel = crate::channels::channel(owner)?;
        let client = ObjectServiceClient::with_interceptor(channel, ClientAuth::new(&self.token))
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        clients.insert(owner.to_string(), client.clone());
        Ok(client)
    }

    fn queue(&self, owner: &str) -> mpsc::UnboundedSender<Update> {
        let mut queues = self.queues.lock().expect("owner queues lock");
        if let Some(q) = queues.get(owner) {
            return q.clone();
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<Update>();
        let client = self.client(owner);
        let owner_name = owner.to_string();
        self.runtime.spawn(async move {
            while let Some((mut changes, done)) = rx.recv().await {
                // Whatever queued up meanwhile goes in the same call, in order.
                let mut acks = vec![done];
                while let Ok((more, done)) = rx.try_recv() {
                    changes.extend(more);
                    acks.push(done);
                }
                let changes =
                    changes.into_iter().map(|(object_id, delta)| v1::RefChange { object_id, delta }).collect();
                let sent = match client.clone() {
                    Ok(mut c) => c.update_refs(v1::UpdateRefsRequest { changes }).await.map_err(|s| s.to_string()),
                    Err(e) => Err(e),
                };
                // An owner that is gone has nothing left to count.
                if let Err(e) = sent {
                    tracing::debug!(owner = %owner_name, "reference changes not delivered: {e}");
                }
                for done in acks {
                    let _ = done.send(());
                }
            }
        });
        queues.insert(owner.to_string(), tx.clone());
        tx
    }
}

impl OwnerLinks {
    /// The content of an object the owner keeps in its node's store.
    pub async fn fetch_content(&self, id: &str, owner: &str) -> Result<Vec<u8>, String> {
        let mut client = self.client(owner)?;
        let request = v1::GetObjectRequest { object_id: id.to_string(), inline: true };
        let reply =
            client.get_object(request).await.map_err(|s| format!("object {id} from {owner}: {}", s.message()))?;
        Ok(reply.into_inner().data)
    }
}

impl Owners for OwnerLinks {
    fn fetch(&self, id: String, owner: String) -> Pin<Box<dyn Future<Output = Ready> + Send>> {
        let client = self.client(&owner);
        Box::pin(async move {
            let reply = match client {
                Ok(mut c) => c.get_object(v1::GetObjectRequest { object_id: id.clone(), inline: false }).await,
                Err(e) => return Ready::lost(format!("object {id}: bad owner address {owner}: {e}")),
            };
            match reply {
                Ok(r) => {
                    let r = r.into_inner();
                    Ready { data: Arc::new(r.data), outcome: Outcome::from_code(r.outcome) }
                }
                Err(s) if s.code() == tonic::Code::NotFound => {
                    Ready::lost(format!("object {id} was freed by its owner ({owner})"))
                }
                Err(s) => Ready {
                    data: Arc::new(
                        format!("the owner of object {id} ({owner}) has died or is unreachable: {}", s.message())
                            .into_bytes(),
                    ),
                    outcome: Outcome::OwnerDied,
                },
            }
        })
    }

    fn update(&self, owner: String, changes: Vec<(String, i32)>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let (done, acked) = oneshot::channel();
        let _ = self.queue(&owner).send((changes, done));
        Box::pin(async move {
            let _ = acked.await;
        })
    }
}
