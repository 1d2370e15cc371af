//! JSON shapes shared by the HTTP API, the CLI's `--format json|yaml` and the dashboard.
//! Node, actor, task and placement group rows follow Ray's state API so Ray's own clients can read them.

mod cluster_status;
mod events;
mod jobs;
pub mod logs;
mod nodes;
pub mod state;
pub mod usage;

pub use cluster_status::{ClusterStatus, NodeSummary, PendingResources};
pub use events::{Event, JobPage};
pub use jobs::{new_submission_id, not_found, ApiError, DriverInfo, JobDetails, SubmitRequest, TOTAL_JOBS_HEADER};
pub use nodes::{list_nodes, FilterError, NodeFilter, NodeList, NodeRow, MAX_LIMIT};
