//! The core worker: the part of oxray that runs inside every Python driver and worker
//! process (through the `oxray._native` module). For now it finds or starts a cluster and
//! reads its state; tasks, actors and objects build on it.

mod address;
mod blocked;
mod channels;
mod cluster;
mod drive;
mod errors;
mod executor;
pub mod job;
mod local;
mod node_deaths;
mod object_links;
mod object_server;
mod objects;
pub mod placement_groups;
mod push;
mod state_events;

mod streams;
mod tasks;

pub use address::{resolve, Target};
pub use blocked::BlockedNotice;
pub use cluster::{available_resources, cluster_resources, Cluster};
pub use drive::SharedDriver;
pub use errors::WorkerError;
pub use executor::{Executor, Incoming};
pub use local::{find_oxray_binary, LocalCluster, LocalOptions};
pub use object_links::OwnerLinks;
pub use object_server::serve as serve_objects;
pub use objects::{new_id, GetError, Hold, ObjectTable, Outcome, Owners, Ready, Use};
pub use oxray_object_store::{dirs::object_store_dirs, NodeStore, StoredFile};
pub use oxray_proto::v1::{ContainedRef, DriverInfo, MetricSample, NamedActor, PlacementGroupState, PushTaskReply};
pub use oxray_rpc::Token;
pub use tasks::{ActorCall, Env, Lease, LeaseFor, Route, Selector, Strategy, Submitter, TaskSpec, CANCELLED};
pub use tasks::{ActorOwner, ActorPlacement, Life, RestartPlan};
