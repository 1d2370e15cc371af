//! Calls to actors. This process's calls to one actor leave in the order they were made,
//! each once its arguments are ready, with at most `CALLS_IN_FLIGHT` unanswered: the worker
//! runs them strictly in order, so calls it holds back must never crowd out the one it
//! waits for. A call with no ObjectRef arguments, made while none waits before it, is
//! written to the worker's connection by the calling thread itself (no hand-off to the
//! runtime's thread); the others go through the actor's queue, which a task of the
//! runtime works through.

use super::{ActorCall, Failure, Job, Route, Submitter};
use crate::objects::Outcome;
use oxray_proto::v1;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Semaphore};

/// Calls to one actor sent and not yet answered, per calling process.
const CALLS_IN_FLIGHT: usize = 256;

/// The built-in method that ends an actor once the calls before it ran.
const TERMINATE: &str = "__ray_terminate__";
/// How long an actor out of scope gets to run its shutdown hooks (Ray's default).
const GRACEFUL_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(30);

/// What an actor's queue carries: calls, and the end of this process's use of the actor.
/// Calls are not boxed: they are nearly all that passes, the end comes once.
#[allow(clippy::large_enum_variant)]
pub(super) enum Next {
    Call(Job),
    /// Answered once every call made before it is answered.
    End(oneshot::Sender<()>),
}

pub(super) struct ActorQueue {
    jobs: mpsc::UnboundedSender<Next>,
    /// Calls in `jobs` not yet given their place in the order.
    queued: AtomicUsize,
    slots: Arc<Semaphore>,
}

impl Submitter {
    /// Sends a call to an actor (not its creation), in this process's order of calls to it.
    pub(super) fn call(self: &Arc<Self>, runtime: &tokio::runtime::Handle, job: Job) {
        let Route::Actor(call) = &job.spec.route else { unreachable!("an actor call") };
        let queue = self.actor_queue(runtime, &call.actor_id);
        let Some(job) = self.call_now(runtime, &queue, job) else { return };
        self.note_submitted(&job.ids[0], &job.spec);
        queue.queued.fetch_add(1, Ordering::SeqCst);
        if let Err(refused) = queue.jobs.send(Next::Call(job)) {
            queue.queued.fetch_sub(1, Ordering::SeqCst);
            if let Next::Call(job) = refused.0 {
                runtime.spawn(self.clone().execute(job, None));
            }
        }
    }

    /// The last handle to an actor this process owns is gone (here and in every process it
    /// was lent to): once the calls made before have been answered, the actor ends, as in
    /// Ray.
    pub async fn end_out_of_scope(self: Arc<Self>, actor_id: String) {
        let queue = self.actor_queue(&tokio::runtime::Handle::current(), &actor_id);
        let (done, answered) = oneshot::channel();
        if queue.jobs.send(Next::End(done)).is_ok() {
            let _ = answered.await;
        }
        tracing::debug!(actor = %actor_id, "no handle is left; ending the actor");
        let deadline = tokio::time::Instant::now() + GRACEFUL_SHUTDOWN;
        self.actors.end_for_good(&actor_id);
        // The actor answers first, then runs its hooks, then tells this process it is gone
        // (which ends its worker): killed before that, it would not run them.
        if self.terminate_gracefully(&actor_id, deadline).await && !self.actors.gone_by(&actor_id, deadline).await {
            tracing::warn!(actor = %actor_id, "the actor did not end within {GRACEFUL_SHUTDOWN:?}; killing it");
        }
        let _ = self.kill_actor(&actor_id, true).await;
    }

    /// Asks a live actor to end itself, as Ray does for an actor out of scope: its
    /// `__ray_shutdown__` and atexit handlers run. Whether it answered by `deadline` (its
    /// worker alive to run them); one that did not is killed all the same by the caller.
    async fn terminate_gracefully(&self, actor_id: &str, deadline: tokio::time::Instant) -> bool {
        let Some(Ok(address)) = self.actors.address_now(actor_id, "", None) else { return false };
        let Ok(place) = self.pushes.place(&address) else { return false };
        let push = v1::PushTaskRequest {
            task_id: crate::objects::new_id(),
            function_name: TERMINATE.into(),
            actor_method: TERMINATE.into(),
            ..Default::default()
        };
        match tokio::time::timeout_at(deadline, self.pushes.push(&address, Some(place), push)).await {
            Ok(reply) => reply.is_ok(),
            Err(_) => {
                tracing::warn!(actor = %actor_id, "the actor did not end within {GRACEFUL_SHUTDOWN:?}; killing it");
                false
            }
        }
    }

    /// Sends the call from this thread if nothing has to happen first: no argument to wait
    /// for, no earlier call waiting for its place, the actor alive, a slot free. Gives the
    /// job back otherwise.
    fn call_now(self: &Arc<Self>, runtime: &tokio::runtime::Handle, queue: &ActorQueue, job: Job) -> Option<Job> {
        let Route::Actor(call) = &job.spec.route else { return Some(job) };
        if !job.spec.dependencies.is_empty() || queue.queued.load(Ordering::SeqCst) > 0 {
            return Some(job);
        }
        let Some(Ok(address)) = self.actors.address_now(&call.actor_id, &call.address, call.owner.as_deref()) else {
            return Some(job);
        };
        let Ok(slot) = queue.slots.clone().try_acquire_owned() else { return Some(job) };
        let _runtime = runtime.enter();
        let Ok(place) = self.pushes.place(&address) else { return Some(job) };
        self.note_sent_at_once(&job.ids[0], &job.spec);
        let Job { mut spec, ids, held } = job;
        let mut push = self.push_request(&ids[0], &mut spec, Vec::new());
        let Route::Actor(mut call) = spec.route else { unreachable!("an actor call") };
        call.place = Some(place);
        call.address = address;
        prepare(&mut push, &mut call);
        let (this, again) = (self.clone(), push.clone());
        let address = call.address.clone();
        self.pushes.send(
            &address,
            call.place,
            push,
            Box::new(move |reply| match reply {
                Ok(reply) => {
                    this.conclude(&ids, &held, true, Ok(reply));
                    drop(slot);
                }
                // Broken: the actor may come back; that takes the runtime.
                Err(cause) => drop(tokio::spawn(async move {
                    let outcome = this.call_actor(again, call, &spec.name, Some(cause)).await;
                    this.conclude(&ids, &held, true, outcome);
                    drop(slot);
                })),
            }),
        );
        None
    }

    fn actor_queue(self: &Arc<Self>, runtime: &tokio::runtime::Handle, actor_id: &str) -> Arc<ActorQueue> {
        let mut queues = self.actor_queues.lock().expect("actor queues lock");
        if let Some(q) = queues.get(actor_id).filter(|q| !q.jobs.is_closed()) {
            return q.clone();
        }
        let (jobs, mut rx) = mpsc::unbounded_channel::<Next>();
        let queue = Arc::new(ActorQueue {
            jobs,
            queued: AtomicUsize::new(0),
            slots: Arc::new(Semaphore::new(CALLS_IN_FLIGHT)),
        });
        let (this, working) = (self.clone(), queue.clone());
        runtime.spawn(async move {
            while let Some(next) = rx.recv().await {
                let mut job = match next {
                    Next::Call(job) => job,
                    Next::End(done) => {
                        // Every call sent before holds a slot until it is answered.
                        let _all = working.slots.clone().acquire_many_owned(CALLS_IN_FLIGHT as u32).await;
                        let _ = done.send(());
                        return;
                    }
                };
                // A call with a failed argument is never sent (`run` reports the failure), so
                // it takes no place in the order.
                let settled = this.objects.get(&job.spec.dependencies, None).await;
                let sent = settled.is_ok_and(|values| values.iter().all(|v| v.outcome == Outcome::Value));
                let Route::Actor(call) = &mut job.spec.route else { continue };
                // A restarting actor holds its calls until it is back.
                let address = this.actor_address(&call.actor_id, &call.address, call.owner.as_deref()).await;
                let Ok(slot) = working.slots.clone().acquire_owned().await else { return };
                match address {
                    Ok(address) if sent => match this.pushes.place(&address) {
                        Ok(place) => {
                            call.place = Some(place);
                            call.address = address;
                        }
                        Err(reason) => call.dead = Some(reason),
                    },
                    Ok(_) => {}
                    Err(reason) => call.dead = Some(reason),
                }
                working.queued.fetch_sub(1, Ordering::SeqCst);
                tokio::spawn(this.clone().execute(job, Some(slot)));
            }
        });
        queues.insert(actor_id.to_string(), queue.clone());
        queue
    }

    /// Sends an actor call (`push` as `prepare` made it), or carries on with one whose
    /// connection `broke`: a call broken by the actor's death goes to the restarted actor
    /// as often as `max_task_retries` allows.
    pub(super) async fn call_actor(
        self: &Arc<Self>,
        push: v1::PushTaskRequest,
        mut call: ActorCall,
        name: &str,
        mut broke: Option<String>,
    ) -> Result<v1::PushTaskReply, Failure> {
        if let Some(reason) = call.dead.take() {
            return Err(Failure::System(reason));
        }
        let mut retries = call.max_task_retries;
        loop {
            let cause = match broke.take() {
                Some(cause) => cause,
                None => {
                    if call.creation {
                        self.actors.remember_creation(&call.actor_id, &push);
                    }
                    self.note_running(&push.task_id, None);
                    match self.pushes.push(&call.address, call.place, push.clone()).await {
                        Ok(reply) => return Ok(reply),
                        Err(cause) => cause,
                    }
                }
            };
            let broken = format!("the actor running {name} died or is unreachable: {cause}");
            if call.creation {
                return Err(Failure::System(broken));
            }
            match self.actor_failed(&call.actor_id, &call.address).await {
                Ok(address) if retries != 0 => {
                    retries -= 1;
                    call.place = Some(self.pushes.place(&address).map_err(Failure::System)?);
                    call.address = address;
                }
                Ok(_) => {
                    return Err(Failure::System(format!(
                        "{broken}; the actor was restarted, but the call is not retried (max_task_retries=0)"
                    )))
                }
                Err(reason) => return Err(Failure::System(format!("{broken}; {reason}"))),
            }
        }
    }
}

/// Marks a task's push as the actor call it is.
pub(super) fn prepare(push: &mut v1::PushTaskRequest, call: &mut ActorCall) {
    push.actor_creation = call.creation;
    push.gpu_ids = std::mem::take(&mut call.gpu_ids);
    push.actor_method = std::mem::take(&mut call.method);
}
