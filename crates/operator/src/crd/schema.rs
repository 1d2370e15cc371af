//! Schema pieces shared by the custom resources.
//!
//! Embedded Kubernetes objects (pod templates, services) are declared as objects whose fields
//! the API server keeps without checking: their full schemas would make each CRD about a
//! megabyte, past the 256 KiB annotation that `kubectl apply` writes.

use schemars::{json_schema, Schema, SchemaGenerator};

pub fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}
