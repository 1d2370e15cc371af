//! Every placement choice of the cluster, as pure functions over a snapshot: where a job's
//! entrypoint runs, where a placement group's bundles go, where a worker lease goes, and an
//! agent's accounts of its node. The callers (head and agents) bring the snapshot and act on
//! the answer.

pub mod bundles;
pub mod job;
pub mod lease;
pub mod ledger;
pub mod view;

pub use lease::{route, Decision, NodeView, Strategy};
pub use ledger::{BundleKey, BundleRefusal, BundleWant, Ledger};
pub use view::{Change, ClusterView};
