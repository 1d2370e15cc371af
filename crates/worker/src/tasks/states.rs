//! What the submitter tells the state API about the tasks and actors it owns (see
//! `state_events`): every hook is a no-op when reporting is off.

use super::{Failure, NoReply, Reply, Route, Strategy, Submitter, TaskSpec, CANCELLED};
use crate::state_events::{asked, Names, Shape, State, FAILED, FINISHED};
use oxray_proto::v1;

/// Ray's ErrorType name for how a task ended without a value.
fn error_type(failure: &Failure, actor: bool) -> &'static str {
    match failure {
        Failure::Dependency(_) => "DEPENDENCY_RESOLUTION_FAILED",
        Failure::OutOfMemory(_) => "OUT_OF_MEMORY",
        Failure::Cancelled(_) => "TASK_CANCELLED",
        Failure::RuntimeEnv(_) => "RUNTIME_ENV_SETUP_FAILED",
        Failure::System(_) if actor => "ACTOR_DIED",
        Failure::System(_) => "WORKER_DIED",
    }
}

fn failure_message(failure: &Failure) -> String {
    match failure {
        Failure::Dependency(_) => "an argument of the task failed".to_string(),
        Failure::OutOfMemory(m) | Failure::System(m) | Failure::Cancelled(m) | Failure::RuntimeEnv(m) => m.clone(),
    }
}

/// What a task's submission tells the state API: the shape it shares with the other tasks
/// of its function, named in the report's table.
fn submitted(e: &mut v1::TaskEvent, names: &mut Names, spec: &TaskSpec) {
    let no_group = oxray_types::ResourceSet::default();
    let shape = match &spec.route {
        Route::Lease(resources, _, strategy) => Shape {
            name: &spec.name,
            kind: "NORMAL_TASK",
            actor_id: "",
            placement_group_id: match strategy {
                Strategy::Bundle { group, .. } => group,
                _ => "",
            },
            resources,
        },
        Route::Actor(call) => Shape {
            name: &spec.name,
            kind: if call.creation { "ACTOR_CREATION_TASK" } else { "ACTOR_TASK" },
            actor_id: &call.actor_id,
            placement_group_id: "",
            resources: &no_group,
        },
    };
    match names.shape(&shape) {
        Some(at) => e.shape = at,
        None => {
            let s = shape.to_proto();
            (e.name, e.kind, e.actor_id) = (s.name, s.kind, s.actor_id);
            (e.placement_group_id, e.required_resources) = (s.placement_group_id, s.required_resources);
        }
    }
}

/// What a task raised, as its worker described it.
fn raised(reply: &v1::PushTaskReply) -> String {
    if reply.error_text.is_empty() {
        "the task raised an exception: getting its result raises it".to_string()
    } else {
        reply.error_text.clone()
    }
}

impl Submitter {
    /// Sends the state changes not reported yet (a process that ends sends its last ones).
    pub async fn flush_events(&self) {
        if let (Some(events), Some(head)) = (&self.events, &self.head) {
            events.flush(&mut head.clone()).await;
        }
    }

    pub(super) fn note_submitted(&self, task_id: &str, spec: &TaskSpec) {
        let Some(events) = &self.events else { return };
        let state = if spec.dependencies.is_empty() { State::PendingNodeAssignment } else { State::PendingArgsAvail };
        events.task(task_id, state, |e, names| submitted(e, names, spec));
    }

    /// An actor call sent from the thread that made it: submitted and running at once, one
    /// change to record.
    pub(super) fn note_sent_at_once(&self, task_id: &str, spec: &TaskSpec) {
        let Some(events) = &self.events else { return };
        events.task_states(task_id, &[State::PendingNodeAssignment, State::Running], |e, names| {
            submitted(e, names, spec)
        });
    }

    /// The task's arguments are ready: it waits for a worker now.
    pub(super) fn note_args_ready(&self, task_id: &str, had_dependencies: bool) {
        if let (Some(events), true) = (&self.events, had_dependencies) {
            events.task(task_id, State::PendingNodeAssignment, |_, _| {});
        }
    }

    /// The task was sent to the worker of `lease` (to an actor's worker when `None`).
    pub(super) fn note_running(&self, task_id: &str, lease: Option<&v1::LeaseReply>) {
        let Some(events) = &self.events else { return };
        events.task(task_id, State::Running, |e, names| {
            if let Some(lease) = lease {
                e.place = names.place(&lease.node_id, &lease.worker_id, lease.worker_pid);
            }
        });
    }

    /// The attempt got `reply` and the task runs again.
    pub(super) fn note_retry(&self, task_id: &str, reply: &Reply) {
        let Some(events) = &self.events else { return };
        let (kind, message) = match reply {
            Ok(reply) => ("TASK_EXECUTION_EXCEPTION", raised(reply)),
            Err(NoReply::OutOfMemory(m)) => ("OUT_OF_MEMORY", m.clone()),
            Err(NoReply::RuntimeEnv(m)) => ("RUNTIME_ENV_SETUP_FAILED", m.clone()),
            Err(NoReply::Cancelled) => ("TASK_CANCELLED", CANCELLED.to_string()),
            Err(NoReply::Failed(m)) => ("WORKER_DIED", m.clone()),
        };
        events.retry(task_id, kind, message);
    }

    pub(super) fn note_ended(&self, task_id: &str, actor: bool, outcome: &Result<v1::PushTaskReply, Failure>) {
        let Some(events) = &self.events else { return };
        match outcome {
            Ok(reply) if !reply.is_error => {
                events.task(task_id, FINISHED, |e, _| e.log_offsets.clone_from(&reply.log_offsets))
            }
            Ok(reply) => events.task(task_id, FAILED, |e, _| {
                e.error_type = "TASK_EXECUTION_EXCEPTION".into();
                e.error_message = raised(reply);
                e.log_offsets.clone_from(&reply.log_offsets);
            }),
            Err(failure) => events.task(task_id, FAILED, |e, _| {
                e.error_type = error_type(failure, actor).into();
                e.error_message = failure_message(failure);
            }),
        };
    }

    /// An actor this process owns changed state; what its record knows fills the rest.
    pub(crate) fn note_actor(&self, actor_id: &str, state: &str, fill: impl FnOnce(&mut v1::ActorEvent)) {
        let Some(events) = &self.events else { return };
        let Some(facts) = self.actors.facts(actor_id) else { return };
        let mut event = v1::ActorEvent {
            actor_id: actor_id.to_string(),
            state: state.to_string(),
            detached: facts.detached,
            required_resources: asked(&facts.resources),
            ..Default::default()
        };
        if let Strategy::Bundle { group, .. } = &facts.strategy {
            event.placement_group_id.clone_from(group);
        }
        if let Some(lease) = facts.lease {
            event.node_id = lease.node_id;
            event.worker_id = lease.worker_id;
            event.pid = lease.worker_pid;
        }
        fill(&mut event);
        events.actor(event);
    }

    /// Marks an actor dead here and, when this process owns it, in the state API.
    pub(crate) fn actor_died(&self, actor_id: &str, reason: String) -> Option<super::Lease> {
        self.note_actor(actor_id, "DEAD", |e| e.death_cause.clone_from(&reason));
        self.actors.set_dead(actor_id, reason)
    }
}
