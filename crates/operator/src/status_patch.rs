//! Status writes as JSON merge patches that also clear what the new status no longer has
//! (a merge patch keeps every field it does not name).

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::{json, Map, Value};

/// What a custom resource of the operator's is, to have its status written.
pub trait Stored:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Stored for K where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// Writes `new` as the object's status when it differs from `old`.
pub async fn write<K: Stored, S: Serialize + PartialEq>(
    client: &kube::Client,
    object: &K,
    old: Option<&S>,
    new: &S,
) -> Result<(), kube::Error> {
    patched(client, object, old, new, json!({})).await.map(|_| ())
}

/// Writes `new` as the status of `object` only if nothing changed the object since it was
/// read (its resourceVersion, as a precondition: a stale read fails with a conflict and is
/// retried). Returns the object as written, for a later write in the same pass.
pub async fn write_checked<K: Stored, S: Serialize + PartialEq>(
    client: &kube::Client,
    object: &K,
    old: Option<&S>,
    new: &S,
) -> Result<Option<K>, kube::Error> {
    patched(client, object, old, new, json!({ "resourceVersion": object.resource_version() })).await
}

async fn patched<K: Stored, S: Serialize + PartialEq>(
    client: &kube::Client,
    object: &K,
    old: Option<&S>,
    new: &S,
    metadata: Value,
) -> Result<Option<K>, kube::Error> {
    if old == Some(new) {
        return Ok(None);
    }
    let api = Api::<K>::namespaced(client.clone(), &object.namespace().unwrap_or_else(|| "default".into()));
    let body = json!({ "metadata": metadata, "status": merge_patch(&json!(old), &json!(new)) });
    api.patch_status(&object.name_any(), &PatchParams::default(), &Patch::Merge(body)).await.map(Some)
}

pub fn merge_patch(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = Map::new();
            for (key, value) in new {
                let child = old.get(key).map(|o| merge_patch(o, value)).unwrap_or_else(|| value.clone());
                patch.insert(key.clone(), child);
            }
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn removed_fields_become_null_and_new_ones_are_set() {
        let old = json!({"state": "ready", "head": {"podIP": "1.2.3.4", "podName": "h"}, "conditions": [1, 2]});
        let new = json!({"head": {"podName": "h2"}, "conditions": [3]});
        assert_eq!(
            merge_patch(&old, &new),
            json!({"state": null, "head": {"podIP": null, "podName": "h2"}, "conditions": [3]})
        );
        assert_eq!(merge_patch(&Value::Null, &new), new);
    }
}
