//! The decisions of a RayJob's life, from its spec, its status and what its cluster and head
//! report. Effects (creating clusters, submitting, stopping) happen in `reconcile`.

use serde_json::{json, Value};

use crate::crd::job::{RayJobSpec, RayJobStatus, SubmissionMode};

pub const TERMINAL_JOB: &[&str] = &["SUCCEEDED", "FAILED", "STOPPED"];

pub fn job_finished(status: &str) -> bool {
    TERMINAL_JOB.contains(&status)
}

pub fn deployment_finished(status: &str) -> bool {
    matches!(status, "Complete" | "Failed" | "ValidationFailed")
}

/// What is wrong with a spec, before anything is created.
pub fn validate(spec: &RayJobSpec) -> Result<(), String> {
    let interactive = spec.submission_mode == Some(SubmissionMode::InteractiveMode);
    if spec.entrypoint.trim().is_empty() && !interactive {
        return Err("spec.entrypoint is empty".into());
    }
    match (&spec.ray_cluster_spec, spec.cluster_selector.is_empty()) {
        (Some(_), false) => return Err("give either spec.rayClusterSpec or spec.clusterSelector, not both".into()),
        (None, true) => return Err("give spec.rayClusterSpec or spec.clusterSelector".into()),
        (None, false) if !spec.cluster_selector.contains_key(crate::names::LABEL_CLUSTER) => {
            return Err(format!("spec.clusterSelector must name the cluster with {}", crate::names::LABEL_CLUSTER))
        }
        _ => {}
    }
    if spec.shutdown_after_job_finishes && spec.ray_cluster_spec.is_none() {
        return Err(
            "spec.shutdownAfterJobFinishes needs spec.rayClusterSpec: a selected cluster is not the job's to delete"
                .into(),
        );
    }
    runtime_env(spec)?;
    entrypoint_resources(spec)?;
    Ok(())
}

pub fn runtime_env(spec: &RayJobSpec) -> Result<Option<Value>, String> {
    match spec.runtime_env_yaml.as_deref().map(str::trim).filter(|y| !y.is_empty()) {
        None => Ok(None),
        Some(text) => {
            let value: Value = serde_norway::from_str(text).map_err(|e| format!("spec.runtimeEnvYAML: {e}"))?;
            if !value.is_object() {
                return Err("spec.runtimeEnvYAML must be a mapping".into());
            }
            Ok(Some(value))
        }
    }
}

fn entrypoint_resources(spec: &RayJobSpec) -> Result<Option<Value>, String> {
    match spec.entrypoint_resources.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
        None => Ok(None),
        Some(text) => {
            let value: Value = serde_json::from_str(text).map_err(|e| format!("spec.entrypointResources: {e}"))?;
            let numbers = value.as_object().is_some_and(|m| m.values().all(|v| v.as_f64().is_some_and(|f| f >= 0.0)));
            if !numbers {
                return Err("spec.entrypointResources must be a JSON object of non-negative numbers".into());
            }
            Ok(Some(value))
        }
    }
}

/// The body of the Jobs API submission.
pub fn submission(spec: &RayJobSpec, job_id: &str) -> Result<Value, String> {
    let mut body = json!({"entrypoint": spec.entrypoint, "submission_id": job_id});
    if let Some(env) = runtime_env(spec)? {
        body["runtime_env"] = env;
    }
    if !spec.metadata.is_empty() {
        body["metadata"] = json!(spec.metadata);
    }
    if let Some(cpus) = spec.entrypoint_num_cpus {
        body["entrypoint_num_cpus"] = json!(cpus);
    }
    if let Some(gpus) = spec.entrypoint_num_gpus {
        body["entrypoint_num_gpus"] = json!(gpus);
    }
    if let Some(resources) = entrypoint_resources(spec)? {
        body["entrypoint_resources"] = resources;
    }
    Ok(body)
}

/// Why the job must end now, if a deadline passed. `elapsed` and `pre_running` are seconds
/// since the RayJob started.
pub fn deadline_passed(spec: &RayJobSpec, status: &RayJobStatus, elapsed: f64) -> Option<(&'static str, String)> {
    if let Some(limit) = spec.active_deadline_seconds {
        if elapsed > limit as f64 {
            return Some(("DeadlineExceeded", format!("the RayJob ran past activeDeadlineSeconds ({limit} s)")));
        }
    }
    if let Some(limit) = spec.pre_running_deadline_seconds {
        let started = matches!(status.job_status.as_str(), "RUNNING") || job_finished(&status.job_status);
        if !started && elapsed > limit as f64 {
            return Some((
                "PreRunningDeadlineExceeded",
                format!("the job did not start running within preRunningDeadlineSeconds ({limit} s)"),
            ));
        }
    }
    None
}

/// After the job ended: whether the RayJob gets another try on a new cluster.
pub fn retry(spec: &RayJobSpec, status: &RayJobStatus) -> bool {
    status.job_deployment_status == "Failed"
        && status.reason.as_deref() == Some("AppFailed")
        && status.failed >= 1
        && status.failed <= spec.backoff_limit
}

/// Seconds left before the finished RayJob's cluster is deleted; None when it is kept.
pub fn cluster_deletion_in(spec: &RayJobSpec, since_end: f64) -> Option<f64> {
    spec.shutdown_after_job_finishes.then(|| (spec.ttl_seconds_after_finished as f64 - since_end).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::cluster::RayClusterSpec;
    use std::collections::BTreeMap;

    fn spec() -> RayJobSpec {
        RayJobSpec {
            entrypoint: "python -c 1".into(),
            ray_cluster_spec: Some(RayClusterSpec::default()),
            ..Default::default()
        }
    }

    #[test]
    fn a_spec_names_exactly_one_cluster() {
        assert!(validate(&spec()).is_ok());
        let mut both = spec();
        both.cluster_selector = BTreeMap::from([("ray.io/cluster".into(), "c".into())]);
        assert!(validate(&both).unwrap_err().contains("not both"));
        let mut neither = spec();
        neither.ray_cluster_spec = None;
        assert!(validate(&neither).is_err());
        let mut selected = neither.clone();
        selected.cluster_selector = BTreeMap::from([("ray.io/cluster".into(), "c".into())]);
        assert!(validate(&selected).is_ok());
        selected.shutdown_after_job_finishes = true;
        assert!(validate(&selected).is_err());
    }

    #[test]
    fn bad_runtime_env_and_resources_are_refused() {
        let mut s = spec();
        s.runtime_env_yaml = Some("pip: [requests\n".into());
        assert!(validate(&s).unwrap_err().contains("runtimeEnvYAML"));
        s.runtime_env_yaml = Some("env_vars:\n  A: b\n".into());
        assert!(validate(&s).is_ok());
        s.entrypoint_resources = Some(r#"{"x": -1}"#.into());
        assert!(validate(&s).is_err());
    }

    #[test]
    fn the_submission_carries_the_spec() {
        let mut s = spec();
        s.runtime_env_yaml = Some("env_vars:\n  A: b\n".into());
        s.entrypoint_num_cpus = Some(1.0);
        s.entrypoint_resources = Some(r#"{"x": 2}"#.into());
        let body = submission(&s, "j-1").unwrap();
        assert_eq!(body["submission_id"], "j-1");
        assert_eq!(body["runtime_env"]["env_vars"]["A"], "b");
        assert_eq!(body["entrypoint_num_cpus"], 1.0);
        assert_eq!(body["entrypoint_resources"]["x"], 2);
    }

    #[test]
    fn deadlines() {
        let mut s = spec();
        let st = RayJobStatus::default();
        assert!(deadline_passed(&s, &st, 100.0).is_none());
        s.pre_running_deadline_seconds = Some(10);
        assert_eq!(deadline_passed(&s, &st, 11.0).unwrap().0, "PreRunningDeadlineExceeded");
        let running = RayJobStatus { job_status: "RUNNING".into(), ..Default::default() };
        assert!(deadline_passed(&s, &running, 11.0).is_none());
        s.active_deadline_seconds = Some(5);
        assert_eq!(deadline_passed(&s, &running, 6.0).unwrap().0, "DeadlineExceeded");
    }

    #[test]
    fn retries_follow_the_backoff_limit() {
        let mut s = spec();
        let failed = RayJobStatus {
            job_deployment_status: "Failed".into(),
            reason: Some("AppFailed".into()),
            failed: 1,
            ..Default::default()
        };
        assert!(!retry(&s, &failed));
        s.backoff_limit = 1;
        assert!(retry(&s, &failed));
        let twice = RayJobStatus { failed: 2, ..failed.clone() };
        assert!(!retry(&s, &twice));
        let deadline = RayJobStatus { reason: Some("DeadlineExceeded".into()), ..failed };
        assert!(!retry(&s, &deadline));
    }

    #[test]
    fn the_cluster_goes_after_its_ttl_only_when_asked() {
        let mut s = spec();
        assert_eq!(cluster_deletion_in(&s, 100.0), None);
        s.shutdown_after_job_finishes = true;
        s.ttl_seconds_after_finished = 10;
        assert_eq!(cluster_deletion_in(&s, 4.0), Some(6.0));
        assert_eq!(cluster_deletion_in(&s, 40.0), Some(0.0));
    }
}
