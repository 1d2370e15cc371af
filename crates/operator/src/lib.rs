//! The Kubernetes operator: reconciles `RayCluster`, `RayJob` and `RayService` resources into
//! pods, services and jobs of oxray clusters.

pub mod cluster;
mod context;
pub mod controller;
pub mod crd;
mod error;
mod events;
mod head;
mod health;
pub mod job;
mod leader;
mod metrics;
pub mod names;
pub mod params;
pub mod quantity;
mod service;
mod status_patch;

pub use controller::{run, Options};
