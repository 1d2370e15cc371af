//! The one place where the core's errors become Python exceptions.

use oxray_worker::{GetError, WorkerError};
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyValueError};
use pyo3::PyErr;

pub fn to_py(e: WorkerError) -> PyErr {
    match e {
        WorkerError::NoCluster | WorkerError::Connect(_) => PyConnectionError::new_err(e.to_string()),
        _ => PyRuntimeError::new_err(e.to_string()),
    }
}

pub fn get_error(e: GetError) -> PyErr {
    match e {
        GetError::Timeout(_) => pyo3::exceptions::PyTimeoutError::new_err(e.to_string()),
        GetError::Unknown(_) => PyValueError::new_err(e.to_string()),
    }
}

pub fn status_error(s: tonic::Status) -> PyErr {
    match s.code() {
        tonic::Code::InvalidArgument | tonic::Code::NotFound | tonic::Code::AlreadyExists => {
            PyValueError::new_err(s.message().to_string())
        }
        _ => PyConnectionError::new_err(s.message().to_string()),
    }
}

pub fn parse_token(text: &str) -> pyo3::PyResult<oxray_worker::Token> {
    oxray_worker::Token::parse(text).map_err(|e| PyValueError::new_err(format!("invalid cluster token: {e}")))
}
