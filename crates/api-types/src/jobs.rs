//! Ray's Jobs REST API shapes: the submit request (checked as Ray checks it) and JobDetails.

use oxray_runtime_env::RuntimeEnv;
use oxray_types::{resource_names as names, JobRecord, ResourceSet};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The header of a job list answer that says how many jobs there are in all (a list asked
/// with `limit` holds only the newest).
pub const TOTAL_JOBS_HEADER: &str = "x-oxray-total-jobs";

/// Errors of the Jobs API, each mapped to the status Ray's server gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    BadRequest(String),
    NotFound(String),
    TooLarge(String),
    /// Ray answers 500 for a delete of a job that still runs, and for server faults.
    Internal(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::BadRequest(m) | ApiError::NotFound(m) | ApiError::TooLarge(m) | ApiError::Internal(m) => {
                f.write_str(m)
            }
        }
    }
}

pub fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("Job {id} does not exist"))
}

/// A checked `POST /api/jobs/` body.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmitRequest {
    pub entrypoint: String,
    pub submission_id: Option<String>,
    pub runtime_env: Map<String, Value>,
    pub parsed_env: RuntimeEnv,
    pub metadata: BTreeMap<String, String>,
    pub resources: ResourceSet,
}

const KNOWN: [&str; 10] = [
    "entrypoint",
    "submission_id",
    "job_id",
    "runtime_env",
    "metadata",
    "entrypoint_num_cpus",
    "entrypoint_num_gpus",
    "entrypoint_memory",
    "entrypoint_resources",
    "entrypoint_label_selector",
];

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

fn amount(field: &str, value: &Value) -> Result<f64, ApiError> {
    match value.as_f64() {
        Some(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(bad(format!("{field} must be a non-negative number, got {value}"))),
    }
}

impl SubmitRequest {
    /// Ray drops null keys, then refuses unknown keys and wrong types.
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| bad(format!("request body is not valid JSON: {e}")))?;
        let Value::Object(mut body) = value else {
            return Err(bad("request body must be a JSON object"));
        };
        body.retain(|_, v| !v.is_null());
        if let Some(key) = body.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(bad(format!("unexpected keyword argument '{key}' in the job submission")));
        }
        let entrypoint = match body.get("entrypoint") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(Value::String(_)) => return Err(bad("entrypoint must not be empty")),
            Some(_) => return Err(bad("entrypoint must be a string")),
            None => return Err(bad("missing required field: entrypoint")),
        };
        let submission_id = match body.get("submission_id").or_else(|| body.get("job_id")) {
            None => None,
            Some(Value::String(s)) if valid_id(s) => Some(s.clone()),
            Some(v) => {
                return Err(bad(format!(
                    "submission_id must be a non-empty string of letters, digits, '-', '_' or '.', got {v}"
                )))
            }
        };
        let runtime_env = match body.get("runtime_env") {
            None => Map::new(),
            Some(Value::Object(o)) => o.clone(),
            Some(_) => return Err(bad("runtime_env must be an object")),
        };
        let parsed_env = RuntimeEnv::parse(&runtime_env).map_err(|e| bad(e.to_string()))?;
        let mut metadata = BTreeMap::new();
        match body.get("metadata") {
            None => {}
            Some(Value::Object(o)) => {
                for (k, v) in o {
                    let Value::String(s) = v else {
                        return Err(bad(format!("metadata values must be strings; {k:?} is {v}")));
                    };
                    metadata.insert(k.clone(), s.clone());
                }
            }
            Some(_) => return Err(bad("metadata must be an object of strings")),
        }
        let mut resources = ResourceSet::new();
        if let Some(v) = body.get("entrypoint_num_cpus") {
            resources.set(names::CPU, amount("entrypoint_num_cpus", v)?).map_err(|e| bad(e.to_string()))?;
        }
        if let Some(v) = body.get("entrypoint_num_gpus") {
            resources.set(names::GPU, amount("entrypoint_num_gpus", v)?).map_err(|e| bad(e.to_string()))?;
        }
        if let Some(v) = body.get("entrypoint_memory") {
            let Some(bytes) = v.as_u64() else {
                return Err(bad(format!("entrypoint_memory must be a non-negative integer, got {v}")));
            };
            resources.set(names::MEMORY, bytes as f64).map_err(|e| bad(e.to_string()))?;
        }
        match body.get("entrypoint_resources") {
            None => {}
            Some(Value::Object(o)) => {
                for (k, v) in o {
                    if [names::CPU, names::GPU, names::MEMORY].contains(&k.as_str()) {
                        return Err(bad(format!(
                            "entrypoint_resources must not contain {k}; use entrypoint_num_cpus, entrypoint_num_gpus or entrypoint_memory"
                        )));
                    }
                    resources
                        .set(k.clone(), amount(&format!("entrypoint_resources[{k}]"), v)?)
                        .map_err(|e| bad(e.to_string()))?;
                }
            }
            Some(_) => return Err(bad("entrypoint_resources must be an object of numbers")),
        }
        if let Some(v) = body.get("entrypoint_label_selector") {
            if !v.as_object().is_some_and(|o| o.values().all(Value::is_string)) {
                return Err(bad("entrypoint_label_selector must be an object of strings"));
            }
        }
        Ok(SubmitRequest { entrypoint, submission_id, runtime_env, parsed_env, metadata, resources })
    }
}

/// Ids are used in file names and URL paths.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && !id.starts_with('.')
}

/// `raysubmit_` and 16 characters without the look-alikes I, l, o, O, 0, as Ray makes them.
pub fn new_submission_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnpqrstuvwxyz123456789";
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system has no random source");
    let tail: String = bytes.iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect();
    format!("raysubmit_{tail}")
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DriverInfo {
    pub id: String,
    pub node_ip_address: String,
    pub pid: String,
}

/// Ray's JobDetails, key for key and in Ray's order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobDetails {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub job_id: Option<String>,
    pub submission_id: Option<String>,
    pub driver_info: Option<DriverInfo>,
    pub status: &'static str,
    pub entrypoint: String,
    pub message: Option<String>,
    pub error_type: Option<String>,
    pub start_time: Option<u64>,
    pub end_time: Option<u64>,
    pub metadata: Option<BTreeMap<String, String>>,
    pub runtime_env: Option<Map<String, Value>>,
    pub driver_agent_http_address: Option<String>,
    pub driver_node_id: Option<String>,
    pub driver_exit_code: Option<i32>,
}

impl JobDetails {
    /// `driver_ip` is the address of the node that runs the entrypoint, when known;
    /// `job_id` the job id its driver was given, once it connected.
    pub fn new(job: &JobRecord, driver_ip: Option<&str>, job_id: Option<String>) -> Self {
        let driver_info = match (job.driver_pid, driver_ip) {
            (Some(pid), Some(ip)) => Some(DriverInfo {
                id: job_id.clone().unwrap_or_else(|| job.submission_id.clone()),
                node_ip_address: ip.to_string(),
                pid: pid.to_string(),
            }),
            _ => None,
        };
        JobDetails {
            kind: "SUBMISSION",
            job_id,
            submission_id: Some(job.submission_id.clone()),
            driver_info,
            status: job.status.as_str(),
            entrypoint: job.entrypoint.clone(),
            message: Some(job.message.clone().unwrap_or_else(|| job.default_message())),
            error_type: job.error_type.clone(),
            start_time: Some(job.start_time),
            end_time: job.end_time,
            metadata: Some(job.metadata.clone()),
            runtime_env: Some(job.runtime_env.clone()),
            driver_agent_http_address: None,
            driver_node_id: job.driver_node_id.as_ref().map(|n| n.hex()),
            driver_exit_code: job.driver_exit_code,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<SubmitRequest, ApiError> {
        SubmitRequest::parse(v.to_string().as_bytes())
    }

    #[test]
    fn accepts_what_rays_cli_sends() {
        let req = parse(json!({
            "entrypoint": "python -c 'print(1)'",
            "submission_id": null,
            "runtime_env": {"env_vars": {"A": "b"}},
            "metadata": {"owner": "me"},
            "entrypoint_num_cpus": 1.0,
            "entrypoint_num_gpus": null,
            "entrypoint_memory": 1024,
            "entrypoint_resources": {"accel": 2},
        }))
        .unwrap();
        assert_eq!(req.submission_id, None);
        assert_eq!(req.resources.get("CPU"), 1.0);
        assert_eq!(req.resources.get("memory"), 1024.0);
        assert_eq!(req.resources.get("accel"), 2.0);
        assert_eq!(req.parsed_env.env_vars["A"], "b");
        assert_eq!(
            parse(json!({"entrypoint": "x", "job_id": "legacy"})).unwrap().submission_id.as_deref(),
            Some("legacy")
        );
    }

    #[test]
    fn refuses_what_ray_refuses() {
        let cases = [
            json!([1]),
            json!({}),
            json!({"entrypoint": 3}),
            json!({"entrypoint": "x", "bogus": 1}),
            json!({"entrypoint": "x", "metadata": {"a": 1}}),
            json!({"entrypoint": "x", "entrypoint_memory": 1.5}),
            json!({"entrypoint": "x", "entrypoint_num_cpus": -1}),
            json!({"entrypoint": "x", "entrypoint_resources": {"CPU": 1}}),
            json!({"entrypoint": "x", "runtime_env": {"conda": "x"}}),
            json!({"entrypoint": "x", "submission_id": "../etc"}),
        ];
        for case in cases {
            assert!(matches!(parse(case.clone()), Err(ApiError::BadRequest(_))), "{case}");
        }
        assert!(matches!(SubmitRequest::parse(b"{not json"), Err(ApiError::BadRequest(_))));
    }

    #[test]
    fn generated_ids_look_like_rays() {
        let id = new_submission_id();
        assert!(id.starts_with("raysubmit_") && id.len() == 26, "{id}");
        assert!(!id[10..].contains(['I', 'l', 'o', 'O', '0']));
        assert_ne!(id, new_submission_id());
    }

    #[test]
    fn details_have_rays_keys_in_order() {
        let job = JobRecord {
            status: oxray_types::JobStatus::Running,
            driver_pid: Some(42),
            ..JobRecord::pending("s1".into(), "echo hi".into(), 5)
        };
        let text = serde_json::to_string(&JobDetails::new(&job, Some("10.0.0.1"), None)).unwrap();
        let keys = [
            "\"type\":\"SUBMISSION\"",
            "\"job_id\":null",
            "\"submission_id\":\"s1\"",
            "\"driver_info\":{",
            "\"status\":\"RUNNING\"",
            "\"message\":\"Job is currently running.\"",
            "\"driver_exit_code\":null",
        ];
        let mut last = 0;
        for key in keys {
            let at = text.find(key).unwrap_or_else(|| panic!("{key} missing in {text}"));
            assert!(at >= last, "{key} out of order in {text}");
            last = at;
        }
        assert!(text.contains("\"pid\":\"42\""), "{text}");
    }
}
