//! The controller's decisions, as pure functions of a deployment's replicas: which replicas
//! to start and stop, and the statuses Ray reports.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReplicaState {
    /// Placed or being placed; its constructor has not finished.
    Starting,
    /// Takes requests.
    Running,
    /// Takes no new requests; ends once those in flight are done.
    Stopping,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replica {
    pub replica_id: String,
    pub actor_id: String,
    pub actor_name: String,
    pub version: String,
    pub state: ReplicaState,
    #[serde(default)]
    pub worker_address: String,
    #[serde(default)]
    pub node_id: String,
    #[serde(default)]
    pub pid: u32,
    pub start_time_s: f64,
    /// Health checks failed in a row.
    #[serde(default)]
    pub health_failures: u32,
    /// The user_config it was last given (a change is applied in place, without a restart).
    #[serde(default)]
    pub user_config: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Start,
    Stop(String),
}

/// How a deployment moves toward `target` replicas of `version`: replicas of the version are
/// started up to the target (none once the deployment failed); replicas of another version
/// serve until enough of the new one run, then stop one by one; replicas beyond the target
/// stop, those still starting first.
pub fn steps(target: u32, version: &str, replicas: &[Replica], failed: bool) -> Vec<Step> {
    let live = |r: &&Replica| r.state != ReplicaState::Stopping;
    let current: Vec<&Replica> = replicas.iter().filter(live).filter(|r| r.version == version).collect();
    let old: Vec<&Replica> = replicas.iter().filter(live).filter(|r| r.version != version).collect();
    let target = target as usize;
    let mut out = Vec::new();
    if current.len() < target && !failed {
        out.extend(std::iter::repeat_n(Step::Start, target - current.len()));
    }
    if current.len() > target {
        let mut extra: Vec<&&Replica> = current.iter().collect();
        // Starting ones first, then the newest.
        extra.sort_by(|a, b| {
            (a.state == ReplicaState::Running)
                .cmp(&(b.state == ReplicaState::Running))
                .then(b.start_time_s.total_cmp(&a.start_time_s))
        });
        out.extend(extra.iter().take(current.len() - target).map(|r| Step::Stop(r.replica_id.clone())));
    }
    let running_new = current.iter().filter(|r| r.state == ReplicaState::Running).count().min(target);
    let running_old = old.iter().filter(|r| r.state == ReplicaState::Running).count();
    // Old replicas that are not needed to keep `target` running, and every old one still
    // starting (it would only be stopped later).
    let surplus = (running_old + running_new).saturating_sub(target);
    let mut old_sorted = old;
    old_sorted.sort_by(|a, b| {
        (a.state == ReplicaState::Running)
            .cmp(&(b.state == ReplicaState::Running))
            .then(a.replica_id.cmp(&b.replica_id))
    });
    let starting_old = old_sorted.iter().filter(|r| r.state != ReplicaState::Running).count();
    out.extend(old_sorted.iter().take(starting_old + surplus).map(|r| Step::Stop(r.replica_id.clone())));
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DeploymentStatus {
    Updating,
    Healthy,
    Unhealthy,
    DeployFailed,
    Upscaling,
    Downscaling,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AppStatus {
    Deploying,
    Running,
    DeployFailed,
    Unhealthy,
    Deleting,
}

/// A deployment's status: failed once its constructor failed `limit` times in a row;
/// healthy when exactly `target` replicas of its version run; a deployment that was healthy
/// and lost replicas is unhealthy until they are back; otherwise it is moving.
pub fn deployment_status(
    target: u32,
    version: &str,
    user_config: &Option<serde_json::Value>,
    replicas: &[Replica],
    failures: u32,
    limit: u32,
    was_healthy: bool,
) -> DeploymentStatus {
    if failures >= limit {
        return DeploymentStatus::DeployFailed;
    }
    let current = |s: ReplicaState| replicas.iter().filter(|r| r.version == version && r.state == s).count();
    let running = current(ReplicaState::Running);
    let others = replicas.iter().filter(|r| r.version != version || r.state != ReplicaState::Running).count();
    // A replica still to be given the new user_config is being updated.
    let stale = replicas.iter().any(|r| r.state == ReplicaState::Running && &r.user_config != user_config);
    if running == target as usize && others == 0 && !stale {
        return DeploymentStatus::Healthy;
    }
    let any_old = stale || replicas.iter().any(|r| r.version != version && r.state != ReplicaState::Stopping);
    if any_old {
        return DeploymentStatus::Updating;
    }
    if was_healthy && running < target as usize {
        return DeploymentStatus::Unhealthy;
    }
    if running + current(ReplicaState::Starting) > target as usize {
        DeploymentStatus::Downscaling
    } else if running < target as usize {
        DeploymentStatus::Upscaling
    } else {
        DeploymentStatus::Downscaling
    }
}

/// What last moved a deployment to its status (Ray's `DeploymentStatusTrigger`).
pub fn status_trigger(status: DeploymentStatus) -> &'static str {
    match status {
        DeploymentStatus::Updating => "CONFIG_UPDATE_STARTED",
        DeploymentStatus::Healthy => "CONFIG_UPDATE_COMPLETED",
        DeploymentStatus::Unhealthy => "HEALTH_CHECK_FAILED",
        DeploymentStatus::DeployFailed => "REPLICA_STARTUP_FAILED",
        DeploymentStatus::Upscaling | DeploymentStatus::Downscaling => "CONFIG_UPDATE_STARTED",
    }
}

/// An application's status from its deployments'.
pub fn app_status(deleting: bool, deployments: &[DeploymentStatus], was_running: bool) -> AppStatus {
    if deleting {
        AppStatus::Deleting
    } else if deployments.contains(&DeploymentStatus::DeployFailed) {
        AppStatus::DeployFailed
    } else if deployments.iter().all(|d| *d == DeploymentStatus::Healthy) {
        AppStatus::Running
    } else if was_running && deployments.contains(&DeploymentStatus::Unhealthy) {
        AppStatus::Unhealthy
    } else if was_running && !deployments.contains(&DeploymentStatus::Updating) {
        // Scaling keeps an application running.
        AppStatus::Running
    } else {
        AppStatus::Deploying
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(id: &str, version: &str, state: ReplicaState, started: f64) -> Replica {
        Replica {
            replica_id: id.into(),
            actor_id: format!("actor-{id}"),
            actor_name: format!("SERVE_REPLICA::app#D#{id}"),
            version: version.into(),
            state,
            worker_address: String::new(),
            node_id: String::new(),
            pid: 0,
            start_time_s: started,
            health_failures: 0,
            user_config: None,
        }
    }
    use ReplicaState::*;

    #[test]
    fn starts_up_to_the_target_unless_failed() {
        assert_eq!(steps(2, "v1", &[], false), vec![Step::Start, Step::Start]);
        assert_eq!(steps(2, "v1", &[replica("a", "v1", Starting, 0.0)], false), vec![Step::Start]);
        assert!(steps(2, "v1", &[], true).is_empty());
    }

    #[test]
    fn scales_down_starting_replicas_first_then_the_newest() {
        let replicas =
            [replica("a", "v1", Running, 1.0), replica("b", "v1", Running, 2.0), replica("c", "v1", Starting, 3.0)];
        assert_eq!(steps(2, "v1", &replicas, false), vec![Step::Stop("c".into())]);
        assert_eq!(steps(1, "v1", &replicas, false), vec![Step::Stop("c".into()), Step::Stop("b".into())]);
        // A replica already stopping counts for nothing.
        let stopping = [replica("a", "v1", Running, 1.0), replica("b", "v1", Stopping, 2.0)];
        assert!(steps(1, "v1", &stopping, false).is_empty());
    }

    #[test]
    fn old_versions_serve_until_new_replicas_run() {
        let old = [replica("a", "v1", Running, 1.0), replica("b", "v1", Running, 2.0)];
        // Nothing new runs yet: start two, stop nothing.
        assert_eq!(steps(2, "v2", &old, false), vec![Step::Start, Step::Start]);
        // One new runs: one old may go.
        let mut mixed = old.to_vec();
        mixed.push(replica("c", "v2", Running, 3.0));
        mixed.push(replica("d", "v2", Starting, 4.0));
        assert_eq!(steps(2, "v2", &mixed, false), vec![Step::Stop("a".into())]);
        // Both new run: the other old goes too.
        mixed[0].state = Stopping;
        mixed[3].state = Running;
        assert_eq!(steps(2, "v2", &mixed, false), vec![Step::Stop("b".into())]);
    }

    #[test]
    fn statuses_follow_the_replicas() {
        let running = [replica("a", "v1", Running, 1.0)];
        assert_eq!(deployment_status(1, "v1", &None, &running, 0, 3, false), DeploymentStatus::Healthy);
        assert_eq!(deployment_status(2, "v1", &None, &running, 0, 3, false), DeploymentStatus::Upscaling);
        assert_eq!(deployment_status(2, "v1", &None, &running, 0, 3, true), DeploymentStatus::Unhealthy);
        assert_eq!(deployment_status(1, "v2", &None, &running, 0, 3, true), DeploymentStatus::Updating);
        assert_eq!(deployment_status(1, "v1", &None, &running, 3, 3, true), DeploymentStatus::DeployFailed);
        let two = [replica("a", "v1", Running, 1.0), replica("b", "v1", Running, 1.0)];
        assert_eq!(deployment_status(1, "v1", &None, &two, 0, 3, true), DeploymentStatus::Downscaling);
        assert_eq!(deployment_status(1, "v1", &None, &[], 0, 3, false), DeploymentStatus::Upscaling);
        let changed = Some(serde_json::json!({"t": 2}));
        assert_eq!(deployment_status(1, "v1", &changed, &running, 0, 3, true), DeploymentStatus::Updating);
    }

    #[test]
    fn app_status_from_deployments() {
        use DeploymentStatus as D;
        assert_eq!(app_status(false, &[D::Healthy, D::Healthy], false), AppStatus::Running);
        assert_eq!(app_status(false, &[D::Healthy, D::Upscaling], false), AppStatus::Deploying);
        assert_eq!(app_status(false, &[D::Healthy, D::Upscaling], true), AppStatus::Running);
        assert_eq!(app_status(false, &[D::Healthy, D::DeployFailed], true), AppStatus::DeployFailed);
        assert_eq!(app_status(false, &[D::Unhealthy], true), AppStatus::Unhealthy);
        assert_eq!(app_status(false, &[D::Updating], true), AppStatus::Deploying);
        assert_eq!(app_status(true, &[D::Healthy], true), AppStatus::Deleting);
    }
}
