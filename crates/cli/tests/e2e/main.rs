//! End-to-end tests: real `oxray` processes on loopback.

mod cli;
mod cluster;
mod http;
mod jobs;
mod placement_groups;

use oxray_testkit::LocalCluster;

pub const BIN: &str = env!("CARGO_BIN_EXE_oxray");

pub fn cluster(agents: usize) -> LocalCluster {
    LocalCluster::builder(BIN).agents(agents).start().expect("local cluster starts")
}
