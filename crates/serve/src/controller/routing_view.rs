//! The controller as the head's proxy routes by: prefixes, and each application's ingress
//! replicas that run.

use super::{Controller, State};
use crate::plan::ReplicaState;
use crate::routing::{Route, Routing, Target};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

pub(super) fn prefixes_of(state: &State) -> Vec<(String, String)> {
    state
        .apps
        .iter()
        .filter(|(_, a)| !a.deleting)
        .filter_map(|(name, a)| a.spec.route_prefix.clone().map(|p| (p, name.clone())))
        .collect()
}

pub(super) fn route_of(state: &State, app: &str) -> Option<Route> {
    let a = state.apps.get(app)?;
    let d = a.deployments.get(&a.spec.ingress)?;
    Some(Route {
        app: app.to_string(),
        deployment: a.spec.ingress.clone(),
        status: a.status(),
        replicas: d
            .replicas
            .iter()
            .filter(|r| r.state == ReplicaState::Running)
            .map(|r| Target {
                replica_id: r.replica_id.clone(),
                actor_id: r.actor_id.clone(),
                worker_address: r.worker_address.clone(),
                node_id: r.node_id.clone(),
            })
            .collect(),
        max_ongoing_requests: d.spec.max_ongoing_requests,
        max_queued_requests: d.spec.max_queued_requests,
    })
}

impl Routing for Controller {
    fn prefixes(&self) -> Vec<(String, String)> {
        self.routes()
    }

    fn route(&self, app: &str) -> Option<Route> {
        Controller::route(self, app)
    }

    fn changed(&self) -> &Notify {
        &self.changed
    }

    fn replica_died(&self, replica_id: &str) {
        Controller::replica_died(self, replica_id)
    }

    fn waiting(&self) -> Arc<Mutex<HashMap<String, i64>>> {
        self.queued.clone()
    }
}
