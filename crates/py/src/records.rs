//! What the core hands to Python as named records rather than positional tuples.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A task for this worker to run.
#[pyclass(module = "oxray._native", frozen, get_all)]
pub struct Task {
    pub task_id: String,
    pub name: String,
    pub function: Py<PyBytes>,
    pub args: Py<PyBytes>,
    /// `(object_id, data)` of the arguments passed by reference.
    pub dependencies: Vec<(String, Py<PyBytes>)>,
    pub actor_creation: bool,
    pub actor_method: String,
    pub num_returns: u32,
    pub result_store: String,
    pub streaming: bool,
    /// The lease's GPUs, as "0,1".
    pub gpu_ids: String,
    /// How often an actor being created was restarted before.
    pub restarts: u32,
}

impl Task {
    pub fn new(py: Python<'_>, t: oxray_worker::Incoming) -> Self {
        let bytes = |data: &[u8]| PyBytes::new(py, data).unbind();
        Self {
            dependencies: t.dependencies.iter().map(|(id, data)| (id.clone(), bytes(data))).collect(),
            function: bytes(&t.function),
            args: bytes(&t.args),
            gpu_ids: t.gpu_ids.iter().map(u32::to_string).collect::<Vec<_>>().join(","),
            task_id: t.task_id,
            name: t.name,
            actor_creation: t.actor_creation,
            actor_method: t.actor_method,
            num_returns: t.num_returns,
            result_store: t.result_store,
            streaming: t.streaming,
            restarts: t.restarts,
        }
    }
}

/// A named actor as the head's directory has it.
#[pyclass(module = "oxray._native", frozen, get_all)]
pub struct NamedActor {
    pub actor_id: String,
    pub worker_address: String,
    pub agent_address: String,
    pub lease_id: String,
    pub class_name: String,
    pub methods: Vec<String>,
    /// The creator's object server.
    pub owner: String,
    pub max_task_retries: i64,
}

impl From<oxray_worker::NamedActor> for NamedActor {
    fn from(a: oxray_worker::NamedActor) -> Self {
        Self {
            actor_id: a.actor_id,
            worker_address: a.worker_address,
            agent_address: a.agent_address,
            lease_id: a.lease_id,
            class_name: a.class_name,
            methods: a.methods,
            owner: a.owner,
            max_task_retries: a.max_task_retries,
        }
    }
}

/// Where an actor this process created runs.
#[pyclass(module = "oxray._native", frozen, get_all)]
pub struct ActorPlacement {
    pub worker_address: String,
    pub lease_id: String,
    pub agent_address: String,
}

impl From<oxray_worker::ActorPlacement> for ActorPlacement {
    fn from(p: oxray_worker::ActorPlacement) -> Self {
        Self { worker_address: p.worker_address, lease_id: p.lease_id, agent_address: p.agent_address }
    }
}
