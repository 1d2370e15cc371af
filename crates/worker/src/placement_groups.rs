//! Placement groups from a driver: the head's calls, and waiting for a group to be ready.

use oxray_proto::convert::resources_to_proto;
use oxray_proto::v1::{self, PlacementGroupState, PlacementStrategy};
use oxray_rpc::HeadClient;
use oxray_types::ResourceSet;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

type Outcome = Option<Result<(), tonic::Status>>;

/// Groups whose creation or removal is on its way to the head. Creating a group returns at
/// once (as `placement_group()` does; the group is placed later anyway), and so does removing
/// one (Ray's removal is asynchronous too); whatever this process does next with the group
/// waits until the head has the change, and reports the head's refusal.
#[derive(Default)]
pub struct Creations {
    pending: Mutex<HashMap<String, watch::Receiver<Outcome>>>,
}

impl Creations {
    /// Sends the creation from `runtime`; the group's id is the request's.
    pub fn start(
        self: &std::sync::Arc<Self>,
        runtime: &tokio::runtime::Handle,
        head: HeadClient,
        request: v1::CreatePlacementGroupRequest,
    ) {
        let id = request.placement_group_id.clone();
        let create = move || {
            let (mut head, request) = (head.clone(), request.clone());
            async move { head.create_placement_group(request).await.map(|_| ()) }
        };
        self.change(runtime, id, oxray_rpc::reconnect::retried(create, oxray_rpc::reconnect::never_sent));
    }

    /// Sends the removal from `runtime`, once a creation still on its way has landed.
    pub fn remove(self: &std::sync::Arc<Self>, runtime: &tokio::runtime::Handle, head: HeadClient, id: String) {
        let earlier = self.lock().get(&id).cloned();
        let group = id.clone();
        self.change(runtime, id, async move {
            if let Some(mut earlier) = earlier {
                let _ = earlier.wait_for(Option::is_some).await;
            }
            // Removing twice removes once: made again while the head does not answer.
            oxray_rpc::reconnect::retried(|| remove(&head, &group), oxray_rpc::reconnect::unanswered).await
        });
    }

    /// Makes `change` to group `id` from `runtime`; later uses of the group wait for it.
    fn change(
        self: &std::sync::Arc<Self>,
        runtime: &tokio::runtime::Handle,
        id: String,
        change: impl std::future::Future<Output = Result<(), tonic::Status>> + Send + 'static,
    ) {
        let (done, outcome) = watch::channel(None);
        self.lock().insert(id.clone(), outcome.clone());
        let this = self.clone();
        runtime.spawn(async move {
            let changed = change.await;
            if changed.is_ok() {
                let mut pending = this.lock();
                // Unless a later change of the group took its place.
                if pending.get(&id).is_some_and(|o| o.same_channel(&outcome)) {
                    pending.remove(&id);
                }
            }
            // A refusal stays, so every later use of the group reports it.
            let _ = done.send(Some(changed));
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Receiver<Outcome>>> {
        self.pending.lock().expect("group creations lock")
    }

    /// Once the head has the group (at once for groups created before or elsewhere).
    pub async fn settled(&self, id: &str) -> Result<(), tonic::Status> {
        let Some(mut outcome) = self.lock().get(id).cloned() else { return Ok(()) };
        let settled = outcome.wait_for(Option::is_some).await;
        match settled.as_deref() {
            Ok(Some(Err(refused))) => Err(refused.clone()),
            _ => Ok(()),
        }
    }

    /// Once the head has every group created so far.
    pub async fn all_settled(&self) {
        let ids: Vec<String> = self.lock().keys().cloned().collect();
        for id in ids {
            let _ = self.settled(&id).await;
        }
    }
}

pub fn parse_strategy(name: &str) -> Result<PlacementStrategy, String> {
    PlacementStrategy::from_str_name(name)
        .ok_or_else(|| format!("unknown placement strategy {name:?}: use PACK, SPREAD, STRICT_PACK or STRICT_SPREAD"))
}

/// A request for a new group with an id of its own.
pub fn create_request(
    bundles: &[ResourceSet],
    selectors: &[oxray_types::Selector],
    strategy: PlacementStrategy,
    name: &str,
    namespace: &str,
    detached: bool,
    owner: &str,
) -> v1::CreatePlacementGroupRequest {
    v1::CreatePlacementGroupRequest {
        owner: owner.to_string(),
        bundles: bundles
            .iter()
            .enumerate()
            .map(|(i, b)| v1::Bundle {
                resources: resources_to_proto(b),
                label_selector: selectors.get(i).map(|s| s.clone().into_iter().collect()).unwrap_or_default(),
            })
            .collect(),
        strategy: strategy as i32,
        name: name.to_string(),
        namespace: namespace.to_string(),
        detached,
        placement_group_id: oxray_types::new_placement_group_id(),
        job_id: crate::job::current().hex_or_empty(),
    }
}

pub async fn create(head: &HeadClient, request: v1::CreatePlacementGroupRequest) -> Result<(), tonic::Status> {
    head.clone().create_placement_group(request).await.map(|_| ())
}

fn by_id(id: &str) -> v1::PlacementGroupRef {
    v1::PlacementGroupRef { placement_group_id: id.to_string(), ..Default::default() }
}

pub async fn remove(head: &HeadClient, id: &str) -> Result<(), tonic::Status> {
    head.clone().remove_placement_group(by_id(id)).await.map(|_| ())
}

pub async fn get(
    head: &HeadClient,
    id: &str,
    name: &str,
    namespace: &str,
) -> Result<v1::PlacementGroup, tonic::Status> {
    let r = v1::PlacementGroupRef {
        placement_group_id: id.to_string(),
        name: name.to_string(),
        namespace: namespace.to_string(),
    };
    head.clone().get_placement_group(r).await.map(|r| r.into_inner())
}

pub async fn list(head: &HeadClient) -> Result<Vec<v1::PlacementGroup>, tonic::Status> {
    Ok(head.clone().list_placement_groups(v1::ListPlacementGroupsRequest {}).await?.into_inner().placement_groups)
}

/// The group once created or removed, or as it is at `deadline`.
pub async fn wait(head: &HeadClient, id: &str, deadline: Option<Instant>) -> Result<v1::PlacementGroup, tonic::Status> {
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()).as_secs_f64());
        let request = v1::WaitPlacementGroupRequest {
            placement_group_id: id.to_string(),
            timeout_s: left.map_or(5.0, |l| l.clamp(0.001, 5.0)),
        };
        let pg = head.clone().wait_placement_group(request).await?.into_inner();
        let settled =
            pg.state == PlacementGroupState::Created as i32 || pg.state == PlacementGroupState::Removed as i32;
        if settled || deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(pg);
        }
    }
}

/// The group as `placement_group_table` shows it (bundles as lists, by index).
pub fn to_json(pg: &v1::PlacementGroup) -> serde_json::Value {
    let name = |v: i32, f: fn(i32) -> Option<&'static str>| f(v).unwrap_or("UNKNOWN").to_string();
    serde_json::json!({
        "placement_group_id": pg.placement_group_id,
        "name": pg.name,
        "namespace": pg.namespace,
        "bundles": pg.bundles.iter().map(|b| &b.resources).collect::<Vec<_>>(),
        "bundles_to_node_id": pg.bundle_nodes,
        "strategy": name(pg.strategy, |v| PlacementStrategy::try_from(v).ok().map(|s| s.as_str_name())),
        "state": name(pg.state, |v| PlacementGroupState::try_from(v).ok().map(|s| s.as_str_name())),
        "is_detached": pg.detached,
        "stats": {"creation_time_ms": pg.created_at_ms},
    })
}
