//! Reconciling a `RayJob`: a pure stage machine (`stages`) and the calls around it (`reconcile`).

pub mod reconcile;
pub mod stages;
