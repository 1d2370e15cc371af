//! Cancelling tasks: dropped from their queue, interrupted, or ended with their worker.

use super::*;

impl Submitter {
    pub(super) fn is_cancelled(&self, task_id: &str) -> bool {
        self.cancelled.lock().expect("cancelled lock").contains(task_id)
    }

    /// Cancels a task: its result reads as cancelled at once (and so do the results of
    /// tasks that take it as an argument); a waiting one is dropped, a running one
    /// interrupted (or, with `force`, its worker ended). A cancelled task is not retried.
    /// A task another process submitted (`task_id` borrowed from it) is cancelled there.
    /// Returns whether it had not ended.
    pub async fn cancel(&self, task_id: &str, force: bool) -> bool {
        if let Some(owner) = self.objects.owner_of(task_id) {
            let request = v1::CancelTaskRequest { task_id: task_id.to_string(), force };
            return match self.links.client(&owner) {
                Ok(mut c) => c.cancel_task(request).await.is_ok_and(|r| r.into_inner().was_running),
                Err(_) => false,
            };
        }
        if !self.unfinished.lock().expect("unfinished lock").contains(task_id) {
            return false;
        }
        self.cancelled.lock().expect("cancelled lock").insert(task_id.to_string());
        self.objects.fulfil(
            task_id,
            format!("the task {task_id} failed: {CANCELLED}").into_bytes(),
            Outcome::Cancelled,
            Vec::new(),
        );
        let waiting = {
            let mut shapes = self.shapes();
            shapes.values_mut().find_map(|s| {
                let at = s.waiting.iter().position(|q| q.push.task_id == task_id)?;
                s.waiting.remove(at)
            })
        };
        if let Some(q) = waiting {
            let _ = q.reply.send(Err(NoReply::Cancelled));
            return true;
        }
        let worker = self.running.lock().expect("running lock").get(task_id).cloned();
        // Still waiting for its arguments: `run` stops it before it is queued.
        let Some(address) = worker else { return true };
        let request = v1::CancelTaskRequest { task_id: task_id.to_string(), force };
        match self.worker(&address) {
            Ok(mut client) => client.cancel_task(request).await.map(|r| r.into_inner().was_running).unwrap_or(force),
            Err(_) => false,
        }
    }
}
