//! The one place where the core's errors become Python exceptions, by kind.

use oxray_worker::{GetError, WorkerError};
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyTimeoutError, PyValueError};
use pyo3::PyErr;

pub fn to_py(e: WorkerError) -> PyErr {
    let message = e.to_string();
    match e {
        WorkerError::NoCluster | WorkerError::Connect(_) | WorkerError::Unreachable(_) => {
            PyConnectionError::new_err(message)
        }
        // Ray raises ValueError for a name that is unknown or taken, and for bad arguments.
        WorkerError::Invalid(_) | WorkerError::NotFound(_) | WorkerError::Exists(_) => PyValueError::new_err(message),
        WorkerError::VersionMismatch(_)
        | WorkerError::Start(_)
        | WorkerError::Malformed(_)
        | WorkerError::ActorDead(_)
        | WorkerError::Failed(_) => PyRuntimeError::new_err(message),
    }
}

pub fn get_error(e: GetError) -> PyErr {
    match e {
        GetError::Timeout(_) => PyTimeoutError::new_err(e.to_string()),
        GetError::Unknown(_) => PyValueError::new_err(e.to_string()),
    }
}

pub fn parse_token(text: &str) -> pyo3::PyResult<oxray_worker::Token> {
    oxray_worker::Token::parse(text).map_err(|e| PyValueError::new_err(format!("invalid cluster token: {e}")))
}
