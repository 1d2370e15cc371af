//! `oxray._native`: the Rust core inside Python. Thin glue: it converts and forwards to
//! `oxray-worker`, releasing the GIL around everything that waits.

use pyo3::prelude::*;
use std::collections::HashMap;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod client;
mod errors;
mod executor;
mod records;
mod waiting;

use client::{connect, Client};
use executor::TaskExecutor;

/// The token of the cluster a process of this user started with `init()` that serves
/// `address` on this machine.
#[pyfunction]
fn private_cluster_token(address: &str) -> Option<String> {
    oxray_config::private_clusters::token_for(address)
}

/// Whether a node with `labels` meets a label selector: the core's rule, for what the
/// driver decides itself (how many Train workers fit).
#[pyfunction]
fn selector_matches(selector: oxray_types::Selector, labels: HashMap<String, String>) -> bool {
    oxray_types::selector_matches(&selector, |key| labels.get(key).map(String::as_str))
}

/// The job this process works for now (Ray's JobID in hex): a driver's own, or that of the
/// task or actor it runs; `None` before it has one.
#[pyfunction]
fn current_job_id() -> Option<String> {
    Some(oxray_worker::job::current().hex_or_empty()).filter(|j| !j.is_empty())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add_class::<TaskExecutor>()?;
    m.add_class::<records::Task>()?;
    m.add_class::<records::NamedActor>()?;
    m.add_class::<records::ActorPlacement>()?;
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add_function(wrap_pyfunction!(private_cluster_token, m)?)?;
    m.add_function(wrap_pyfunction!(selector_matches, m)?)?;
    m.add_function(wrap_pyfunction!(current_job_id, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
