//! Leader election over a `coordination.k8s.io` Lease, so that replicas of the operator
//! never reconcile at once: the one holding the lease works, the others wait to take over.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;

const LEASE: &str = "oxray-operator-leader";
const DURATION_S: i32 = 15;

/// Waits until this process holds the lease, then keeps renewing it in the background; a
/// process that loses it exits, and its replacement waits its turn.
pub async fn acquire(client: &Client, namespaces: &[String]) -> anyhow::Result<()> {
    let namespace =
        std::env::var("POD_NAMESPACE").ok().or_else(|| namespaces.first().cloned()).unwrap_or_else(|| "default".into());
    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| format!("oxray-operator-{}", std::process::id()));
    let api = Api::<Lease>::namespaced(client.clone(), &namespace);
    loop {
        if try_take(&api, &identity).await? {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tracing::info!(identity, namespace, "leading");
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(DURATION_S as u64 / 3)).await;
            match try_take(&api, &identity).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::error!("lost the leader lease to another replica; exiting");
                    std::process::exit(1);
                }
                Err(e) => tracing::warn!(error = %e, "could not renew the leader lease"),
            }
        }
    });
    Ok(())
}

async fn try_take(api: &Api<Lease>, identity: &str) -> anyhow::Result<bool> {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(k8s_openapi::jiff::Timestamp::now());
    let Some(lease) = api.get_opt(LEASE).await? else {
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": LEASE},
            "spec": {"holderIdentity": identity, "leaseDurationSeconds": DURATION_S, "acquireTime": now, "renewTime": now},
        }))?;
        return Ok(api.create(&PostParams::default(), &lease).await.is_ok());
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.as_deref();
    let expired = spec.renew_time.as_ref().is_none_or(|t| {
        let age = k8s_openapi::jiff::Timestamp::now().duration_since(t.0);
        age.as_secs() > spec.lease_duration_seconds.unwrap_or(DURATION_S) as i64
    });
    if holder != Some(identity) && !expired {
        return Ok(false);
    }
    // The resourceVersion makes the write fail if another replica wrote first.
    let patch = json!({
        "metadata": {"resourceVersion": lease.metadata.resource_version},
        "spec": {"holderIdentity": identity, "leaseDurationSeconds": DURATION_S, "renewTime": now},
    });
    Ok(api.patch(LEASE, &PatchParams::default(), &Patch::Merge(&patch)).await.is_ok())
}
