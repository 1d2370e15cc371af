//! A node's object store, shared by every process of the node: large objects in files of a
//! shared-memory directory (one file per object, written once by its owner, then mapped
//! read-only by readers holding a shared `flock`), spilled to disk once the memory set
//! aside is full, counted in a usage file every process maps (`usage`), freed files kept
//! for reuse (`store`), and the directories the node's agent makes, marks and sweeps
//! (`dirs`). Drivers and workers use `NodeStore`; the agent uses `dirs` and reads `usage`.

pub mod dirs;
mod store;
mod usage;

pub use store::{NodeStore, StoredFile};
pub use usage::{objects_bytes, USAGE_FILE};
