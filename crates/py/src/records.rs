//! What the core hands to Python as named records rather than positional tuples.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

/// A task for this worker to run. Its fields are Python objects made once: the task loop
/// reads some of them several times per task.
#[pyclass(module = "oxray._native", frozen, get_all)]
pub struct Task {
    pub task_id: Py<PyString>,
    pub name: Py<PyString>,
    pub function: Py<PyBytes>,
    pub args: Py<PyBytes>,
    /// `[(object_id, data)]` of the arguments passed by reference.
    pub dependencies: Py<PyList>,
    pub actor_creation: bool,
    pub actor_method: Py<PyString>,
    pub num_returns: u32,
    pub result_store: Py<PyString>,
    pub streaming: bool,
    /// The lease's GPUs, as "0,1".
    pub gpu_ids: Py<PyString>,
    /// How often an actor being created was restarted before.
    pub restarts: u32,
}

impl Task {
    pub fn new(py: Python<'_>, t: oxray_worker::Incoming) -> PyResult<Self> {
        let bytes = |data: &[u8]| PyBytes::new(py, data).unbind();
        let text = |s: &str| PyString::new(py, s).unbind();
        let dependencies = t.dependencies.iter().map(|(id, data)| (id.as_str(), PyBytes::new(py, data)));
        let gpu_ids = t.gpu_ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        Ok(Self {
            task_id: text(&t.task_id),
            name: text(&t.name),
            function: bytes(&t.function),
            args: bytes(&t.args),
            dependencies: PyList::new(py, dependencies)?.unbind(),
            actor_creation: t.actor_creation,
            actor_method: text(&t.actor_method),
            num_returns: t.num_returns,
            result_store: text(&t.result_store),
            streaming: t.streaming,
            gpu_ids: text(&gpu_ids),
            restarts: t.restarts,
        })
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
