//! Placement groups from a driver: the head's calls, and waiting for a group to be ready.

use oxray_proto::convert::resources_to_proto;
use oxray_proto::v1::{self, PlacementGroupState, PlacementStrategy};
use oxray_rpc::HeadClient;
use oxray_types::ResourceSet;
use tokio::time::Instant;

pub fn parse_strategy(name: &str) -> Result<PlacementStrategy, String> {
    PlacementStrategy::from_str_name(name)
        .ok_or_else(|| format!("unknown placement strategy {name:?}: use PACK, SPREAD, STRICT_PACK or STRICT_SPREAD"))
}

pub async fn create(
    head: &HeadClient,
    bundles: &[ResourceSet],
    strategy: PlacementStrategy,
    name: &str,
    namespace: &str,
    detached: bool,
    owner: &str,
) -> Result<v1::PlacementGroup, tonic::Status> {
    let request = v1::CreatePlacementGroupRequest {
        owner: owner.to_string(),
        bundles: bundles.iter().map(|b| v1::Bundle { resources: resources_to_proto(b) }).collect(),
        strategy: strategy as i32,
        name: name.to_string(),
        namespace: namespace.to_string(),
        detached,
    };
    head.clone().create_placement_group(request).await.map(|r| r.into_inner())
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
