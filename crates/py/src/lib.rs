//! `oxray._native`: the Rust core inside Python. Thin glue: it converts and forwards to
//! `oxray-worker`, releasing the GIL around everything that waits.

use oxray_worker::{available_resources, cluster_resources, Cluster, LocalCluster, LocalOptions, Target, WorkerError};
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn to_py(e: WorkerError) -> PyErr {
    match e {
        WorkerError::NoCluster | WorkerError::Connect(_) => PyConnectionError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}

/// A driver's connection to a cluster, and the private cluster it started, if any.
#[pyclass(module = "oxray._native")]
struct Client {
    runtime: tokio::runtime::Runtime,
    cluster: Cluster,
    local: Option<LocalCluster>,
}

/// Resolves `address` as `ray.init` does and connects; starts a private local cluster when
/// there is none to join.
#[pyfunction]
#[pyo3(signature = (address, env_address, current_address, token, local, package_dir))]
fn connect(
    py: Python<'_>,
    address: Option<String>,
    env_address: Option<String>,
    current_address: Option<String>,
    token: Option<String>,
    local: (Option<u32>, Option<u32>, Option<String>),
    package_dir: Option<PathBuf>,
) -> PyResult<Client> {
    py.detach(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        let target = oxray_worker::resolve(address.as_deref(), env_address.as_deref(), current_address.as_deref()).map_err(to_py)?;
        let (address, token, local) = match target {
            Target::Connect(address) => {
                if local.0.is_some() || local.1.is_some() || local.2.is_some() {
                    return Err(PyValueError::new_err(
                        "num_cpus, num_gpus and resources describe a new local cluster; they cannot be given when connecting to an existing one",
                    ));
                }
                let token = token.ok_or_else(|| {
                    PyConnectionError::new_err(format!("no cluster token for {address}: set OXRAY_AUTH_TOKEN or save it in ~/.oxray/auth_token"))
                })?;
                (address, token, None)
            }
            Target::StartLocal => {
                let bin = oxray_worker::find_oxray_binary(package_dir.as_deref()).ok_or_else(|| {
                    PyRuntimeError::new_err("cannot start a local cluster: the `oxray` executable is not on PATH (or set OXRAY_BIN)")
                })?;
                let options = LocalOptions { num_cpus: local.0, num_gpus: local.1, resources_json: local.2 };
                let cluster = LocalCluster::start(&bin, &options).map_err(to_py)?;
                (cluster.address.clone(), cluster.token.clone(), Some(cluster))
            }
        };
        let token = parse_token(&token)?;
        let cluster = runtime.block_on(Cluster::connect(&address, &token)).map_err(to_py)?;
        Ok(Client { runtime, cluster, local })
    })
}

fn parse_token(text: &str) -> PyResult<oxray_worker::Token> {
    oxray_worker::Token::parse(text).map_err(|e| PyValueError::new_err(format!("invalid cluster token: {e}")))
}

#[pymethods]
impl Client {
    #[getter]
    fn address(&self) -> String {
        self.cluster.address().to_string()
    }

    #[getter]
    fn dashboard_url(&self) -> String {
        self.cluster.dashboard_url().to_string()
    }

    #[getter]
    fn session_name(&self) -> String {
        self.cluster.session_name().to_string()
    }

    /// The oxray home of the private cluster this client started, if it started one.
    #[getter]
    fn local_home(&self) -> Option<String> {
        self.local.as_ref().map(|l| l.home().display().to_string())
    }

    /// Every node as JSON (Python shapes it into Ray's `nodes()` dictionaries).
    fn nodes_json(&self, py: Python<'_>) -> PyResult<String> {
        let nodes = py.detach(|| self.runtime.block_on(self.cluster.nodes())).map_err(to_py)?;
        serde_json::to_string(&nodes).map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    fn cluster_resources(&self, py: Python<'_>) -> PyResult<BTreeMap<String, f64>> {
        let nodes = py.detach(|| self.runtime.block_on(self.cluster.nodes())).map_err(to_py)?;
        Ok(cluster_resources(&nodes))
    }

    fn available_resources(&self, py: Python<'_>) -> PyResult<BTreeMap<String, f64>> {
        let nodes = py.detach(|| self.runtime.block_on(self.cluster.nodes())).map_err(to_py)?;
        Ok(available_resources(&nodes))
    }

    /// Stops the private cluster, if this client started one.
    fn shutdown(&mut self, py: Python<'_>) {
        if let Some(mut local) = self.local.take() {
            py.detach(|| local.stop());
        }
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Client>()?;
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
