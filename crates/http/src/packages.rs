//! Uploaded `working_dir` and `py_modules` packages: `GET` says whether one exists, `PUT`
//! stores the raw archive bytes.

use crate::jobs::error;
use crate::ApiState;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use oxray_api_types::ApiError;

/// Ray's dashboard refuses bodies over 100 MiB: the head's default.
pub const MAX_PACKAGE_BYTES: u64 = 100 * 1024 * 1024;

fn checked(protocol: &str, name: &str) -> Result<(), ApiError> {
    if protocol != "gcs" {
        return Err(ApiError::BadRequest(format!("unsupported package protocol {protocol:?}: only gcs")));
    }
    if oxray_runtime_env::package_name(&format!("gcs://{name}")).is_none() {
        return Err(ApiError::BadRequest(format!(
            "invalid package name {name:?}: a plain file name ending in .zip, .whl, .tar.gz, .tgz or .tar.xz"
        )));
    }
    Ok(())
}

pub async fn head(State(state): State<ApiState>, Path((protocol, name)): Path<(String, String)>) -> Response {
    if let Err(e) = checked(&protocol, &name) {
        return error(e);
    }
    if state.jobs.package_exists(&name) {
        StatusCode::OK.into_response()
    } else {
        (StatusCode::NOT_FOUND, format!("Package gcs://{name} does not exist")).into_response()
    }
}

pub async fn put(
    State(state): State<ApiState>,
    Path((protocol, name)): Path<(String, String)>,
    body: Body,
) -> Response {
    if let Err(e) = checked(&protocol, &name) {
        return error(e);
    }
    let stream = body.into_data_stream().map(|chunk| chunk.map_err(|e| e.to_string())).boxed();
    match state.jobs.put_package(&name, stream, state.max_package_bytes).await {
        Ok(()) => (StatusCode::OK, format!("Successfully uploaded gcs://{name}")).into_response(),
        Err(e) => error(e),
    }
}
