//! The items of streaming tasks, each an object of this process as it comes.

use super::*;

impl Submitter {
    /// Takes the items of a streaming task as they come: each an object of this process.
    pub(super) fn expect_items(self: &Arc<Self>, task_id: &str) {
        let yielded = Arc::new(crate::streams::Yielded::default());
        self.streams.lock().expect("streams lock").insert(task_id.to_string(), yielded.clone());
        let this = Arc::downgrade(self);
        let sink = move |mut reply: v1::PushTaskReply| {
            let Some(this) = this.upgrade() else { return };
            let id = this.objects.pending();
            this.objects.add_ref(&id);
            let here = this.object_address.get().map(String::as_str);
            let holds = reply.contained.drain(..).map(|c| this.objects.adopt(c.object_id, c.owner, here)).collect();
            show_output(&reply.output);
            let index = (reply.item - 1) as usize;
            this.objects.fulfil(&id, reply.result, Outcome::Value, holds);
            if !yielded.push(index, id.clone()) {
                this.objects.release(&id);
            }
        };
        self.pushes.on_items(task_id, Arc::new(sink));
    }

    /// The `index`-th object a streaming task yielded (its reference passes to the caller),
    /// waiting for it; `None` once the task ended without it. Up to `deadline`.
    pub async fn next_item(
        &self,
        task_id: &str,
        index: usize,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Option<String>, crate::GetError> {
        let Some(yielded) = self.streams.lock().expect("streams lock").get(task_id).cloned() else {
            return Ok(None);
        };
        let ids = [task_id.to_string()];
        loop {
            let mut changed = yielded.subscribe();
            if let Some(id) = yielded.take(index) {
                return Ok(Some(id));
            }
            if self.objects.ready_now(ids.iter(), 1)?.is_some() {
                // Items come before the task's reply: none is on its way.
                return Ok(yielded.take(index));
            }
            tokio::select! {
                _ = changed.changed() => {}
                waited = self.objects.wait(&ids, 1, deadline) => {
                    if !waited?[0] {
                        return Err(crate::GetError::Timeout(task_id.to_string()));
                    }
                }
            }
        }
    }

    /// The generator of a streaming task let go: the items it never took go.
    pub fn drop_items(&self, task_id: &str) {
        let yielded = self.streams.lock().expect("streams lock").remove(task_id);
        for id in yielded.map(|y| y.untaken()).unwrap_or_default() {
            self.objects.release(&id);
        }
    }
}
