//! Reconciling a `RayCluster`: pure decisions (`params`, `pods`, `objects`, `plan`, `status`)
//! and the calls that carry them out (`reconcile`).

pub mod autoscale;
pub mod objects;
pub mod plan;
pub mod pods;
pub mod reconcile;
pub mod status;
